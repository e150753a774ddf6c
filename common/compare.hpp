// Comparing a kernel's output with the references, and the pass rule.
#pragma once

#include <cstdint>
#include <span>
#include <string>

namespace ladder {

struct ErrorStats {
  std::int64_t checked = 0;     // values compared with the reference
  std::int64_t nonfinite = 0;   // NaN or inf anywhere in the output (the poison is NaN)
  std::int64_t total = 0;       // values in the whole output
  double max_abs = 0;           // max |kernel − fp64|
  double rel_l2 = 0;            // ‖kernel − fp64‖ / ‖fp64‖
  double lowprec_max_abs = 0;   // max |low-precision reference − fp64|
  double tolerance = 0;         // 2·lowprec_max_abs + abs_term
  bool pass = false;
  std::string verdict() const;  // "pass", or why not
};

// The pass rule, in the style of FlashAttention's tests: no non-finite value anywhere, and
// max |kernel − fp64| ≤ 2·max |lowprec − fp64| + abs_term.
ErrorStats compare_with_reference(std::span<const double> kernel, std::span<const double> fp64,
                                  std::span<const double> lowprec, double abs_term);

// The absolute terms of the pass rule, one per problem kind (their reasons are in compare.cpp).
double attention_abs_term();
double lse_abs_term();
double matmul_abs_term(int k);
double reduction_abs_term(double sum_of_magnitudes);

// max |a − b| over two outputs of the same problem (NaN if either holds a NaN).
double max_abs_difference(std::span<const float> a, std::span<const float> b);

}  // namespace ladder
