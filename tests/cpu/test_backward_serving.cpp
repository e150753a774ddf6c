// The backward pass on Part VI's problems (GQA and packed variable-length batches), on the CPU:
//
// 1. The GQA reference is the MHA reference of the same arithmetic: K and V repeated over each
//    group of query heads, dK and dV summed over the group (the fp64 rows, the low-precision rows
//    to their rounding, and each dK/dV row's noise floor between the largest of the group's and
//    their sum); and the runner's check fails a dK/dV that holds one head's share only.
// 2. The varlen reference is the dense reference of each sequence alone (every statistic, every
//    gradient row, every floor, in fp64 and in low precision), a sequence of one token included.
// 3. The sampled key rows cover every sequence, K/V head and tile; key rows map to (b, hk, j) and
//    back; validate_backward takes dense, GQA and varlen and refuses decode and paged shapes; the
//    CLI's --kv-heads and --varlen make backward problems.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "common/cli.hpp"
#include "common/compare.hpp"
#include "common/problem.hpp"
#include "common/random.hpp"
#include "common/reference.hpp"
#include "tests/catch.hpp"

using namespace ladder;

namespace {

std::vector<float> values(std::size_t count, std::uint64_t stream, DType dtype) {
  return random_tensor16(count, 20261215, stream, dtype).value;
}

std::vector<std::int64_t> iota_rows(std::int64_t n) {
  std::vector<std::int64_t> rows(static_cast<std::size_t>(n), 0);
  for (std::size_t r = 0; r < rows.size(); ++r) rows[r] = std::int64_t(r);
  return rows;
}

// Inputs of a backward problem in its layouts, and the forward a kernel would be given.
struct Inputs {
  AttentionShape s;
  std::vector<float> q, k, v, d_o;
  ForwardForBackward exact;
  std::vector<float> o_stored, lse_stored;  // O rounded; the LSE in fp32, in its own layout
};

Inputs make_problem(const AttentionShape& s) {
  const std::size_t nq = std::size_t(s.elements()), nkv = std::size_t(s.kv_rows()) * s.head_dim;
  Inputs p{s, values(nq, 1, s.dtype), values(nkv, 2, s.dtype), values(nkv, 3, s.dtype),
            values(nq, 4, s.dtype), {}, {}, {}};
  p.exact = forward_for_backward_fp64(s, p.q, p.k, p.v, p.d_o);
  for (double o : p.exact.o) p.o_stored.push_back(round_to(s.dtype, float(o)));
  p.lse_stored.resize(std::size_t(s.rows()));
  const RowIndex index(s);
  for (std::int64_t row = 0; row < s.rows(); ++row) {
    const auto [b, h, i] = index.coord(row);
    p.lse_stored[std::size_t(index.lse_index(b, h, i))] = float(p.exact.stats.lse[std::size_t(row)]);
  }
  return p;
}

struct Both {
  BackwardRows fp64, low;
};
// Every dQ row and every dK/dV row, at both precisions.
Both all_gradients(const Inputs& p) {
  const BackwardInputs in{p.q, p.k, p.v, p.d_o};
  const auto q_rows = iota_rows(p.s.rows()), k_rows = iota_rows(p.s.kv_rows());
  return {backward_reference(p.s, in, p.exact.stats, q_rows, k_rows, Precision::Fp64),
          backward_reference(p.s, in, backward_stats_low(p.s, p.o_stored, p.d_o, p.lse_stored), q_rows,
                             k_rows, Precision::Low)};
}

bool near(double a, double b, double rel = 1e-12) {
  return std::fabs(a - b) <= rel * (1.0 + std::fabs(a) + std::fabs(b));
}

}  // namespace

TEST_CASE("the GQA backward reference is MHA's with K/V repeated and dK, dV summed over the group",
          "[backward][serving][reference]") {
  for (DType dtype : {DType::F16, DType::BF16})
    for (int hkv : {2, 1})
      for (bool causal : {false, true}) {
        const int B = 2, H = 4, N = 23, D = 16, G = H / hkv;
        const AttentionShape gqa{.batch = B, .heads = H, .seqlen = N, .head_dim = D, .causal = causal,
                                 .dtype = dtype, .kv_heads = hkv};
        INFO(gqa.to_string());
        const Inputs g = make_problem(gqa);
        // The MHA problem: K/V head h holds GQA's head h / G.
        Inputs m{gqa, g.q, {}, {}, g.d_o, {}, {}, {}};
        m.s.kv_heads = 0;
        for (int b = 0; b < B; ++b)
          for (int h = 0; h < H; ++h) {
            const auto from = std::ptrdiff_t(gqa.kv_offset(b, h / G, 0));
            m.k.insert(m.k.end(), g.k.begin() + from, g.k.begin() + from + N * D);
            m.v.insert(m.v.end(), g.v.begin() + from, g.v.begin() + from + N * D);
          }
        m.exact = forward_for_backward_fp64(m.s, m.q, m.k, m.v, m.d_o);
        m.o_stored = g.o_stored;
        m.lse_stored = g.lse_stored;  // dense: the LSE is in row order for both
        for (std::size_t r = 0; r < g.exact.stats.lse.size(); ++r) {
          REQUIRE(near(g.exact.stats.lse[r], m.exact.stats.lse[r]));
          REQUIRE(near(g.exact.stats.delta[r], m.exact.stats.delta[r]));
        }
        const Both gg = all_gradients(g), mm = all_gradients(m);
        // dQ: the same rows.
        for (std::size_t i = 0; i < gg.fp64.dq.size(); ++i) {
          REQUIRE(near(gg.fp64.dq[i], mm.fp64.dq[i]));
          REQUIRE(gg.low.dq[i] == mm.low.dq[i]);
        }
        for (std::size_t r = 0; r < gg.fp64.dq_floor.size(); ++r) REQUIRE(near(gg.fp64.dq_floor[r], mm.fp64.dq_floor[r]));
        // dK, dV of key head hk: the sum of MHA's rows of the group's heads.
        const RowIndex gi(gqa), mi(m.s);
        std::vector<float> one_head(gg.fp64.dk.size()), summed(gg.fp64.dk.size());
        for (std::int64_t kr = 0; kr < gqa.kv_rows(); ++kr) {
          const auto [b, hk, j] = gi.key_coord(kr);
          double max_floor_k = 0, sum_floor_k = 0, max_floor_v = 0, sum_floor_v = 0, row_max = 0, share_max = 0;
          std::vector<double> dk(D, 0.0), dv(D, 0.0), dk_low(D, 0.0);
          for (int h = hk * G; h < (hk + 1) * G; ++h) {
            const auto mr = std::size_t(mi.key_row(b, h, j));
            for (int t = 0; t < D; ++t) {
              dk[t] += mm.fp64.dk[mr * D + t];
              dv[t] += mm.fp64.dv[mr * D + t];
              dk_low[t] += mm.low.dk[mr * D + t];
              share_max = std::max(share_max, std::fabs(mm.low.dk[mr * D + t]));
              if (h == hk * G) one_head[std::size_t(kr) * D + t] = float(mm.fp64.dk[mr * D + t]);
            }
            max_floor_k = std::max(max_floor_k, mm.fp64.dk_floor[mr]);
            max_floor_v = std::max(max_floor_v, mm.fp64.dv_floor[mr]);
            sum_floor_k += mm.fp64.dk_floor[mr];
            sum_floor_v += mm.fp64.dv_floor[mr];
          }
          const auto r = std::size_t(kr);
          for (int t = 0; t < D; ++t) {
            REQUIRE(near(gg.fp64.dk[r * D + t], dk[t], 1e-10));
            REQUIRE(near(gg.fp64.dv[r * D + t], dv[t], 1e-10));
            row_max = std::max(row_max, std::fabs(dk[t]));
            summed[r * D + t] = round_to(dtype, float(dk[t]));
          }
          // The low-precision sum rounds once, MHA's each head's share: G + 1 ulps (of the largest
          // share) apart at most.
          for (int t = 0; t < D; ++t)
            REQUIRE(std::fabs(gg.low.dk[r * D + t] - dk_low[t]) <=
                    (G + 1) * attention_abs_term(std::max(row_max, share_max), dtype));
          // The floors sum the noise of every term of the group: between the largest and the sum.
          REQUIRE(gg.fp64.dk_floor[r] >= max_floor_k * (1 - 1e-12));
          REQUIRE(gg.fp64.dk_floor[r] <= sum_floor_k * (1 + 1e-12));
          REQUIRE(gg.fp64.dv_floor[r] >= max_floor_v * (1 - 1e-12));
          REQUIRE(gg.fp64.dv_floor[r] <= sum_floor_v * (1 + 1e-12));
        }
        // The runner's check: the group's sum passes; one head's share of it fails.
        const auto k_rows = iota_rows(gqa.kv_rows());
        CHECK(check_gradient_output(summed, D, k_rows, gg.fp64.dk, gg.low.dk, gg.fp64.dk_floor, dtype).pass);
        if (G > 1)
          CHECK_FALSE(check_gradient_output(one_head, D, k_rows, gg.fp64.dk, gg.low.dk, gg.fp64.dk_floor, dtype).pass);
      }
}

TEST_CASE("the varlen backward reference is the dense reference of each sequence alone",
          "[backward][serving][reference]") {
  const std::vector<int> lens = {7, 1, 33, 64, 2};
  const int H = 4, D = 16;
  for (int hkv : {2, 4})
    for (bool causal : {false, true}) {
      const AttentionShape var{.batch = int(lens.size()), .heads = H, .seqlen = 64, .head_dim = D,
                               .causal = causal, .kv_heads = hkv, .q_lens = lens};
      INFO(var.to_string());
      const Inputs p = make_problem(var);
      const Both whole = all_gradients(p);
      const RowIndex vi(var);
      for (int b = 0; b < var.batch; ++b) {
        const int n = lens[std::size_t(b)];
        const AttentionShape one{.batch = 1, .heads = H, .seqlen = n, .head_dim = D, .causal = causal,
                                 .kv_heads = hkv};
        // Sequence b alone, in the dense layouts [1, H, n, D] and [1, Hkv, n, D].
        Inputs alone{one, {}, {}, {}, {}, {}, {}, {}};
        for (int h = 0; h < H; ++h)
          for (int i = 0; i < n; ++i) {
            const auto at = std::ptrdiff_t(var.q_offset(b, h, i));
            alone.q.insert(alone.q.end(), p.q.begin() + at, p.q.begin() + at + D);
            alone.d_o.insert(alone.d_o.end(), p.d_o.begin() + at, p.d_o.begin() + at + D);
            alone.o_stored.insert(alone.o_stored.end(), p.o_stored.begin() + at, p.o_stored.begin() + at + D);
            alone.lse_stored.push_back(p.lse_stored[std::size_t(var.lse_index(b, h, i))]);
          }
        for (int hk = 0; hk < hkv; ++hk)
          for (int j = 0; j < n; ++j) {
            const auto at = std::ptrdiff_t(var.kv_offset(b, hk, j));
            alone.k.insert(alone.k.end(), p.k.begin() + at, p.k.begin() + at + D);
            alone.v.insert(alone.v.end(), p.v.begin() + at, p.v.begin() + at + D);
          }
        alone.exact = forward_for_backward_fp64(one, alone.q, alone.k, alone.v, alone.d_o);
        const Both seq = all_gradients(alone);
        const RowIndex oi(one);
        for (int h = 0; h < H; ++h)
          for (int i = 0; i < n; ++i) {
            const auto r = std::size_t(vi.row(b, h, i)), r1 = std::size_t(oi.row(0, h, i));
            REQUIRE(near(p.exact.stats.lse[r], alone.exact.stats.lse[r1]));
            REQUIRE(near(p.exact.stats.delta[r], alone.exact.stats.delta[r1]));
            REQUIRE(near(whole.fp64.dq_floor[r], seq.fp64.dq_floor[r1]));
            for (int t = 0; t < D; ++t) {
              REQUIRE(near(whole.fp64.dq[r * D + t], seq.fp64.dq[r1 * D + t]));
              REQUIRE(whole.low.dq[r * D + t] == seq.low.dq[r1 * D + t]);
            }
          }
        for (int hk = 0; hk < hkv; ++hk)
          for (int j = 0; j < n; ++j) {
            const auto r = std::size_t(vi.key_row(b, hk, j)), r1 = std::size_t(oi.key_row(0, hk, j));
            REQUIRE(near(whole.fp64.dk_floor[r], seq.fp64.dk_floor[r1]));
            REQUIRE(near(whole.fp64.dv_floor[r], seq.fp64.dv_floor[r1]));
            for (int t = 0; t < D; ++t) {
              REQUIRE(near(whole.fp64.dk[r * D + t], seq.fp64.dk[r1 * D + t]));
              REQUIRE(near(whole.fp64.dv[r * D + t], seq.fp64.dv[r1 * D + t]));
              REQUIRE(whole.low.dk[r * D + t] == seq.low.dk[r1 * D + t]);
              REQUIRE(whole.low.dv[r * D + t] == seq.low.dv[r1 * D + t]);
            }
          }
      }
      // A sequence of one token: its key is seen by its one query only, dK = 0 exactly (dS = 0).
      const auto r = std::size_t(vi.key_row(1, 0, 0));
      for (int t = 0; t < D; ++t) CHECK(std::fabs(whole.fp64.dk[r * D + t]) < 1e-12);
    }
}

TEST_CASE("key rows: (b, hk, j) and back; the sample covers every sequence, K/V head and tile",
          "[backward][serving]") {
  const AttentionShape var{.batch = 3, .heads = 4, .seqlen = 300, .head_dim = 8, .kv_heads = 2,
                           .q_lens = {300, 1, 129}};
  const AttentionShape gqa{.batch = 2, .heads = 8, .seqlen = 260, .head_dim = 8, .kv_heads = 2};
  for (const AttentionShape& s : {var, gqa}) {
    INFO(s.to_string());
    const RowIndex index(s);
    for (std::int64_t r = 0; r < s.kv_rows(); ++r) {
      const auto [b, hk, j] = index.key_coord(r);
      REQUIRE(index.key_row(b, hk, j) == r);
      REQUIRE(index.key_offset(b, hk, j) == s.kv_offset(b, hk, j));
    }
    const auto rows = select_key_rows(s, 10, 5);
    const std::set<std::int64_t> chosen(rows.begin(), rows.end());
    CHECK(chosen.size() == rows.size());
    CHECK(*chosen.rbegin() < s.kv_rows());
    std::set<std::tuple<int, int, int>> tiles;  // (b, hk, 128-key tile)
    for (std::int64_t r : rows) {
      const auto [b, hk, j] = index.key_coord(r);
      tiles.insert({b, hk, j / 128});
    }
    for (int b = 0; b < s.batch; ++b)
      for (int hk = 0; hk < s.hkv(); ++hk) {
        CHECK(chosen.count(index.key_row(b, hk, 0)));
        CHECK(chosen.count(index.key_row(b, hk, s.kv_len(b) - 1)));
        for (int t = 0; t < ceil_div(s.kv_len(b), 128); ++t) CHECK(tiles.count({b, hk, t}));
      }
    // Every row when the budget allows it.
    CHECK(select_key_rows(s, s.kv_rows(), 5) == iota_rows(s.kv_rows()));
  }
}

TEST_CASE("a backward problem is dense, GQA or varlen self-attention; decode and paged are refused",
          "[backward][serving]") {
  const AttentionShape dense{.batch = 2, .heads = 8, .seqlen = 128, .head_dim = 64};
  AttentionShape gqa = dense, var = dense, decode = dense, paged = dense, cross = dense, bad = dense;
  gqa.kv_heads = 2;
  var.q_lens = {1, 17};
  var.seqlen = 17;
  decode.kv_seqlen = 4096;
  paged.page_size = 64;
  cross.q_lens = {3, 5};
  cross.kv_lens = {3, 9};
  bad.kv_heads = 3;
  CHECK_FALSE(validate_backward(dense));
  CHECK_FALSE(validate_backward(gqa));
  CHECK_FALSE(validate_backward(var));
  for (const AttentionShape& s : {decode, cross}) {
    const auto why = validate_backward(s);
    REQUIRE(why);
    CHECK(why->find("as many keys as queries") != std::string::npos);
  }
  REQUIRE(validate_backward(paged));
  CHECK(validate_backward(paged)->find("paged") != std::string::npos);
  REQUIRE(validate_backward(bad));
  CHECK(validate_backward(bad)->find("divide") != std::string::npos);
  // Bytes: Q, O, dO, dQ with H heads, K, V, dK, dV with Hkv, 2 bytes each, and the fp32 LSE.
  CHECK(backward_min_bytes(gqa) == (4.0 * 2 * 8 * 128 * 64 + 4.0 * 2 * 2 * 128 * 64) * 2 + 4.0 * 2 * 8 * 128);
  // FLOPs: 2.5x the forward's, per sequence (causal: half of each).
  AttentionShape causal_var = var;
  causal_var.causal = true;
  CHECK(backward_flops(causal_var) == 2.5 * 4.0 * 8 * 64 * (1.0 / 2 + 17.0 * 17 / 2));

  // The command line makes them: ladder --track backward --kv-heads 8 --heads 32 ..., --varlen.
  std::vector<const char*> args = {"ladder", "--track", "backward", "--kv-heads", "8", "--heads", "32",
                                   "--n", "4096", "--d", "128", "--varlen", "dense", "--varlen", "1,17,1000"};
  const auto parsed = parse_cli(int(args.size()), args.data(), -1);
  REQUIRE(parsed.options);
  const auto shapes = attention_shapes(*parsed.options);
  REQUIRE(shapes.size() == 2);
  CHECK(shapes[0].group() == 4);
  CHECK_FALSE(shapes[0].varlen());
  CHECK(shapes[1].varlen());
  CHECK(shapes[1].gqa());
  for (const auto& s : shapes) CHECK_FALSE(validate_backward(s));
}

