#include "common/compare.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <vector>

namespace ladder {

bool ErrorStats::within(double slack) const {
  if (pass) return true;
  if (checked == 0 || reference_nonfinite > 0 || nonfinite > 0 || !(tolerance > 0)) return false;
  return (worst_error > 0 ? worst_error : max_abs) <= slack * tolerance;
}

std::string ErrorStats::verdict() const {
  if (pass) return "pass";
  if (checked == 0) return "FAIL: nothing was compared with the reference";
  if (reference_nonfinite > 0)
    return fmt::format("FAIL: the reference has {} non-finite values (a fully masked row?)",
                       reference_nonfinite);
  if (nonfinite > 0)
    return fmt::format("FAIL: {} of {} outputs are NaN/inf (unwritten or overflowed)", nonfinite,
                       total);
  // fp8's aggregate rule, unless a row is over its own tolerance too (that is the plainer reason).
  if (median_row_limit > 0 && !(median_row_ratio <= median_row_limit) && !(worst_error > tolerance))
    return fmt::format("FAIL: the median row errs {:.3g}× its low-precision reference, more than {} "
                       "(a bias the rows share)", median_row_ratio, median_row_limit);
  if (worst_error > 0)
    return fmt::format("FAIL: a row's max error {:.3g} > its tolerance {:.3g}", worst_error, tolerance);
  return fmt::format("FAIL: max error {:.3g} > tolerance {:.3g}", max_abs, tolerance);
}

std::string ErrorStats::approx_verdict(const std::string& why) const {
  const double error = worst_error > 0 ? worst_error : max_abs;
  const double ratio = tolerance > 0 ? error / tolerance : 0;
  return fmt::format("approx: {} (error {:.1f}× the tolerance)", why, ratio);
}

ErrorStats compare_with_reference(std::span<const double> kernel, std::span<const double> fp64,
                                  std::span<const double> lowprec, double abs_term) {
  ErrorStats e;
  e.checked = std::int64_t(kernel.size());
  if (fp64.size() != kernel.size() || lowprec.size() != kernel.size()) {
    e.checked = 0;  // a caller bug; fail rather than read past a span
    return e;
  }
  double diff2 = 0, ref2 = 0;
  for (std::size_t i = 0; i < kernel.size(); ++i) {
    if (!std::isfinite(fp64[i]) || !std::isfinite(lowprec[i])) {
      ++e.reference_nonfinite;
      continue;
    }
    if (!std::isfinite(kernel[i])) {
      ++e.nonfinite;
      continue;
    }
    const double d = std::fabs(kernel[i] - fp64[i]);
    e.max_abs = std::max(e.max_abs, d);
    diff2 += d * d;
    ref2 += fp64[i] * fp64[i];
    e.lowprec_max_abs = std::max(e.lowprec_max_abs, std::fabs(lowprec[i] - fp64[i]));
  }
  e.rel_l2 = ref2 > 0 ? std::sqrt(diff2 / ref2) : std::sqrt(diff2);
  e.tolerance = 2.0 * e.lowprec_max_abs + abs_term;
  // Written so that a NaN max_abs (impossible above, but cheap to guard) also fails.
  e.pass = e.checked > 0 && e.reference_nonfinite == 0 && e.nonfinite == 0 &&
           e.max_abs <= e.tolerance;
  return e;
}

namespace {

// One row's max |kernel − fp64|, max |lowprec − fp64| and max |fp64|: values r0 .. r0 + length − 1.
struct RowErrors {
  double kernel = 0, lowprec = 0, ref_max = 0;
};
RowErrors row_errors(std::span<const double> kernel, std::span<const double> fp64,
                     std::span<const double> lowprec, std::size_t r0, std::size_t length) {
  RowErrors e;
  for (std::size_t i = r0; i < r0 + length; ++i) {
    e.kernel = std::max(e.kernel, std::fabs(kernel[i] - fp64[i]));
    e.lowprec = std::max(e.lowprec, std::fabs(lowprec[i] - fp64[i]));
    e.ref_max = std::max(e.ref_max, std::fabs(fp64[i]));
  }
  return e;
}

}  // namespace

ErrorStats compare_rows_with_reference(std::span<const double> kernel, std::span<const double> fp64,
                                       std::span<const double> lowprec, std::size_t row_length,
                                       const std::function<double(double)>& abs_term_of_row_max) {
  return compare_rows_with_reference(kernel, fp64, lowprec, row_length, abs_term_of_row_max, {});
}

ErrorStats compare_rows_with_reference(std::span<const double> kernel, std::span<const double> fp64,
                                       std::span<const double> lowprec, std::size_t row_length,
                                       const std::function<double(double)>& abs_term_of_row_max,
                                       std::span<const double> row_floors) {
  if (!row_floors.empty() && row_length != 0 && row_floors.size() * row_length != kernel.size())
    return ErrorStats{};
  if (row_length == 0 || kernel.size() % row_length != 0 || fp64.size() != kernel.size() ||
      lowprec.size() != kernel.size())
    return ErrorStats{};  // checked = 0: fails
  ErrorStats all = compare_with_reference(kernel, fp64, lowprec, 0.0);  // counts, rel_l2, max_abs
  if (!all.pass && (all.checked == 0 || all.reference_nonfinite || all.nonfinite)) return all;
  // Each row against its own tolerance; the row closest to (or furthest past) its tolerance is
  // the one reported.
  double worst_ratio = -1;
  bool pass = true;
  for (std::size_t r0 = 0; r0 < kernel.size(); r0 += row_length) {
    const auto [err, low, ref_max] = row_errors(kernel, fp64, lowprec, r0, row_length);
    const double floor = row_floors.empty() ? 0.0 : row_floors[r0 / row_length];
    const double tolerance = 2.0 * low + abs_term_of_row_max(ref_max) + floor;
    pass = pass && err <= tolerance;
    const double ratio = err / tolerance;
    if (ratio > worst_ratio) {
      worst_ratio = ratio;
      all.tolerance = tolerance;
      all.lowprec_max_abs = low;
      all.worst_error = err;
    }
  }
  all.pass = pass;
  return all;
}

ErrorStats check_attention_output(std::span<const float> output, int head_dim,
                                  std::span<const std::int64_t> rows, std::span<const double> ref64,
                                  std::span<const double> reflow, DType dtype,
                                  std::span<const double> floors) {
  const std::size_t d = std::size_t(head_dim);
  std::vector<double> got(rows.size() * d);
  for (std::size_t i = 0; i < rows.size(); ++i)
    for (std::size_t t = 0; t < d; ++t) got[i * d + t] = output[std::size_t(rows[i]) * d + t];
  const bool fp8 = dtype == DType::E4M3;
  ErrorStats e = compare_rows_with_reference(
      got, ref64, reflow, d, [dtype](double row_max) { return attention_abs_term(row_max, dtype); },
      fp8 ? floors : std::span<const double>{});
  e.total = std::int64_t(output.size());
  e.nonfinite = std::count_if(output.begin(), output.end(), [](float x) { return !std::isfinite(x); });
  e.pass = e.pass && e.nonfinite == 0;
  if (fp8 && e.checked > 0 && got.size() == ref64.size() && reflow.size() == ref64.size()) {
    std::vector<double> ratios(rows.size());
    for (std::size_t r = 0; r < rows.size(); ++r) {
      const auto [err, low, ref_max] = row_errors(got, ref64, reflow, r * d, d);
      ratios[r] = err / (low + attention_abs_term(ref_max, dtype));
    }
    std::nth_element(ratios.begin(), ratios.begin() + ratios.size() / 2, ratios.end());
    e.median_row_ratio = ratios[ratios.size() / 2];
    e.median_row_limit = kFp8MedianRowRatio;
    e.pass = e.pass && e.median_row_ratio <= e.median_row_limit;  // NaN fails too
  }
  return e;
}

ErrorStats check_gradient_output(std::span<const float> output, int head_dim,
                                 std::span<const std::int64_t> rows, std::span<const double> ref64,
                                 std::span<const double> reflow, std::span<const double> floors,
                                 DType dtype) {
  const std::size_t d = std::size_t(head_dim);
  std::vector<double> got(rows.size() * d);
  for (std::size_t i = 0; i < rows.size(); ++i)
    for (std::size_t t = 0; t < d; ++t) got[i * d + t] = output[std::size_t(rows[i]) * d + t];
  ErrorStats e = compare_rows_with_reference(
      got, ref64, reflow, d, [dtype](double row_max) { return attention_abs_term(row_max, dtype); },
      floors);
  e.total = std::int64_t(output.size());
  e.nonfinite = std::count_if(output.begin(), output.end(), [](float x) { return !std::isfinite(x); });
  e.pass = e.pass && e.nonfinite == 0;
  return e;
}

// Applied per row of O (compare_rows_with_reference): a kernel whose fp32 result differs from the
// low-precision reference's by a hair may round to the neighbouring fp16 value, one unit in the
// last place (ulp) away, where the low-precision reference happened to round almost exactly. The
// term is one ulp of the row's largest |output|. Why per row and scaled: attention outputs are
// weighted averages of N(0,1) values, ~1/sqrt(keys) in size, so a causal problem's first rows
// are ~1 and its last rows ~0.01. The earlier rule (one tolerance for the whole tensor with a
// fixed 2^-11) let rows of size 0.01 err by ~100 of their ulps: P rounded to bf16 and fp16 block
// sums passed (tests/cpu/test_broken_kernels.cpp plants both). A bf16 output is rounded to 7
// fraction bits, so its ulp, and the term, is 8 times an fp16 one. An fp8 problem's O is bf16
// (output_dtype): its term is bf16's, the rounding of the output, not of the e4m3 inputs.
double attention_abs_term(double max_abs_row, DType dtype) {
  if (!(max_abs_row > 0) || !std::isfinite(max_abs_row)) return std::ldexp(1.0, -24);
  int exponent = 0;
  std::frexp(max_abs_row, &exponent);  // max = f · 2^exponent, f in [0.5, 1)
  // With b fraction bits (fp16: 10, bf16: 7) an ulp of a value in [2^(e-1), 2^e) is 2^(e-1-b).
  return std::ldexp(1.0, std::max(exponent - 1 - fraction_bits(output_dtype(dtype)), -24));
}

double relative_rms_error(std::span<const float> output, int head_dim,
                          std::span<const std::int64_t> rows, std::span<const double> reference) {
  const std::size_t d = std::size_t(head_dim);
  if (rows.empty() || reference.size() != rows.size() * d) return std::numeric_limits<double>::quiet_NaN();
  double diff2 = 0, ref2 = 0;
  for (std::size_t i = 0; i < rows.size(); ++i)
    for (std::size_t t = 0; t < d; ++t) {
      const double got = output[std::size_t(rows[i]) * d + t], want = reference[i * d + t];
      diff2 += (got - want) * (got - want);  // a NaN or inf output makes the result NaN: not hidden
      ref2 += want * want;
    }
  return ref2 > 0 ? std::sqrt(diff2 / ref2) : std::sqrt(diff2);
}

// The log-sum-exp is fp32 throughout; its magnitude is about log(N) + max logit (< 100 here).
double lse_abs_term() { return 1e-4; }

// C[i][j] sums k products of N(0,1) values, so |C| ~ sqrt(k) and one fp32 rounding of a partial
// sum ~ 2^-24·sqrt(k). A kernel that sums in another order (tiles, FMA) may differ from the
// in-order fp32 reference by a few such roundings per term; 4·k·2^-24 bounds that with margin and
// is still a thousand times smaller than one missing product.
double matmul_abs_term(int k) { return 4.0 * k * std::ldexp(1.0, -24); }

// Summing in any order makes an error of at most about eps·Σ|x| per level of the order's depth;
// one level is enough for the typical (random-walk) error of a tree order. This tolerance cannot
// tell a dropped element from rounding: the atomic variant's arbitrary order legitimately errs by
// about eps·n/sqrt(2) (≈ 3 at n = 2^26), the size of a few N(0,1) elements. The exact-integer test
// (tests/gpu/test_reduction.cpp) is the guard against a dropped or doubled element.
double reduction_abs_term(double sum_of_magnitudes) {
  return std::ldexp(1.0, -24) * sum_of_magnitudes;
}

double max_abs_difference(std::span<const float> a, std::span<const float> b) {
  double m = 0;
  for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    const double d = std::fabs(double(a[i]) - double(b[i]));
    if (std::isnan(d)) return std::numeric_limits<double>::quiet_NaN();
    m = std::max(m, d);
  }
  return m;
}

}  // namespace ladder
