// Lab 02's checker (given, do not edit): the reduction check grid through the harness (random data
// against an fp64 sum, ragged sizes), then every variant timed beside a device-to-device copy.
#include <fmt/format.h>

#include "common/strings.hpp"
#include "labs/common/lab.hpp"

namespace {
constexpr int kStep = 52;
constexpr std::int64_t kTimedCount = std::int64_t(1) << 26;  // 256 MiB of floats
}  // namespace

int main(int argc, char** argv) {
  const lab::Options options = lab::parse(argc, argv, "L02", "reduction: atomics, smem tree, warp shuffle, two levels");
  lab::Verdict verdict("L02");
  const double bytes = 4.0 * double(kTimedCount);
  fmt::print("\nthe timed problem: n = 2^26 floats, {:.3g} GB read once; a sum is bound by how fast that "
             "streams,\nso each variant's GB/s is compared with a copy of the same array (read + write).\n", bytes / 1e9);
  lab::check_registration(kStep, {"atomic", "smem_tree", "warp_shuffle", "two_level"}, verdict);
  if (options.cpu_only) return verdict.finish_cpu_only();

  std::string why_not;
  auto session = lab::open_gpu(why_not);
  if (!session) return verdict.finish_without_gpu(why_not);
  try {
    const auto variants = lab::variants_of_step(kStep);
    const std::int64_t counts[] = {1, 17, 1000, 1023, (1 << 20) + 3, (1 << 24) + 1};
    lab::reduction_grid(*session, variants, counts, verdict);

    if (!options.no_time && verdict.ok()) {
      const auto run = lab::show(ladder::run_reduction(*session, ladder::ReductionShape{kTimedCount}, variants,
                                                       lab::timed_options()));
      double copy_gbps = 0;
      for (const auto& r : run.rows)
        if (r.ceiling && r.timing) copy_gbps = r.gbps();
      for (const auto& r : run.rows)
        if (r.timing)
          verdict.info(fmt::format("timed n=2^26: {:<16} {:8.3f} ms  {:7.0f} GB/s{}", r.id, r.timing->median_ms, r.gbps(),
                                   r.ceiling || copy_gbps <= 0 ? std::string{}
                                                               : fmt::format("  ({:.0f}% of the copy)", 100 * r.gbps() / copy_gbps)));
    }
  } catch (const std::exception& e) {
    verdict.fail(std::string("the checker stopped: ") + e.what());
  }
  return verdict.finish();
}
