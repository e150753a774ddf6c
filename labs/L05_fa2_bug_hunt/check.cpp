// Lab 05's checker (given, do not edit): the attention check grid on the lab's kernel, shown as a
// map of which shapes pass and which fail (the map is the clue), then a timed run once it passes.
#include <fmt/format.h>

#include <map>

#include "labs/common/lab.hpp"

namespace {
constexpr int kStep = 55;
constexpr int kSeqlens[] = {1, 17, 64, 65, 113, 128, 1000, 2048};
}  // namespace

int main(int argc, char** argv) {
  const lab::Options options = lab::parse(argc, argv, "L05", "a FlashAttention-2 bug hunt");
  lab::Verdict verdict("L05");
  lab::check_registration(kStep, {"bc64"}, verdict);
  fmt::print("\nthe grid: N ∈ {{1, 17, 64, 65, 113, 128, 1000, 2048}} × D ∈ {{64, 128}} × causal or not, 3 heads;\n"
             "the kernel's tiles are 128 query rows × 64 keys.\n");
  if (options.cpu_only) return verdict.finish_cpu_only();

  std::string why_not;
  auto session = lab::open_gpu(why_not);
  if (!session) return verdict.finish_without_gpu(why_not);
  try {
    const auto variants = lab::variants_of_step(kStep);
    std::map<std::pair<int, bool>, std::string> map;  // (D, causal) -> one cell per N
    fmt::print("\ncheck grid (fp64 reference, every row checked, output poisoned with NaN):\n");
    for (int d : {64, 128})
      for (bool causal : {false, true})
        for (int n : kSeqlens) {
          const ladder::AttentionShape shape{.batch = 1, .heads = 3, .seqlen = n, .head_dim = d, .causal = causal};
          const auto run = ladder::run_attention(*session, shape, variants, lab::check_options());
          std::string cell = "  ?  ";
          for (const auto& r : run.rows) {
            if (r.ceiling) continue;
            const std::string why = lab::judge(r, variants[0].variant(), ladder::Problem(shape), session->gpu.sm);
            cell = why.empty() ? "  ok " : " FAIL";
            fmt::print("  {:<40} {}  {}\n", run.shape, why.empty() ? " ok " : "FAIL",
                       why.empty() && r.error ? fmt::format("max|err| {:.2e} (allowed {:.2e})", r.error->max_abs, r.error->tolerance) : why);
            if (!why.empty()) verdict.fail(fmt::format("{}: {}", run.shape, why));
          }
          map[{d, causal}] += fmt::format("{:>6}", cell);
          if (session->context_lost) throw std::runtime_error("a kernel fault made the GPU unusable");
        }
    fmt::print("\nthe map (which shapes fail is the clue: how many key blocks does a row see?):\n  {:<18}", "N =");
    for (int n : kSeqlens) fmt::print("{:>6}", n);
    fmt::print("\n");
    for (const auto& [key, cells] : map) fmt::print("  D={:<3} {:<11}{}\n", key.first, key.second ? "causal" : "non-causal", cells);

    fmt::print("\nlarge logits (Q×5, K×3):\n");
    lab::attention_grid(*session, variants, lab::large_logit_shapes(), verdict, lab::large_logit_options());

    if (!options.no_time && verdict.ok()) {
      const ladder::AttentionShape timed{.batch = 4, .heads = 8, .seqlen = 4096, .head_dim = 64, .causal = false};
      const auto run = lab::show(ladder::run_attention(*session, timed, variants, lab::timed_options()));
      for (const auto& r : run.rows)
        if (r.timing)
          verdict.info(fmt::format("timed {}: {:<12} {:8.3f} ms  {:6.1f} TFLOP/s", timed.to_string(), r.id,
                                   r.timing->median_ms, r.tflops()));
    }
  } catch (const std::exception& e) {
    verdict.fail(std::string("the checker stopped: ") + e.what());
  }
  return verdict.finish();
}
