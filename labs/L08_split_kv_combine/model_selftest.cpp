// A test of lab 08's CPU model (a CPU test, label cpu; not part of the lab): the reference answers
// pass; each classic mistake in answers 1 and 2 is caught by the right check with the right
// diagnosis; and the row judge (which also judges the GPU kernel, answer 3) rejects a combine that
// is a little wrong in each way that matters. A model that passed everything would let any
// starter through.
#include <fmt/format.h>

#include <cmath>
#include <string>
#include <vector>

#include "labs/L08_split_kv_combine/model.hpp"
#include "labs/L08_split_kv_combine/solution/combine.hpp"

namespace {

using lab08::model::Answers;

float lse_no_max(const float* lse, int splits) {  // log Σ exp: overflows at 88.7
  float sum = 0.f;
  for (int s = 0; s < splits; ++s) sum += std::exp(lse[s]);
  return std::log(sum);
}
float lse_no_guard(const float* lse, int splits) {  // all −inf: −inf − (−inf) = NaN
  float m = -INFINITY, sum = 0.f;
  for (int s = 0; s < splits; ++s) m = std::fmax(m, lse[s]);
  for (int s = 0; s < splits; ++s) sum += std::exp(lse[s] - m);
  return m + std::log(sum);
}
float weight_no_guard(float lse_s, float lse) { return std::exp(lse_s - lse); }
float weight_one(float, float) { return 1.f; }  // the normalized outputs summed, not weighed
float weight_ratio(float lse_s, float lse) { return std::exp(lse_s) / std::exp(lse); }  // 0/0, inf/inf

int failures = 0;
void expect(bool ok, const std::string& what) {
  fmt::print("{} {}\n", ok ? "ok  " : "FAIL", what);
  if (!ok) ++failures;
}

void expect_caught(const char* name, const Answers& a, int check, const char* diagnosis) {
  const auto f = lab08::model::check(a);
  expect(f.check == check && f.what.find(diagnosis) != std::string::npos,
         fmt::format("{}: caught by check {} mentioning \"{}\" (got check {}: {})", name, check, diagnosis, f.check,
                     f.what));
}

}  // namespace

int main() {
  const Answers right{combine::merged_lse, combine::split_weight};
  const auto f = lab08::model::check(right);
  expect(f.check == 0, fmt::format("the reference answers pass ({})", f.what));

  expect_caught("no max subtracted", {lse_no_max, combine::split_weight}, 1, "subtract the max");
  expect_caught("no −inf guard in merged_lse", {lse_no_guard, combine::split_weight}, 1, "NaN");
  expect_caught("no −inf guard in split_weight", {combine::merged_lse, weight_no_guard}, 2, "not exp(−inf − (−inf))");
  expect_caught("weights all 1", {combine::merged_lse, weight_one}, 2, "1/2");
  expect_caught("exp(lse_s) / exp(lse)", {combine::merged_lse, weight_ratio}, 2, "far below 0");

  // The row judge on a right combine, then on four ways to be slightly wrong.
  const auto c = lab08::model::make_case(7, 64, 32, 99);
  std::vector<float> o, lse;
  lab08::model::combine_cpu(right, c, o, lse);
  auto judge_all = [&](const std::vector<float>& oo, const std::vector<float>& ll) {
    for (int r = 0; r < c.rows; ++r)
      if (auto why = lab08::model::judge_row(c, r, &oo[std::size_t(r) * c.head_dim], ll[r]); !why.empty()) return why;
    return std::string();
  };
  expect(judge_all(o, lse).empty(), "the judge passes the reference combine: " + judge_all(o, lse));
  {
    auto o2 = o;
    for (int d = 0; d < c.head_dim; ++d) o2[5 * c.head_dim + d] *= 1.01f;
    const auto why = judge_all(o2, lse);
    expect(why.find("weights do not sum to 1") != std::string::npos, "o 1% too large in one row: " + why);
  }
  {
    auto l2 = lse;
    l2[4] += 1e-2f;
    const auto why = judge_all(o, l2);
    expect(why.find("lse = ") != std::string::npos, "lse off by 0.01 in one row: " + why);
  }
  {
    auto o2 = o;
    o2[0] = NAN;  // row 0 has no key
    const auto why = judge_all(o2, lse);
    expect(why.find("0 · NaN") != std::string::npos, "NaN in the keyless row: " + why);
  }
  {
    auto l2 = lse;
    l2[0] = NAN;
    const auto why = judge_all(o, l2);
    expect(why.find("−inf − (−inf) = NaN") != std::string::npos, "NaN lse in the keyless row: " + why);
  }
  fmt::print("{}\n", failures ? "model self-test: FAIL" : "model self-test: PASS");
  return failures ? 1 : 0;
}
