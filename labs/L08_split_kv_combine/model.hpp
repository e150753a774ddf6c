// Lab 08's CPU side (given, do not edit): the test cases, their fp64 reference, and a CPU combine
// built from answers 1 and 2 of combine.hpp, checked against it. Used by the checker (your
// answers, then the GPU kernel on the same cases) and by model_selftest.cpp (the reference
// answers pass; each classic mistake is caught, with its diagnosis).
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "labs/L08_split_kv_combine/lab08.hpp"

namespace lab08::model {

struct Answers {
  std::function<float(const float*, int)> merged_lse;
  std::function<float(float, float)> split_weight;
};

// One case: `rows` query rows, each split into `splits` partial results (lab08.hpp's layout).
struct Case {
  int splits = 1, head_dim = 64, rows = 0;
  std::vector<int> keys;             // [rows]: keys the row attends to (0: none)
  std::vector<double> logit_offset;  // [rows]: where its logits are centred
  std::vector<float> o_part, lse_part;  // the splits' fp32 results; o_part NaN for an empty split
  std::vector<double> o_ref, lse_ref;   // the full softmax over all keys, fp64
  std::vector<double> o_tol, lse_tol;   // per row: the error a correct fp32 combine may make
  std::string name() const { return fmt::format("splits={} D={}", splits, head_dim); }
  std::string row_name(int r) const {
    return fmt::format("{} row {} ({} keys, logits around {:.0f})", name(), r, keys[r], logit_offset[r]);
  }
};

inline constexpr double kEps32 = 0x1p-24;  // fp32's unit roundoff

// Rows of three kinds: row 0 has no key (every split empty), row 1 one key, the rest 1 … 4·S + 3
// keys cut into splits at random points (so splits in the middle can be empty too) or evenly, as
// a split kernel cuts them. Logits x = offset + spread·N(0, 1): offsets up to ±3000, where
// exp(lse) is inf or 0 in fp32, spreads 0.1 to 50 (one key dominates, or none does).
inline Case make_case(int splits, int head_dim, int rows, std::uint64_t seed) {
  Case c{.splits = splits, .head_dim = head_dim, .rows = rows};
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> unit(-1.0, 1.0);
  std::normal_distribution<double> normal(0.0, 1.0);
  const double spreads[] = {0.1, 5.0, 50.0};
  const auto nan = std::numeric_limits<float>::quiet_NaN();
  c.o_part.assign(std::size_t(rows) * splits * head_dim, nan);
  c.lse_part.assign(std::size_t(rows) * splits, -INFINITY);
  c.o_ref.assign(std::size_t(rows) * head_dim, 0.0);
  c.lse_ref.assign(rows, -INFINITY);
  c.o_tol.assign(rows, 0.0);
  c.lse_tol.assign(rows, 0.0);
  for (int r = 0; r < rows; ++r) {
    const int n = r == 0 ? 0 : r == 1 ? 1 : 1 + int(rng() % std::uint64_t(4 * splits + 3));
    const double offset = std::round(3000.0 * unit(rng));
    const double spread = spreads[rng() % 3];
    c.keys.push_back(n);
    c.logit_offset.push_back(offset);
    std::vector<double> x(n), v(std::size_t(n) * head_dim);
    for (auto& e : x) e = offset + spread * normal(rng);
    for (auto& e : v) e = unit(rng);
    // The split points: split s has keys cut[s] .. cut[s + 1] − 1.
    std::vector<int> cut(splits + 1, 0);
    if (r % 2 == 0) {
      for (int s = 1; s < splits; ++s) cut[s] = int(rng() % std::uint64_t(n + 1));
      std::sort(cut.begin() + 1, cut.end() - 1);
    } else {
      const int chunk = (n + splits - 1) / splits;
      for (int s = 1; s < splits; ++s) cut[s] = std::min(n, s * chunk);
    }
    cut[splits] = n;
    // The softmax over keys lo .. hi − 1 in fp64: its lse and normalized output.
    auto softmax = [&](int lo, int hi, double& lse, double* o) {
      double m = -INFINITY, l = 0;
      for (int j = lo; j < hi; ++j) m = std::max(m, x[j]);
      for (int j = lo; j < hi; ++j) l += std::exp(x[j] - m);
      lse = m + std::log(l);
      for (int d = 0; d < head_dim; ++d) {
        double acc = 0;
        for (int j = lo; j < hi; ++j) acc += std::exp(x[j] - m) * v[std::size_t(j) * head_dim + d];
        o[d] = acc / l;
      }
    };
    std::vector<double> o_s(head_dim), o_low(head_dim, 0.0);
    double max_o = 0, max_lse_s = 0;
    for (int s = 0; s < splits; ++s) {
      if (cut[s] == cut[s + 1]) continue;  // empty: lse −inf, o_part stays NaN
      double lse_s;
      softmax(cut[s], cut[s + 1], lse_s, o_s.data());
      const std::size_t at = (std::size_t(r) * splits + s);
      c.lse_part[at] = float(lse_s);
      max_lse_s = std::max(max_lse_s, std::abs(double(c.lse_part[at])));
      for (int d = 0; d < head_dim; ++d) {
        c.o_part[at * head_dim + d] = float(o_s[d]);
        max_o = std::max(max_o, std::abs(double(c.o_part[at * head_dim + d])));
      }
    }
    if (n == 0) continue;  // the reference is o = 0, lse = −inf: exactly, no tolerance
    softmax(0, n, c.lse_ref[r], &c.o_ref[std::size_t(r) * head_dim]);
    // The low reference: an exact (fp64) merge of the fp32 partials. What it misses is what the
    // fp32 partials lost; a correct fp32 combine may miss twice that, plus its own roundings: the
    // merged lse to |lse|·ε, which the weights' exponents inherit, and a sum of S terms.
    double m = -INFINITY, l = 0;
    for (int s = 0; s < splits; ++s) m = std::max(m, double(c.lse_part[std::size_t(r) * splits + s]));
    for (int s = 0; s < splits; ++s) l += std::exp(double(c.lse_part[std::size_t(r) * splits + s]) - m);
    const double lse_low = m + std::log(l);
    double o_err = 0;
    for (int s = 0; s < splits; ++s) {
      const std::size_t at = std::size_t(r) * splits + s;
      if (c.lse_part[at] == -INFINITY) continue;
      const double w = std::exp(double(c.lse_part[at]) - lse_low);
      for (int d = 0; d < head_dim; ++d) o_low[d] += w * double(c.o_part[at * head_dim + d]);
    }
    for (int d = 0; d < head_dim; ++d)
      o_err = std::max(o_err, std::abs(o_low[d] - c.o_ref[std::size_t(r) * head_dim + d]));
    const double own = 4 * kEps32 * (2 * max_lse_s + splits + 4);
    c.o_tol[r] = 2 * o_err + own * max_o;
    c.lse_tol[r] = 2 * std::abs(lse_low - c.lse_ref[r]) + own;
  }
  return c;
}

// The grid of the checker and the self-test: S ∈ {1, 2, 7, 64} × D ∈ {64, 128}.
inline std::vector<Case> grid(int rows = 96) {
  std::vector<Case> cases;
  std::uint64_t seed = 8;
  for (int splits : {1, 2, 7, lab08::kMaxSplits})
    for (int head_dim : {64, 128}) cases.push_back(make_case(splits, head_dim, rows, seed++));
  return cases;
}

// Judges one row's result; empty = right, else what is wrong and the likely mistake.
inline std::string judge_row(const Case& c, int r, const float* o, float lse) {
  const int dim = c.head_dim;
  const std::string where = c.row_name(r);
  if (c.keys[r] == 0) {
    if (std::isnan(lse))
      return fmt::format("{}: lse is NaN, expected −inf (no split saw a key: the max is −inf, and "
                         "−inf − (−inf) = NaN; return −inf before subtracting it)", where);
    if (lse != -INFINITY) return fmt::format("{}: lse = {}, expected −inf (log of an empty sum)", where, lse);
    for (int d = 0; d < dim; ++d)
      if (!(o[d] == 0.f))
        return fmt::format("{}: o[{}] = {}, expected 0 (no key: nothing to average; an empty split's "
                           "o_s is NaN and 0 · NaN = NaN: never read it)", where, d, o[d]);
    return {};
  }
  const double ref_lse = c.lse_ref[r];
  if (!std::isfinite(lse)) {
    if (std::abs(ref_lse) > 88.0)
      return fmt::format("{}: lse = {}, expected {:.4f}: exp of a logit this size is {} in fp32; "
                         "subtract the largest lse_s before exp and add it back after the log",
                         where, lse, ref_lse, ref_lse > 0 ? "inf" : "0");
    return fmt::format("{}: lse = {}, expected {:.4f}", where, lse, ref_lse);
  }
  if (std::abs(lse - ref_lse) > c.lse_tol[r])
    return fmt::format("{}: lse = {:.6f}, expected {:.6f} (allowed error {:.2e})", where, lse, ref_lse, c.lse_tol[r]);
  double err = 0, ratio = 0;
  int worst = 0, ratios = 0;
  for (int d = 0; d < dim; ++d) {
    const double ref = c.o_ref[std::size_t(r) * dim + d];
    const double e = std::isfinite(o[d]) ? std::abs(o[d] - ref) : INFINITY;
    if (e > err) err = e, worst = d;
    if (std::abs(ref) > 1e-3 && std::isfinite(o[d])) ratio += o[d] / ref, ++ratios;
  }
  if (err <= c.o_tol[r]) return {};
  const double got = o[worst], ref = c.o_ref[std::size_t(r) * dim + worst];
  std::string hint;
  if (std::isnan(got))
    hint = " (NaN: an empty split's o_s — NaN — multiplied by its zero weight, or a weight that is NaN)";
  else if (ratios > 0 && std::abs(ratio / ratios - 1.0) > 1e-3)
    hint = fmt::format(" (o is {:.4g}× the answer on average: the weights do not sum to 1 — "
                       "weigh o_s by exp(lse_s − lse) with the MERGED lse)", ratio / ratios);
  return fmt::format("{}: o[{}] = {:.6g}, expected {:.6g} (error {:.2e}, allowed {:.2e}){}", where, worst, got,
                     ref, err, c.o_tol[r], hint);
}

// The CPU combine built from answers 1 and 2 (the kernel's TODO 3 does this on the GPU).
inline void combine_cpu(const Answers& a, const Case& c, std::vector<float>& o, std::vector<float>& lse) {
  const int S = c.splits, dim = c.head_dim;
  o.assign(std::size_t(c.rows) * dim, 0.f);
  lse.assign(c.rows, 0.f);
  for (int r = 0; r < c.rows; ++r) {
    const float* lse_part = &c.lse_part[std::size_t(r) * S];
    lse[r] = a.merged_lse(lse_part, S);
    for (int d = 0; d < dim; ++d) {
      float acc = 0.f;
      for (int s = 0; s < S; ++s) {
        const float w = a.split_weight(lse_part[s], lse[r]);
        if (w != 0.f) acc += w * c.o_part[(std::size_t(r) * S + s) * dim + d];
      }
      o[std::size_t(r) * dim + d] = acc;
    }
  }
}

// The model's verdict: check 0 = passed; else the first failure.
struct Finding {
  int check = 0;
  std::string what;
};
inline const char* check_name(int check) {
  switch (check) {
    case 1: return "merged_lse on hand-picked values";
    case 2: return "split_weight on hand-picked values";
    case 3: return "the CPU combine against the fp64 softmax over all keys";
  }
  return "?";
}

inline Finding check(const Answers& a) {
  // 1: merged_lse. {values, expected}
  struct LseCase {
    std::vector<float> lse;
    double want;
    const char* why;
  };
  const double ln2 = std::log(2.0);
  const std::vector<LseCase> lse_cases = {
      {{0.f}, 0.0, "one split: its own lse"},
      {{0.f, 0.f}, ln2, "two equal halves: log 2"},
      {{1000.f, 1000.f}, 1000.0 + ln2, "exp(1000) is inf in fp32: subtract the max"},
      {{-1000.f, -1000.f}, -1000.0 + ln2, "exp(−1000) is 0 in fp32: subtract the max"},
      {{-INFINITY, 3.f}, 3.0, "an empty split adds nothing"},
      {{-INFINITY, -INFINITY, -INFINITY}, -INFINITY, "no split saw a key: −inf, and −inf − (−inf) is NaN"},
  };
  for (const auto& lc : lse_cases) {
    const float got = a.merged_lse(lc.lse.data(), int(lc.lse.size()));
    const bool ok = lc.want == -INFINITY ? got == -INFINITY
                                         : std::isfinite(got) && std::abs(got - lc.want) <= 1e-6 * (1 + std::abs(lc.want));
    if (!ok)
      return {1, fmt::format("merged_lse({}) = {}, expected {:.6f} ({})", fmt::join(lc.lse, ", "), got, lc.want, lc.why)};
  }
  // 2: split_weight.
  struct WeightCase {
    float lse_s, lse;
    double want;
    const char* why;
  };
  const std::vector<WeightCase> weight_cases = {
      {2.f, 2.f, 1.0, "the only split: weight 1"},
      {0.f, float(ln2), 0.5, "one of two equal halves: 1/2"},
      {-2000.f, -2000.f + float(ln2), 0.5, "lse far below 0: the difference is what counts"},
      {-INFINITY, 5.f, 0.0, "an empty split weighs 0"},
      {-INFINITY, -INFINITY, 0.0, "a row with no key: 0, not exp(−inf − (−inf)) = NaN"},
  };
  for (const auto& wc : weight_cases) {
    const float got = a.split_weight(wc.lse_s, wc.lse);
    if (!(std::abs(got - wc.want) <= 1e-4))
      return {2, fmt::format("split_weight(lse_s = {}, lse = {}) = {}, expected {} ({})", wc.lse_s, wc.lse, got,
                             wc.want, wc.why)};
  }
  // 3: the combine on the grid.
  std::vector<float> o, lse;
  for (const Case& c : grid()) {
    combine_cpu(a, c, o, lse);
    for (int r = 0; r < c.rows; ++r)
      if (auto why = judge_row(c, r, &o[std::size_t(r) * c.head_dim], lse[r]); !why.empty()) return {3, why};
  }
  return {};
}

}  // namespace lab08::model
