// Lab 01's checker (given, do not edit): builds with your kernel file, runs the matrix-product check
// grid through the harness, counts the global reads of both kernels on 64×64 matrices, and times
// them on a large problem.
#include <fmt/format.h>

#include <vector>

#include "common/device_buffer.hpp"
#include "common/random.hpp"
#include "common/strings.hpp"
#include "labs/L01_tiled_matmul/lab01.hpp"
#include "labs/common/lab.hpp"

namespace {

constexpr int kPuzzle = 64;     // the puzzle's matrices are 64×64
constexpr int kTileOfLab = 16;  // and its tiles 16×16

// Element reads of A and B by one launch on M×K × K×N inputs, counted by the kernel itself.
unsigned long long count_reads(ladder::Session& session, int m, int n, int k, bool tiled) {
  using ladder::DeviceBuffer;
  DeviceBuffer<float> a(std::size_t(m) * k), b(std::size_t(k) * n), c(std::size_t(m) * n);
  DeviceBuffer<unsigned long long> reads(1);
  a.upload(ladder::random_normal(a.size(), 1, 0));
  b.upload(ladder::random_normal(b.size(), 2, 0));
  reads.fill_bytes(0, session.stream.get());
  const ladder::MatmulArgs args{{m, n, k}, a.get(), b.get(), c.get(), nullptr};
  (tiled ? lab01::launch_tiled : lab01::launch_naive)(args, reads.get(), session.stream.get());
  session.stream.synchronize();
  return reads.download()[0];
}

}  // namespace

int main(int argc, char** argv) {
  const lab::Options options = lab::parse(argc, argv, "L01", "tiled matrix product: the global-read ledger");
  lab::Verdict verdict("L01");

  // ---- CPU part: the model ledger you were asked to predict ------------------------------------
  const double m = kPuzzle, mnk = m * m * m;
  fmt::print("\nmodel ledger for C = A B, {0}×{0} matrices (element reads of A and B, caches ignored):\n", kPuzzle);
  fmt::print("  naive:            2·M·N·K     = {}\n", ladder::grouped(2 * mnk));
  fmt::print("  {0}×{0} tiles:      2·M·N·K/{0}  = {1}\n", kTileOfLab, ladder::grouped(2 * mnk / kTileOfLab));
  fmt::print("  A and B once:     M·K + K·N   = {}\n", ladder::grouped(2 * m * m));
  lab::check_registration(lab01::kStep, {"naive", "tiled16"}, verdict);
  if (options.cpu_only) return verdict.finish_cpu_only();

  std::string why_not;
  auto session = lab::open_gpu(why_not);
  if (!session) return verdict.finish_without_gpu(why_not);

  try {
    // ---- The check grid: ragged shapes, both kernels, fp64 reference ---------------------------
    const auto variants = lab::variants_of_step(lab01::kStep);
    const ladder::MatmulShape shapes[] = {{1, 1, 1}, {17, 33, 5}, {64, 64, 64}, {113, 127, 129}, {1000, 1023, 300}};
    lab::matmul_grid(*session, variants, shapes, verdict);

    // ---- The ledger, counted by the kernels themselves ------------------------------------------
    const unsigned long long naive = count_reads(*session, kPuzzle, kPuzzle, kPuzzle, false);
    const unsigned long long tiled = count_reads(*session, kPuzzle, kPuzzle, kPuzzle, true);
    const auto model = static_cast<unsigned long long>(2 * mnk / kTileOfLab);
    fmt::print("\nledger COUNTED on the GPU, {0}×{0} matrices (element reads of A and B):\n", kPuzzle);
    fmt::print("  naive (given):    {}\n", ladder::grouped(double(naive)));
    fmt::print("  yours (tiled16):  {}   (model {}: {:.1f}× fewer than naive)\n", ladder::grouped(double(tiled)),
               ladder::grouped(double(model)), tiled ? double(naive) / double(tiled) : 0.0);
    if (tiled == 0)
      verdict.fail("your kernel read nothing from A or B (the counter stayed at 0): fill in TODO(1) and TODO(2)");
    else if (tiled > model)
      verdict.fail(fmt::format("your kernel read {} elements of A and B, more than the {} a {}×{} tiling needs: "
                               "is every element loaded once per block and slab, and read from shared memory after?",
                               ladder::grouped(double(tiled)), ladder::grouped(double(model)), kTileOfLab, kTileOfLab));
    verdict.info(fmt::format("ledger: naive {} reads, yours {} (model {})", ladder::grouped(double(naive)),
                             ladder::grouped(double(tiled)), ladder::grouped(double(model))));

    // ---- Timed: what the ledger buys on a large problem ----------------------------------------
    if (!options.no_time && verdict.ok()) {
      const auto run = lab::show(ladder::run_matmul(*session, {2048, 2048, 2048}, variants, lab::timed_options()));
      for (const auto& r : run.rows)
        if (r.timing)
          verdict.info(fmt::format("timed 2048³: {:<14} {:8.3f} ms  {:6.2f} TFLOP/s", r.id, r.timing->median_ms, r.tflops()));
    }
  } catch (const std::exception& e) {
    verdict.fail(std::string("the checker stopped: ") + e.what());
  }
  return verdict.finish();
}
