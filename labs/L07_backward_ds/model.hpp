// Lab 07's fragment model (given, do not edit): one warp of backward_kv.cu played out on the CPU
// with your backward_ds.hpp's answers. No GPU: a wrong map, a P that is not the forward's, a
// missing D term or a wrong packing is found here, with the lane, register and entry that show it.
//
// What is modelled: the 32 lanes of a warp, each with its registers; the mma.m16n8k16 fragment
// layouts of the PTX ISA, written below independently of your answers (true_row, true_col and the
// A and B maps); the warp-wide mma itself (fp16 operands, exact products, fp32-rounded sum). The
// checks, in order, each one's failure stopping the rest:
//   1. the map      acc_row/acc_col against the PTX layout, every lane and register;
//   2. P            recompute_p against exp(scale·s − lse) in double, masked entries exactly 0;
//   3. one tile     softmax_backward_tile on random Sᵀ, dPᵀ, lse, D tiles (every nt), against
//                   P∘(dP − D) in double at each (key, query);
//   4. the packing  pack_a's registers against the A layout, half by half;
//   5. one block    a warp's whole query block: Sᵀ and dPᵀ tiles → your tile function → your
//                   packing → the modelled mma for dV += Pᵀ dO and dK += dSᵀ Q, against the
//                   products in double.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "labs/L07_backward_ds/lab07.hpp"

namespace lab07::model {

// Your four answers as plain functions (the checker passes backward_ds.hpp's; the self-test
// passes classic mistakes).
struct Answers {
  std::function<int(int lane, int c)> acc_row;
  std::function<int(int lane, int c)> acc_col;
  std::function<float(float s, float lse, float scale)> recompute_p;
  std::function<void(float (&)[4], float (&)[4], const float*, const float*, int, int, float)> tile;
  std::function<void(std::uint32_t (&)[4], const float (&)[4], const float (&)[4])> pack_a;
};

struct Finding {
  int check = 0;  // 0: all passed; else the number of the check that failed (1 … 5)
  std::string what;
};
inline const char* check_name(int check) {
  constexpr const char* names[] = {"none", "the map", "P from the LSE", "one tile (dS)", "the packing", "one block (dV, dK)"};
  return check >= 0 && check <= 5 ? names[check] : "?";
}

// ---- The PTX ISA's layouts (lane = 4g + t), not yours ----------------------------------------
inline int true_row(int lane, int c) { return lane / 4 + 8 * (c / 2); }
inline int true_col(int lane, int c) { return 2 * (lane % 4) + c % 2; }
// A (16×16): register r of lane holds A[row][col], A[row][col + 1].
inline int a_row(int lane, int r) { return lane / 4 + 8 * (r % 2); }
inline int a_col(int lane, int r) { return 2 * (lane % 4) + 8 * (r / 2); }
// B (16×8, k × n): register r of lane holds B[k][n], B[k + 1][n].
inline int b_k(int lane, int r) { return 2 * (lane % 4) + 8 * r; }
inline int b_n(int lane) { return lane / 4; }

inline float half_lo(std::uint32_t x) { return __half2float(__ushort_as_half(std::uint16_t(x & 0xffffu))); }
inline float half_hi(std::uint32_t x) { return __half2float(__ushort_as_half(std::uint16_t(x >> 16))); }
inline float round_half(float x) { return __half2float(__float2half_rn(x)); }

// The warp's mma: C[lane] += A B, the operands read from every lane's registers per the layouts.
using WarpC = std::vector<std::array<float, 4>>;          // [lane][c]
using WarpA = std::vector<std::array<std::uint32_t, 4>>;  // [lane][r]
using WarpB = std::vector<std::array<std::uint32_t, 2>>;  // [lane][r]
inline void mma(WarpC& c, const WarpA& a, const WarpB& b) {
  float A[16][16], B[16][8];
  for (int lane = 0; lane < 32; ++lane) {
    for (int r = 0; r < 4; ++r) {
      A[a_row(lane, r)][a_col(lane, r)] = half_lo(a[lane][r]);
      A[a_row(lane, r)][a_col(lane, r) + 1] = half_hi(a[lane][r]);
    }
    for (int r = 0; r < 2; ++r) {
      B[b_k(lane, r)][b_n(lane)] = half_lo(b[lane][r]);
      B[b_k(lane, r) + 1][b_n(lane)] = half_hi(b[lane][r]);
    }
  }
  for (int lane = 0; lane < 32; ++lane)
    for (int e = 0; e < 4; ++e) {
      double sum = c[lane][e];
      for (int k = 0; k < 16; ++k) sum += double(A[true_row(lane, e)][k]) * B[k][true_col(lane, e)];
      c[lane][e] = float(sum);
    }
}

namespace detail {

inline bool close(double got, double want, double tol_rel) {
  return std::isfinite(got) && std::abs(got - want) <= tol_rel * std::max(1.0, std::abs(want));
}

inline Finding check_map(const Answers& ans) {
  for (int lane = 0; lane < 32; ++lane)
    for (int c = 0; c < 4; ++c) {
      const int r = ans.acc_row(lane, c), col = ans.acc_col(lane, c);
      if (r != true_row(lane, c) || col != true_col(lane, c))
        return {1, fmt::format("lane {} (g = {}, t = {}) register c{} holds C[{}][{}]; your acc_row/acc_col say "
                               "C[{}][{}]", lane, lane / 4, lane % 4, c, true_row(lane, c), true_col(lane, c), r, col)};
    }
  return {};
}

inline Finding check_p(const Answers& ans, std::mt19937& rng) {
  std::uniform_real_distribution<float> logit(-12.f, 12.f), lse_d(-2.f, 6.f);
  for (float scale : {0.125f, 0.0883883476f, 1.f}) {
    for (int i = 0; i < 200; ++i) {
      const float s = logit(rng), lse = lse_d(rng);
      const double want = std::exp(double(scale) * s - lse);
      const float got = ans.recompute_p(s, lse, scale);
      if (!close(got, want, 1e-5))
        return {2, fmt::format("recompute_p(s = {}, lse = {}, scale = {}) = {}, expected exp(scale·s − lse) = {:.7g}{}", s,
                               lse, scale, got, want,
                               close(got, std::exp(double(s) - lse), 1e-5) ? " (the scale is missing)"
                               : close(got, std::exp(double(scale) * s), 1e-5) ? " (the lse is not subtracted)"
                               : close(got, std::exp2(double(scale) * s - lse), 1e-5) ? " (exp2 of a natural-log quantity: multiply by log2 e)"
                                                                                      : "")};
    }
  }
  const float masked = ans.recompute_p(-INFINITY, 1.5f, 0.125f);
  if (masked != 0.f)
    return {2, fmt::format("recompute_p(−inf, …) = {}: a masked entry must give P = 0 exactly", masked)};
  return {};
}

// Per-query arrays are kPadded long, the entries past kBlockM random too: an index past the block
// (a key's index added to the tile's first query, say) reads a wrong value, not past the array.
inline constexpr int kPadded = kBlockM + 16;

// A random tile pair, per the true layout: s[lane][c], dp[lane][c], and per-query lse, delta.
struct Tiles {
  WarpC s, dp;
  std::vector<float> lse, delta;
};
inline Tiles random_tiles(std::mt19937& rng, bool with_mask) {
  std::uniform_real_distribution<float> u(-3.f, 3.f), lse_d(0.5f, 4.f);
  Tiles t{WarpC(32), WarpC(32), std::vector<float>(kPadded), std::vector<float>(kPadded)};
  for (auto& x : t.lse) x = lse_d(rng);
  for (auto& x : t.delta) x = u(rng);
  for (int lane = 0; lane < 32; ++lane)
    for (int c = 0; c < 4; ++c) {
      t.s[lane][c] = (with_mask && true_col(lane, c) < true_row(lane, c) % 8) ? -INFINITY : u(rng) * 4.f;
      t.dp[lane][c] = u(rng);
    }
  return t;
}

inline Finding check_tile(const Answers& ans, std::mt19937& rng) {
  const float scale = 0.125f;
  for (int trial = 0; trial < 16; ++trial) {
    const int nt = trial % kQueryTiles;
    Tiles t = random_tiles(rng, trial % 2 == 1);
    for (int lane = 0; lane < 32; ++lane) {
      float s[4], dp[4];
      for (int c = 0; c < 4; ++c) s[c] = t.s[lane][c], dp[c] = t.dp[lane][c];
      ans.tile(s, dp, t.lse.data(), t.delta.data(), lane, nt, scale);
      for (int c = 0; c < 4; ++c) {
        const int key = true_row(lane, c), q = 8 * nt + true_col(lane, c);
        const double p = std::exp(double(scale) * t.s[lane][c] - t.lse[q]);
        const double ds = p * (double(t.dp[lane][c]) - t.delta[q]);
        const std::string at = fmt::format("tile nt = {}, lane {} register c{}, i.e. key {} of the warp, query {} of the "
                                           "block", nt, lane, c, key, q);
        if (!close(s[c], p, 1e-5))
          return {3, fmt::format("{}: P = {}, expected exp(scale·s − lse[{}]) = {:.7g}{}", at, s[c], q, p,
                                 s[c] == t.s[lane][c] ? " (P was not written)" : "")};
        if (close(ds, 0.0, 1e-6)) continue;
        if (!close(dp[c], ds, 1e-4)) {
          std::string why;
          if (close(dp[c], p * t.dp[lane][c], 1e-4)) why = " (that is P·dP: the D term is missing)";
          else if (close(dp[c], t.dp[lane][c] - t.delta[q], 1e-4)) why = " (that is dP − D: the factor P is missing)";
          else if (dp[c] == t.dp[lane][c]) why = " (dS was not written)";
          else
            for (int other = 0; other < kPadded && why.empty(); ++other)
              if (other != q && close(dp[c], p * (double(t.dp[lane][c]) - t.delta[other]), 1e-4))
                why = fmt::format(" (that is P·(dP − D[{}]): the D of query {}, not of query {} — {})", other, other, q,
                                  other == 8 * nt + key || other == key ? "indexed by the row (the key), as the forward's row statistics are"
                                                                            : "which query does register c hold?");
          return {3, fmt::format("{}: dS = {}, expected P·(dP − D[{}]) = {:.7g}{}", at, dp[c], q, ds, why)};
        }
      }
    }
  }
  return {};
}

inline Finding check_pack(const Answers& ans, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-2.f, 2.f);
  WarpC lo(32), hi(32);
  for (int lane = 0; lane < 32; ++lane)
    for (int c = 0; c < 4; ++c) lo[lane][c] = u(rng), hi[lane][c] = u(rng);
  // The 16×16 A that the two tiles are: columns 0-7 from lo, 8-15 from hi.
  float A[16][16];
  for (int lane = 0; lane < 32; ++lane)
    for (int c = 0; c < 4; ++c) {
      A[true_row(lane, c)][true_col(lane, c)] = round_half(lo[lane][c]);
      A[true_row(lane, c)][8 + true_col(lane, c)] = round_half(hi[lane][c]);
    }
  for (int lane = 0; lane < 32; ++lane) {
    std::uint32_t a[4] = {0, 0, 0, 0};
    float l[4], h[4];
    for (int c = 0; c < 4; ++c) l[c] = lo[lane][c], h[c] = hi[lane][c];
    ans.pack_a(a, l, h);
    for (int r = 0; r < 4; ++r) {
      const int row = a_row(lane, r), col = a_col(lane, r);
      const float want_lo = A[row][col], want_hi = A[row][col + 1];
      if (half_lo(a[r]) != want_lo || half_hi(a[r]) != want_hi) {
        std::string found;
        for (int rr = 0; rr < 16 && found.empty(); ++rr)
          for (int cc = 0; cc + 1 < 16 && found.empty(); ++cc)
            if (A[rr][cc] == half_lo(a[r]) && A[rr][cc + 1] == half_hi(a[r]))
              found = fmt::format(" (you put A[{}][{}, {}] there)", rr, cc, cc + 1);
        return {4, fmt::format("lane {} register a{} must hold A[{}][{}, {}] = ({}, {}), found ({}, {}){}", lane, r, row, col,
                               col + 1, want_lo, want_hi, half_lo(a[r]), half_hi(a[r]), found)};
      }
    }
  }
  return {};
}

// One warp's block: 16 keys × kBlockM queries. Sᵀ and dPᵀ random per the true layout, dO and Q
// random fp16 [kBlockM][kHeadDim]; dV = Pᵀ dO and dK = dSᵀ Q through your functions and the
// modelled mma, against double products of the P and dS of the formulas (rounded to fp16, as the
// kernel's operands are).
inline Finding check_block(const Answers& ans, std::mt19937& rng) {
  const float scale = 0.125f;
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<Tiles> tiles;
  for (int nt = 0; nt < kQueryTiles; ++nt) tiles.push_back(random_tiles(rng, nt == 0));
  // One lse and D per query of the block (the tiles' own are replaced by these).
  std::vector<float> lse(kPadded), delta(kPadded);
  for (int q = 0; q < kPadded; ++q) lse[q] = 1.f + u(rng), delta[q] = u(rng);
  std::vector<float> d_o(kBlockM * kHeadDim), qm(kBlockM * kHeadDim);
  for (auto& x : d_o) x = round_half(u(rng));
  for (auto& x : qm) x = round_half(u(rng));

  // Your functions, lane by lane.
  std::vector<WarpC> p(kQueryTiles, WarpC(32)), ds(kQueryTiles, WarpC(32));
  for (int nt = 0; nt < kQueryTiles; ++nt)
    for (int lane = 0; lane < 32; ++lane) {
      float s[4], dp[4];
      for (int c = 0; c < 4; ++c) s[c] = tiles[nt].s[lane][c], dp[c] = tiles[nt].dp[lane][c];
      ans.tile(s, dp, lse.data(), delta.data(), lane, nt, scale);
      for (int c = 0; c < 4; ++c) p[nt][lane][c] = s[c], ds[nt][lane][c] = dp[c];
    }
  auto product = [&](const std::vector<WarpC>& m, const std::vector<float>& x) {
    std::vector<WarpC> acc(kHeadDim / 8, WarpC(32, {0.f, 0.f, 0.f, 0.f}));
    for (int kk = 0; kk < kQuerySteps; ++kk) {
      WarpA a(32);
      for (int lane = 0; lane < 32; ++lane) {
        float lo[4], hi[4];
        for (int c = 0; c < 4; ++c) lo[c] = m[2 * kk][lane][c], hi[c] = m[2 * kk + 1][lane][c];
        std::uint32_t r[4] = {0, 0, 0, 0};
        ans.pack_a(r, lo, hi);
        for (int i = 0; i < 4; ++i) a[lane][i] = r[i];
      }
      for (int nd = 0; nd < kHeadDim / 8; ++nd) {
        WarpB b(32);  // B[k = query 16kk + k][n = head dim 8nd + n], as the kernel's ldmatrix.trans gives it
        for (int lane = 0; lane < 32; ++lane)
          for (int r = 0; r < 2; ++r) {
            const int q = 16 * kk + b_k(lane, r), d = 8 * nd + b_n(lane);
            b[lane][r] = pack_half2(x[q * kHeadDim + d], x[(q + 1) * kHeadDim + d]);
          }
        mma(acc[nd], a, b);
      }
    }
    return acc;
  };
  const auto dv = product(p, d_o);
  const auto dk = product(ds, qm);

  // The formulas in double.
  for (int nd = 0; nd < kHeadDim / 8; ++nd)
    for (int lane = 0; lane < 32; ++lane)
      for (int c = 0; c < 4; ++c) {
        const int key = true_row(lane, c), d = 8 * nd + true_col(lane, c);
        double want_v = 0, want_k = 0, mag_v = 0, mag_k = 0;
        for (int nt = 0; nt < kQueryTiles; ++nt)
          for (int l2 = 0; l2 < 32; ++l2)
            for (int c2 = 0; c2 < 4; ++c2) {
              if (true_row(l2, c2) != key) continue;
              const int q = 8 * nt + true_col(l2, c2);
              const double pv = std::exp(double(scale) * tiles[nt].s[l2][c2] - lse[q]);
              const double dsv = pv * (double(tiles[nt].dp[l2][c2]) - delta[q]);
              want_v += round_half(float(pv)) * double(d_o[q * kHeadDim + d]);
              want_k += round_half(float(dsv)) * double(qm[q * kHeadDim + d]);
              mag_v += std::abs(pv * d_o[q * kHeadDim + d]);
              mag_k += std::abs(dsv * qm[q * kHeadDim + d]);
            }
        const double tol_v = 1e-3 * std::max(1.0, mag_v), tol_k = 1e-3 * std::max(1.0, mag_k);
        if (!(std::abs(dv[nd][lane][c] - want_v) <= tol_v))
          return {5, fmt::format("dV[key {}][d {}] = {}, expected Σ_q P[q][key]·dO[q][d] = {:.6g}", key, d, dv[nd][lane][c], want_v)};
        if (!(std::abs(dk[nd][lane][c] - want_k) <= tol_k))
          return {5, fmt::format("dK[key {}][d {}] (before the scale) = {}, expected Σ_q dS[q][key]·Q[q][d] = {:.6g}", key, d,
                                 dk[nd][lane][c], want_k)};
      }
  return {};
}

}  // namespace detail

// Runs the five checks in order; the first failure is the finding.
inline Finding check(const Answers& ans, unsigned seed = 7) {
  std::mt19937 rng(seed);
  if (Finding f = detail::check_map(ans); f.check) return f;
  if (Finding f = detail::check_p(ans, rng); f.check) return f;
  if (Finding f = detail::check_tile(ans, rng); f.check) return f;
  if (Finding f = detail::check_pack(ans, rng); f.check) return f;
  if (Finding f = detail::check_block(ans, rng); f.check) return f;
  return {};
}

}  // namespace lab07::model
