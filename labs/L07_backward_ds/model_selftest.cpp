// A test of lab 07's fragment model (a CPU test, label cpu; not part of the lab): the reference
// answers must pass, and each classic mistake — at least one per answer of backward_ds.hpp —
// must be caught by the right check, with the right diagnosis. A model that passed everything
// would let any starter through.
#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "labs/L07_backward_ds/model.hpp"

namespace {

using lab07::pack_half2;
using lab07::model::Answers;

int row(int lane, int c) { return lane / 4 + 8 * (c / 2); }
int col(int lane, int c) { return 2 * (lane % 4) + c % 2; }
float p_ref(float s, float lse, float scale) { return std::exp2((s * scale - lse) * lab07::kLog2e); }

// The tile function with two knobs: which query's D a register reads, and the formula for dS.
enum class DsRule { kRight, kNoD, kNoP };
template <int (*kDeltaIndex)(int lane, int nt, int c), DsRule kRule>
void tile(float (&s)[4], float (&dp)[4], const float* lse, const float* delta, int lane, int nt, float scale) {
  for (int c = 0; c < 4; ++c) {
    const int q = 8 * nt + col(lane, c);
    const float p = p_ref(s[c], lse[q], scale);
    const float d = delta[kDeltaIndex(lane, nt, c)];
    s[c] = p;
    dp[c] = kRule == DsRule::kRight ? p * (dp[c] - d) : kRule == DsRule::kNoD ? p * dp[c] : dp[c] - d;
  }
}
int by_query(int lane, int nt, int c) { return 8 * nt + col(lane, c); }
int by_key(int lane, int nt, int c) { return 8 * nt + row(lane, c); }  // the forward's row habit

void pack(std::uint32_t (&a)[4], const float (&lo)[4], const float (&hi)[4]) {
  a[0] = pack_half2(lo[0], lo[1]);
  a[1] = pack_half2(lo[2], lo[3]);
  a[2] = pack_half2(hi[0], hi[1]);
  a[3] = pack_half2(hi[2], hi[3]);
}
void pack_swapped(std::uint32_t (&a)[4], const float (&lo)[4], const float (&hi)[4]) {  // a1 <-> a2
  a[0] = pack_half2(lo[0], lo[1]);
  a[1] = pack_half2(hi[0], hi[1]);
  a[2] = pack_half2(lo[2], lo[3]);
  a[3] = pack_half2(hi[2], hi[3]);
}

Answers reference() { return {row, col, p_ref, tile<by_query, DsRule::kRight>, pack}; }

struct Case {
  std::string name;
  Answers answers;
  int expected_check;    // 0: must pass
  std::string expected;  // a phrase the diagnosis must contain
};

}  // namespace

int main() {
  std::vector<Case> cases;
  cases.push_back({"the reference answers", reference(), 0, ""});
  {
    Answers a = reference();
    a.acc_row = [](int lane, int c) { return lane / 4 + 8 * (c % 2); };  // c1 and c2 confused
    cases.push_back({"acc_row with c % 2 for c / 2", a, 1, "register c1 holds C["});
  }
  {
    Answers a = reference();
    a.acc_col = [](int lane, int c) { return lane % 4 + 4 * (c % 2); };
    cases.push_back({"acc_col as t + 4·(c % 2)", a, 1, "your acc_row/acc_col say"});
  }
  {
    Answers a = reference();
    a.recompute_p = [](float s, float lse, float) { return std::exp(s - lse); };
    cases.push_back({"P without the scale", a, 2, "the scale is missing"});
  }
  {
    Answers a = reference();
    a.recompute_p = [](float s, float lse, float scale) { return std::exp2(s * scale - lse); };
    cases.push_back({"P as exp2 of the natural-log quantity", a, 2, "multiply by log2 e"});
  }
  {
    Answers a = reference();
    a.tile = tile<by_key, DsRule::kRight>;
    cases.push_back({"D indexed by the key (the forward's row habit)", a, 3, "indexed by the row (the key)"});
  }
  {
    Answers a = reference();
    a.tile = tile<by_query, DsRule::kNoD>;
    cases.push_back({"dS = P·dP (no D term)", a, 3, "the D term is missing"});
  }
  {
    Answers a = reference();
    a.tile = tile<by_query, DsRule::kNoP>;
    cases.push_back({"dS = dP − D (no factor P)", a, 3, "the factor P is missing"});
  }
  {
    Answers a = reference();
    a.pack_a = pack_swapped;
    cases.push_back({"pack_a with a1 and a2 swapped", a, 4, "you put A["});
  }

  int failures = 0;
  for (const auto& c : cases) {
    const auto f = lab07::model::check(c.answers);
    const bool ok = f.check == c.expected_check && f.what.find(c.expected) != std::string::npos;
    fmt::print("{}  {:<50} check {} ({}){}{}\n", ok ? " ok " : "FAIL", c.name, f.check, lab07::model::check_name(f.check),
               f.what.empty() ? "" : ": ", f.what);
    if (!ok) {
      fmt::print("      expected check {} with \"{}\"\n", c.expected_check, c.expected);
      ++failures;
    }
  }
  fmt::print("{} of {} cases as expected\n", int(cases.size()) - failures, int(cases.size()));
  return failures ? 1 : 0;
}
