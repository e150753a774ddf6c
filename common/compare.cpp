#include "common/compare.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace ladder {

std::string ErrorStats::verdict() const {
  if (pass) return "pass";
  if (nonfinite > 0)
    return fmt::format("FAIL: {} of {} outputs are NaN/inf (unwritten or overflowed)", nonfinite,
                       total);
  return fmt::format("FAIL: max error {:.3g} > tolerance {:.3g}", max_abs, tolerance);
}

ErrorStats compare_with_reference(std::span<const double> kernel, std::span<const double> fp64,
                                  std::span<const double> lowprec, double abs_term) {
  ErrorStats e;
  e.checked = std::int64_t(kernel.size());
  double diff2 = 0, ref2 = 0;
  for (std::size_t i = 0; i < kernel.size(); ++i) {
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
  e.pass = e.nonfinite == 0 && e.max_abs <= e.tolerance;
  return e;
}

// fp16 output: one unit in the last place of a value near 1 is 2^-10. Half of it covers a kernel
// that rounds a value the other way from the low-precision reference.
double attention_abs_term() { return std::ldexp(1.0, -11); }

// The log-sum-exp is fp32 throughout; its magnitude is about log(N) + max logit (< 100 here).
double lse_abs_term() { return 1e-4; }

// C[i][j] sums k products of N(0,1) values, so |C| ~ sqrt(k) and one fp32 rounding of a partial
// sum ~ 2^-24·sqrt(k). A kernel that sums in another order (tiles, FMA) may differ from the
// in-order fp32 reference by a few such roundings per term; 4·k·2^-24 bounds that with margin and
// is still a thousand times smaller than one missing product.
double matmul_abs_term(int k) { return 4.0 * k * std::ldexp(1.0, -24); }

// Summing in any order makes an error of at most about eps·Σ|x| per level of the order's depth;
// one level is enough for the typical (random-walk) error of a tree order. The exact-integer test
// (tests/gpu) catches a dropped element, which this tolerance on random data alone may not.
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
