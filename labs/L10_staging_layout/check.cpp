// Lab 10's checker (given, do not edit): your layout.hpp in the bank model first (every
// shared-memory instruction that touches S or P, 32 lanes' addresses each, no GPU needed), then
// the kernel with your layout (staging.cu) on the attention grid against fp64, beside the naive
// layout, and both timed at the series' workload.
#include <fmt/format.h>

#include <string>

// <>, not "": your layout or the solution's (labs/CMakeLists.txt), the kernel's file.
#include <layout.hpp>

#include "labs/L10_staging_layout/lab10.hpp"
#include "labs/L10_staging_layout/model.hpp"
#include "labs/common/lab.hpp"

namespace {

constexpr int kStep = 60;

int s_yours(int row, int col) { return layout::s_index(row, col); }
int p_yours(int row, int col) { return layout::p_index(row, col); }
int s_naive(int row, int col) { return lab10::NaiveLayout::s_index(row, col); }
int p_naive(int row, int col) { return lab10::NaiveLayout::p_index(row, col); }

// 6291456 -> "6,291,456".
std::string grouped(long v) {
  std::string s = std::to_string(v);
  for (int i = int(s.size()) - 3; i > 0; i -= 3) s.insert(std::size_t(i), ",");
  return s;
}

// The wavefronts of each instruction kind, per CTA and key block, and at the series' workload.
void print_counts(const lab10::model::Layout& l, const char* title) {
  fmt::print("  {}:\n    {:<50} {:>6} {:>11} {:>6} {:>7}   {}\n", title, "instruction", "count", "wavefronts", "ideal",
             "excess", "excess at B=1 H=64 N=1024");
  for (const auto& t : lab10::model::count_all(l))
    fmt::print("    {:<50} {:>6} {:>11} {:>6} {:>7}   {:>12}\n", lab10::model::kind_name(t.kind), t.instructions,
               t.wavefronts, t.ideal, t.wavefronts - t.ideal,
               grouped(long(t.wavefronts - t.ideal) * lab10::model::kSeriesCtaBlocks));
}

}  // namespace

int main(int argc, char** argv) {
  const lab::Options options = lab::parse(argc, argv, "L10", "the bank conflicts of a staging layout");
  lab::Verdict verdict("L10");
  lab::check_registration(kStep, {"yours", "naive"}, verdict);

  const lab10::model::Layout yours{s_yours, layout::kSFloats, p_yours, layout::kPHalves};
  const lab10::model::Layout naive{s_naive, lab10::NaiveLayout::kSFloats, p_naive, lab10::NaiveLayout::kPHalves};
  fmt::print("\nthe bank model: every shared-memory instruction on S and P of one key block of one CTA (4 warps)\n");
  fmt::print("your layout (layout.hpp): S {} floats (S[1][0] at {}, S[0][2] at {}), P {} halves (P[1][0] at {}, P[0][8] at {})\n",
             layout::kSFloats, layout::s_index(1, 0), layout::s_index(0, 2), layout::kPHalves, layout::p_index(1, 0),
             layout::p_index(0, 8));
  const auto finding = lab10::model::check(yours);
  if (finding.what.rfind("check 4", 0) == 0 || finding.what.empty()) print_counts(yours, "your layout");
  print_counts(naive, "the naive layout (dense row-major), for comparison");
  if (finding.what.empty()) {
    fmt::print("model: PASS (one-to-one, vectors whole and aligned, every instruction conflict-free)\n");
  } else {
    fmt::print("model: FAIL, {}\n", finding.what);
    if (finding.conflicts.empty()) verdict.fail("the model, " + finding.what);
    for (const auto& c : finding.conflicts) verdict.fail("the model, check 4 (bank conflicts): " + c);
  }
  if (options.cpu_only) return verdict.finish_cpu_only();

  std::string why_not;
  auto session = lab::open_gpu(why_not);
  if (!session) return verdict.finish_without_gpu(why_not);
  try {
    const auto variants = lab::variants_of_step(kStep);
    fmt::print("\ncheck grid (yours and naive; fp64 reference, every row checked, output poisoned with NaN):\n");
    lab::attention_grid(*session, variants, lab::attention_grid_shapes(), verdict, lab::check_options());
    fmt::print("\nlarge logits (Q×5, K×3):\n");
    lab::attention_grid(*session, variants, lab::large_logit_shapes(), verdict, lab::large_logit_options());
    if (!options.no_time && verdict.ok()) {
      for (bool causal : {false, true}) {
        const ladder::AttentionShape timed{.batch = 1, .heads = 64, .seqlen = 1024, .head_dim = 128, .causal = causal};
        const auto run = lab::show(ladder::run_attention(*session, timed, variants, lab::timed_options()));
        for (const auto& r : run.rows)
          if (r.timing)
            verdict.info(fmt::format("timed {}: {:<12} {:8.4f} ms  {:6.1f} TFLOP/s", timed.to_string(), r.id,
                                     r.timing->median_ms, r.tflops()));
      }
    }
  } catch (const std::exception& e) {
    verdict.fail(std::string("the checker stopped: ") + e.what());
  }
  return verdict.finish();
}
