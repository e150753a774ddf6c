// Comparing a kernel's output with the references, and the pass rule.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>

#include "common/dtype.hpp"

namespace ladder {

// How far past the pass rule's tolerance an approximate variant (Variant::approximate: fp16
// accumulators, say) may err before it is a bug rather than the measured cost of the trade.
inline constexpr double kApproximateSlack = 64.0;

struct ErrorStats {
  std::int64_t checked = 0;     // values compared with the reference
  std::int64_t nonfinite = 0;   // NaN or inf anywhere in the output (the poison is NaN)
  std::int64_t total = 0;       // values in the whole output
  double max_abs = 0;           // max |kernel − fp64|
  double rel_l2 = 0;            // ‖kernel − fp64‖ / ‖fp64‖
  double lowprec_max_abs = 0;   // max |low-precision reference − fp64|
  double tolerance = 0;         // 2·lowprec_max_abs + abs_term
  std::int64_t reference_nonfinite = 0;  // NaN/inf in either reference: nothing can be judged
  double worst_error = 0;       // row-wise rule: the error of the row nearest its tolerance
  // fp8's aggregate rule: the median over the checked rows of a row's error over its low-precision
  // error (plus its abs term), and the most it may be (0: no such rule).
  double median_row_ratio = 0;
  double median_row_limit = 0;
  bool pass = false;
  std::string verdict() const;  // "pass", or why not
  // What an approximate variant's row says instead of verdict(): "approx: <why> (error k× the
  // tolerance)", k the worst row's error over its tolerance. Never the word FAIL.
  std::string approx_verdict(const std::string& why) const;
  // For an experiment that trades accuracy on purpose (Variant::approximate): every value written
  // and finite, a finite reference, and the worst row's error at most `slack` times its tolerance.
  bool within(double slack) const;
};

// The pass rule, in the style of FlashAttention's tests: no non-finite value anywhere, and
// max |kernel − fp64| ≤ 2·max |lowprec − fp64| + abs_term. An empty comparison, or a reference
// that is not finite, fails: a check that looked at nothing must not pass.
//
// fp8 (Part VIII) keeps the rule, with one allowance and one more check. The fp64 reference is
// exact arithmetic on the values the kernel is given (the dequantized e4m3 Q, K, V), and the
// low-precision one rounds what the kernel rounds: P to e4m3 (with FlashAttention-3's 2^8
// offset) before P·V and O to bf16 (reference.hpp, Precision::Low). So "max error ≤ 2 × the low reference's + one bf16 ulp, row by
// row" is the issue's "within 2× of a reference that rounds Q, K, V and P to FP8 the same way":
// the input quantization is the same for all three and cancels; the kernel is allowed twice the
// error of the roundings it must make, no more. What quantizing Q, K and V costs against the
// unquantized inputs is measured apart (relative_rms_error, Row::error_vs_unquantized), not judged.
//
// The allowance: a row's tolerance also takes the most one rounding flip can move it
// (AttentionRows::floor). e4m3 keeps 3 fraction bits, so a P within a few ulps of fp32 of a
// rounding boundary goes to one neighbour in the kernel (exp2.approx, the wgmma's order of
// products, its accumulation) and to the other in the reference: one code's gap, up to 1/8 of that
// P. With large logits a row's O is a handful of weights and such a flip is as large as the
// reference's whole error, so twice that error is no bound for one row (seen on the GPU: every row
// but a few within 0.7× of it, those few 1.3 to 3.3× over, in the large-logit grids only).
// The check: what a flip cannot excuse is a bias, which moves every row. So the median over the
// checked rows of (a row's error) / (its low reference's error + its abs term) may be at most
// kFp8MedianRowRatio. A median, because a few flipped rows must not decide it however few rows
// are checked; a bias (a P that saturates, a descale dropped, a key missed) moves the typical row
// and so the median. On the GPU a correct kernel's median is 0.8 (B=2 H=3 N=1000 causal).
inline constexpr double kFp8MedianRowRatio = 1.25;
ErrorStats compare_with_reference(std::span<const double> kernel, std::span<const double> fp64,
                                  std::span<const double> lowprec, double abs_term);

// The same rule row by row (each row_length values): a row's tolerance is 2·its low-precision
// error + abs_term_of_row_max(max |fp64| in the row). Every row must pass. tolerance,
// lowprec_max_abs and worst_error describe the row nearest to (or furthest past) its tolerance.
ErrorStats compare_rows_with_reference(std::span<const double> kernel, std::span<const double> fp64,
                                       std::span<const double> lowprec, std::size_t row_length,
                                       const std::function<double(double)>& abs_term_of_row_max);

// The same, with a further absolute term per row (row_floors[r], one per row; empty = none).
ErrorStats compare_rows_with_reference(std::span<const double> kernel, std::span<const double> fp64,
                                       std::span<const double> lowprec, std::size_t row_length,
                                       const std::function<double(double)>& abs_term_of_row_max,
                                       std::span<const double> row_floors);

// The check of one gradient of a backward problem (dQ, dK or dV): as check_attention_output, with
// each row's tolerance raised by its cancellation floor (BackwardRows::dq_floor and dk_floor: the
// rounding noise a correct kernel carries that the low-precision reference samples once; BackwardRows).
ErrorStats check_gradient_output(std::span<const float> output, int head_dim,
                                 std::span<const std::int64_t> rows, std::span<const double> ref64,
                                 std::span<const double> reflow, std::span<const double> floors,
                                 DType dtype);

// The whole attention check, as the runner does it: `output` is the kernel's entire O
// ([B, H, N, D], widened), `rows` the global row indices the references were computed for
// (ref64 and reflow hold rows.size() × head_dim values). Every element of the output is tested for
// NaN/inf (the poison), the checked rows against the references with attention_abs_term.
// fp8 (dtype E4M3): `floors` (AttentionRows::floor of the fp64 reference, one per row) raise each
// row's tolerance, and the aggregate rule applies (kFp8MedianRowRatio).
ErrorStats check_attention_output(std::span<const float> output, int head_dim,
                                  std::span<const std::int64_t> rows, std::span<const double> ref64,
                                  std::span<const double> reflow, DType dtype = DType::F16,
                                  std::span<const double> floors = {});

// The absolute terms of the pass rule, one per problem kind (their reasons are in compare.cpp).
// Attention: one unit in the last place (of the output's type: fp8's is bf16) of the row's largest
// |reference| output.
double attention_abs_term(double max_abs_row, DType dtype = DType::F16);
double lse_abs_term();
double matmul_abs_term(int k);
double reduction_abs_term(double sum_of_magnitudes);

// ‖output − reference‖ / ‖reference‖ over the selected rows (`output` the kernel's whole O as in
// check_attention_output, `reference` rows.size() × head_dim values); NaN when nothing is compared
// or the output is not finite there. For fp8: the error against the fp64 attention of the
// unquantized inputs, the number FlashAttention-3's paper reports (as RMSE).
double relative_rms_error(std::span<const float> output, int head_dim,
                          std::span<const std::int64_t> rows, std::span<const double> reference);

// max |a − b| over two outputs of the same problem (NaN if either holds a NaN).
double max_abs_difference(std::span<const float> a, std::span<const float> b);

}  // namespace ladder
