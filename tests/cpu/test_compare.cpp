// The pass rule and the timing statistics.
#include <cmath>
#include <limits>
#include <vector>

#include "common/compare.hpp"
#include "common/timing.hpp"
#include "tests/catch.hpp"

using namespace ladder;

TEST_CASE("pass rule: at most twice the low-precision error plus the absolute term", "[pass-rule]") {
  const std::vector<double> ref = {1.0, 2.0, 3.0};
  const std::vector<double> low = {1.001, 2.0, 3.0};  // low-precision error 1e-3
  const double abs_term = 1e-4;

  const std::vector<double> good = {1.0, 2.002, 3.0};  // 2e-3 <= 2·1e-3 + 1e-4
  auto e = compare_with_reference(good, ref, low, abs_term);
  CHECK(e.pass);
  CHECK(e.max_abs == Approx(2e-3));
  CHECK(e.tolerance == Approx(2.1e-3));

  const std::vector<double> bad = {1.0, 2.0, 3.0022};  // 2.2e-3 > 2.1e-3
  e = compare_with_reference(bad, ref, low, abs_term);
  CHECK_FALSE(e.pass);
  CHECK(e.verdict().find("FAIL") == 0);
}

TEST_CASE("NaN never passes", "[pass-rule]") {
  const std::vector<double> ref = {1.0, 2.0}, low = {1.5, 2.5};  // a generous tolerance
  const std::vector<double> nan = {1.0, std::numeric_limits<double>::quiet_NaN()};
  auto e = compare_with_reference(nan, ref, low, 1.0);
  CHECK_FALSE(e.pass);
  CHECK(e.nonfinite == 1);
  const std::vector<double> inf = {INFINITY, 2.0};
  CHECK_FALSE(compare_with_reference(inf, ref, low, 1.0).pass);
}

TEST_CASE("relative L2 error", "[pass-rule]") {
  const std::vector<double> ref = {3.0, 4.0}, got = {3.0, 4.5};
  const auto e = compare_with_reference(got, ref, ref, 1.0);
  CHECK(e.rel_l2 == Approx(0.5 / 5.0));
}

TEST_CASE("max abs difference between two outputs", "[pass-rule]") {
  const std::vector<float> a = {1, 2, 3}, b = {1, 2.5f, 2};
  CHECK(max_abs_difference(a, b) == 1.0);
  const std::vector<float> c = {1, std::numeric_limits<float>::quiet_NaN(), 3};
  CHECK(std::isnan(max_abs_difference(a, c)));
}

TEST_CASE("an empty comparison or a non-finite reference fails", "[pass-rule]") {
  const std::vector<double> none;
  auto e = compare_with_reference(none, none, none, 1.0);
  CHECK_FALSE(e.pass);
  CHECK(e.verdict().find("nothing was compared") != std::string::npos);
  const std::vector<double> ref = {1.0, std::numeric_limits<double>::quiet_NaN()}, got = {1.0, 2.0};
  e = compare_with_reference(got, ref, ref, 1.0);
  CHECK_FALSE(e.pass);
  CHECK(e.reference_nonfinite == 1);
  const std::vector<double> shorter = {1.0};
  CHECK_FALSE(compare_with_reference(got, shorter, shorter, 1.0).pass);
}

TEST_CASE("absolute terms are positive and scale as documented", "[pass-rule]") {
  CHECK(attention_abs_term(1.0) == std::ldexp(1.0, -10));   // an ulp of 1.0
  CHECK(attention_abs_term(0.1) == std::ldexp(1.0, -14));   // 0.1 in [2^-4, 2^-3): ulp 2^-14
  CHECK(attention_abs_term(0.0) > 0);
  CHECK(attention_abs_term(1.0, DType::BF16) == std::ldexp(1.0, -7));   // bf16: 7 fraction bits
  CHECK(attention_abs_term(0.1, DType::BF16) == std::ldexp(1.0, -11));
  CHECK(matmul_abs_term(2048) == 2 * matmul_abs_term(1024));
  CHECK(reduction_abs_term(0) == 0);
}

TEST_CASE("timing summary: median and p20/p80", "[timing]") {
  const auto t = summarize({5, 1, 4, 2, 3});
  CHECK(t.median_ms == 3);
  CHECK(t.min_ms == 1);
  CHECK(t.p20_ms == Approx(1.8));
  CHECK(t.p80_ms == Approx(4.2));
  CHECK(t.samples_ms.size() == 5);
}

TEST_CASE("rounds: a speed-up must hold in every interleaved round", "[timing]") {
  auto round = [](float center) { return summarize({center, center * 1.001f, center * 0.999f}); };
  // b is 5% faster in every round: different.
  const Timing a = merge_rounds({round(10.0f), round(10.4f), round(10.2f)});
  const Timing b = merge_rounds({round(9.5f), round(9.9f), round(9.7f)});
  CHECK(a.round_medians_ms.size() == 3);
  CHECK(a.samples_ms.size() == 9);
  CHECK_FALSE(same_speed(a, b));
  // The same pooled gap, but one round points the other way: drift, not a speed-up.
  const Timing c = merge_rounds({round(9.5f), round(10.5f), round(9.6f)});
  const Timing d = merge_rounds({round(10.0f), round(10.2f), round(10.1f)});
  CHECK(same_speed(c, d));
  // Consistent but under the resolution: the same.
  const Timing e = merge_rounds({round(10.0f), round(10.0f), round(10.0f)});
  const Timing f = merge_rounds({round(9.95f), round(9.95f), round(9.95f)});
  CHECK(same_speed(e, f));
}

TEST_CASE("a difference inside the spread is the same speed", "[timing]") {
  const auto a = summarize({10, 10.2f, 9.8f, 10.1f, 9.9f});
  const auto b = summarize({10.05f, 10.15f, 9.95f, 10.0f, 10.1f});
  const auto c = summarize({7, 7.1f, 6.9f, 7.05f, 6.95f});
  CHECK(same_speed(a, b));
  CHECK_FALSE(same_speed(a, c));
}
