// Lab 06's checker (given, do not edit): your ring.hpp in the protocol model first (every
// interleaving of small rings, random schedules of the kernel's; no GPU needed), then the kernel
// that uses it on the attention grid, with every wait bounded so that a wrong parity is reported
// as the wait that never completed instead of a hung GPU.
#include <fmt/format.h>

#include <string>

// <>, not "": your answers or the solution's, whichever folder the build put on the include path
// (labs/CMakeLists.txt) — the same file the kernel was compiled with.
#include <ring.hpp>

#include "labs/L06_mbarrier_ring/lab06.hpp"
#include "labs/L06_mbarrier_ring/model.hpp"
#include "labs/common/lab.hpp"

namespace {

lab06::model::Protocol yours() {
  return {ring::stage, ring::full_parity, ring::empty_parity, ring::expect_bytes, ring::kRelease};
}

void show_answers() {
  constexpr int s = lab06::kStages;
  fmt::print("\nyour answers (ring.hpp), for the kernel's ring of {} stages:\n  block i       ", s);
  for (int i = 0; i < 6; ++i) fmt::print("{:>3}", i);
  fmt::print("\n  stage         ");
  for (int i = 0; i < 6; ++i) fmt::print("{:>3}", ring::stage(i, s));
  fmt::print("\n  full parity   ");
  for (int i = 0; i < 6; ++i) fmt::print("{:>3}", ring::full_parity(i, s));
  fmt::print("\n  empty parity  ");
  for (int i = 0; i < 6; ++i) fmt::print("{:>3}", ring::empty_parity(i, s));
  fmt::print("\n  expect_tx     D=64: {} bytes ({} for a ragged block of 17 rows); D=128: {} bytes\n",
             ring::expect_bytes(lab06::kBlockN, 64, lab06::kBlockN), ring::expect_bytes(lab06::kBlockN, 64, 17),
             ring::expect_bytes(lab06::kBlockN, 128, lab06::kBlockN));
  fmt::print("  release       {}\n", lab06::release_name(ring::kRelease));
}

std::string describe(const lab06::Stall& st) {
  const bool producer = st.waiter == int(lab06::Waiter::kProducer);
  const std::string bar = st.stage < 0 ? std::string("q_full") : fmt::format("{}[{}]", producer ? "empty" : "full", st.stage);
  return fmt::format("the {} (warp {} of CTA ({}, {})) waited on {} for parity {}{}{}", producer ? "producer" : "consumer",
                     st.warp, st.cta_x, st.cta_y, bar, st.parity,
                     st.block >= 0 ? fmt::format(" (block {})", st.block) : std::string(),
                     st.timed_out ? fmt::format(" for {} ms", lab06::stall_ms()) : std::string());
}

std::string describe(const lab06::Stalls& s) {
  std::string out = "deadlock: ";
  if (s.producer.waiter) out += describe(s.producer);
  if (s.producer.waiter && s.consumer.waiter) out += ", and ";
  if (s.consumer.waiter) out += describe(s.consumer);
  return out + ", when the launch gave up";
}

}  // namespace

int main(int argc, char** argv) {
  const lab::Options options = lab::parse(argc, argv, "L06", "the K/V mbarrier ring of a warp-specialized Hopper kernel");
  lab::Verdict verdict("L06");
  lab::check_registration(lab06::kStep, {"ring"}, verdict);
  show_answers();

  // ---- The model (CPU) ----
  fmt::print("\nthe protocol model: every interleaving of small rings (2-4 stages, 1-3 consumers, N from one block to "
             "several laps), then random schedules of the kernel's ring ({} stages, {} consumer warps)\n",
             lab06::kStages, lab06::kConsumerWarps);
  const auto summary = lab06::model::check(yours());
  if (summary.finding.problem != lab06::model::Problem::kNone) {
    fmt::print("model: FAIL, {}", lab06::model::format(summary.finding));
    verdict.fail(fmt::format("the model: {}: {}", lab06::model::problem_name(summary.finding.problem), summary.finding.what));
  } else {
    const std::string line = fmt::format("model: PASS ({} rings explored exhaustively, {} states; {} random schedules of the "
                                         "kernel's ring)", summary.configs, summary.states, summary.walks);
    fmt::print("{}\n", line);
  }
  if (options.cpu_only) return verdict.finish_cpu_only();

  // ---- The kernel (GPU) ----
  std::string why_not;
  auto session = lab::open_gpu(why_not);
  if (!session) return verdict.finish_without_gpu(why_not);
  if (session->gpu.sm != 90)
    return verdict.finish_without_gpu(fmt::format("the kernel is sm_90a code (wgmma, TMA, setmaxnreg) and this GPU is sm_{}",
                                                  session->gpu.sm));
  try {
    const auto variants = lab::variants_of_step(lab06::kStep);
    lab06::take_stalls();  // start clean
    auto grid = [&](const std::vector<ladder::AttentionShape>& shapes, const ladder::RunOptions& run_options) {
      for (const auto& shape : shapes) {
        const auto run = ladder::run_attention(*session, shape, variants, run_options);
        const lab06::Stalls stall = session->context_lost ? lab06::Stalls{} : lab06::take_stalls();
        for (const auto& r : run.rows) {
          if (r.ceiling) continue;
          const std::string why = lab::judge(r, variants[0].variant(), ladder::Problem(shape), session->gpu.sm);
          fmt::print("  {:<40} {}  {}\n", run.shape, why.empty() ? " ok " : "FAIL",
                     why.empty() && r.error ? fmt::format("max|err| {:.2e} (allowed {:.2e})", r.error->max_abs, r.error->tolerance) : why);
          if (!why.empty()) verdict.fail(fmt::format("{}: {}", run.shape, why));
        }
        if (stall.any()) {
          fmt::print("  {:<40} {}\n", "", describe(stall));
          verdict.fail(fmt::format("{}: {}", run.shape, describe(stall)));
        }
        if (session->context_lost) throw std::runtime_error("a kernel fault made the GPU unusable");
      }
    };
    fmt::print("\ncheck grid (fp64 reference, every row checked, output poisoned with NaN; a wait that does not "
               "complete in {} ms is reported as a deadlock):\n", lab06::stall_ms());
    grid(lab::attention_grid_shapes(), lab::check_options());
    fmt::print("\nlarge logits (Q×5, K×3):\n");
    grid(lab::large_logit_shapes(), lab::large_logit_options());

    if (!options.no_time && verdict.ok()) {
      for (int d : {64, 128}) {
        const ladder::AttentionShape timed{.batch = 4, .heads = 8, .seqlen = 4096, .head_dim = d, .causal = false};
        const auto run = lab::show(ladder::run_attention(*session, timed, variants, lab::timed_options()));
        for (const auto& r : run.rows)
          if (r.timing)
            verdict.info(fmt::format("timed {}: {:<12} {:8.3f} ms  {:6.1f} TFLOP/s", timed.to_string(), r.id,
                                     r.timing->median_ms, r.tflops()));
      }
    }
  } catch (const std::exception& e) {
    verdict.fail(std::string("the checker stopped: ") + e.what());
  }
  return verdict.finish();
}
