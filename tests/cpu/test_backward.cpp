// The backward pass's references and its pass rule (Part V).
//
// 1. The fp64 reference is the gradient: it matches central differences of the fp64 forward.
// 2. The rule fails the mistakes backward kernels really make. A CPU model of FlashAttention-2's
//    backward (K/V-outer loop over 16-row blocks, P recomputed from the stored LSE in fp32, P and
//    dS rounded to the element type before their products, dQ accumulated in fp32 across K/V
//    blocks as the atomics do, the scale applied at the end) runs with one planted bug at a time
//    and goes through the runner's own check (check_attention_output on every row). The correct
//    model must pass, and every bug must fail, causal and not, fp16 and bf16.
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "common/compare.hpp"
#include "common/problem.hpp"
#include "common/random.hpp"
#include "common/reference.hpp"
#include "tests/catch.hpp"

using namespace ladder;

namespace {

struct Inputs {
  AttentionShape shape;
  Tensor16 q, k, v, d_o;
  ForwardForBackward exact;             // fp64 O and statistics of every row
  std::vector<float> o_stored, lse_stored;  // what a forward stores: O rounded, LSE in fp32
};

Inputs make_inputs(const AttentionShape& s, std::uint64_t seed = 7) {
  Inputs in{s, random_tensor16(std::size_t(s.elements()), seed, 1, s.dtype),
            random_tensor16(std::size_t(s.elements()), seed, 2, s.dtype),
            random_tensor16(std::size_t(s.elements()), seed, 3, s.dtype),
            random_tensor16(std::size_t(s.elements()), seed, 4, s.dtype), {}, {}, {}};
  in.exact = forward_for_backward_fp64(s, in.q.value, in.k.value, in.v.value, in.d_o.value);
  for (double o : in.exact.o) in.o_stored.push_back(round_to(s.dtype, float(o)));
  for (double l : in.exact.stats.lse) in.lse_stored.push_back(float(l));
  return in;
}

std::vector<std::int64_t> all_rows(const AttentionShape& s) {
  std::vector<std::int64_t> rows(std::size_t(s.rows()));
  for (std::size_t r = 0; r < rows.size(); ++r) rows[r] = std::int64_t(r);
  return rows;
}

// L = Σ O ∘ dO as a function of the inputs, in fp64.
double loss(const AttentionShape& s, const std::vector<float>& q, const std::vector<float>& k,
            const std::vector<float>& v, const std::vector<float>& d_o) {
  const ForwardForBackward f = forward_for_backward_fp64(s, q, k, v, d_o);
  double l = 0.0;
  for (std::size_t i = 0; i < f.o.size(); ++i) l += f.o[i] * double(d_o[i]);
  return l;
}

// Central differences with step h = 1/64 are accurate to O(h²) of the gradient's curvature.
bool near(double analytic, double numeric) {
  return std::fabs(analytic - numeric) <= 2e-3 + 1e-3 * std::fabs(numeric);
}

}  // namespace

TEST_CASE("the fp64 backward reference is the gradient of the forward", "[backward][reference]") {
  for (bool causal : {false, true}) {
    const AttentionShape s{.batch = 1, .heads = 2, .seqlen = 7, .head_dim = 8, .causal = causal};
    const Inputs in = make_inputs(s);
    const auto rows = all_rows(s);
    const BackwardRows g = backward_reference(s, {in.q.value, in.k.value, in.v.value, in.d_o.value},
                                              in.exact.stats, rows, rows, Precision::Fp64);
    // Central differences on a few elements of each input (the step is exact in float).
    const float h = 1.0f / 64;
    auto numeric = [&](int which, std::size_t index) {
      std::vector<float> x[3] = {in.q.value, in.k.value, in.v.value};
      x[which][index] += h;
      const double up = loss(s, x[0], x[1], x[2], in.d_o.value);
      x[which][index] -= 2 * h;
      const double down = loss(s, x[0], x[1], x[2], in.d_o.value);
      return (up - down) / (2 * double(h));
    };
    for (std::size_t index : {std::size_t(0), std::size_t(13), std::size_t(s.elements() - 1)}) {
      INFO("causal " << causal << ", element " << index);
      CHECK(near(g.dq[index], numeric(0, index)));
      CHECK(near(g.dk[index], numeric(1, index)));
      CHECK(near(g.dv[index], numeric(2, index)));
    }
    // D_i = Σ_d dO_id O_id equals Σ_j P_ij dP_ij: the identity the preprocess kernel relies on.
    for (std::int64_t row : {std::int64_t(0), s.rows() - 1}) {
      const int i = int(row % s.seqlen), d = s.head_dim;
      const std::int64_t head = (row / s.seqlen) * s.seqlen;
      double sum = 0.0;
      for (int j = 0; j <= (causal ? i : s.seqlen - 1); ++j) {
        double score = 0.0, dp = 0.0;
        for (int t = 0; t < d; ++t) {
          score += double(in.q.value[row * d + t]) * in.k.value[(head + j) * d + t];
          dp += double(in.d_o.value[row * d + t]) * in.v.value[(head + j) * d + t];
        }
        sum += std::exp(score / std::sqrt(double(d)) - in.exact.stats.lse[row]) * dp;
      }
      CHECK(std::fabs(sum - in.exact.stats.delta[row]) <= 1e-12 * (1 + std::fabs(sum)));
    }
  }
}

TEST_CASE("the low-precision backward reference rounds, but stays near the exact one",
          "[backward][reference]") {
  const AttentionShape s{.batch = 1, .heads = 1, .seqlen = 100, .head_dim = 32};
  const Inputs in = make_inputs(s);
  const auto rows = all_rows(s);
  const BackwardInputs bi{in.q.value, in.k.value, in.v.value, in.d_o.value};
  const BackwardRows exact = backward_reference(s, bi, in.exact.stats, rows, rows, Precision::Fp64);
  const BackwardRows low = backward_reference(
      s, bi, backward_stats_low(s, in.o_stored, in.d_o.value, in.lse_stored), rows, rows, Precision::Low);
  double max_diff = 0.0, max_abs = 0.0;
  for (std::size_t i = 0; i < exact.dk.size(); ++i) {
    max_diff = std::max(max_diff, std::fabs(exact.dk[i] - low.dk[i]));
    max_abs = std::max(max_abs, std::fabs(exact.dk[i]));
  }
  CHECK(max_diff > 0);                  // it does round
  CHECK(max_diff < 2e-2 * max_abs);     // but only at the element type's precision
}

namespace {

enum class Bug {
  None,
  MissingDelta,     // dS = P ∘ dP: the − D_i term forgotten
  DqWithoutScale,   // dQ converted from the fp32 accumulator without the softmax scale
  DroppedAtomic,    // one (Q block, K/V block) contribution to dQ never added
  PFromBlockMax,    // P recomputed against the block's own row max, not the stored LSE
  UnwrittenDkTile,  // one 16-row tile of dK never stored (the poison stays)
};

const char* name(Bug bug) {
  switch (bug) {
    case Bug::None: return "correct";
    case Bug::MissingDelta: return "missing D term";
    case Bug::DqWithoutScale: return "dQ without the scale";
    case Bug::DroppedAtomic: return "a dropped dQ atomic";
    case Bug::PFromBlockMax: return "P not recomputed from the LSE";
    case Bug::UnwrittenDkTile: return "one unwritten dK tile";
  }
  return "?";
}

constexpr int kBlock = 16;  // rows of a Q block and of a K/V block

struct Gradients {
  std::vector<float> dq, dk, dv;  // [B, H, N, D], widened
};

// FlashAttention-2's backward on the CPU, with `bug` planted.
Gradients model_backward(const Inputs& in, Bug bug) {
  const AttentionShape& s = in.shape;
  const int n = s.seqlen, d = s.head_dim;
  const float scale = s.softmax_scale();
  const std::size_t elements = std::size_t(s.elements());
  Gradients g{std::vector<float>(elements), std::vector<float>(elements), std::vector<float>(elements)};
  std::vector<float> dq_accum(elements, 0.f);
  // The preprocess kernel: D_i from the stored O.
  std::vector<float> delta(std::size_t(s.rows()), 0.f);
  for (std::size_t row = 0; row < delta.size(); ++row)
    for (int t = 0; t < d; ++t) delta[row] += in.d_o.value[row * d + t] * in.o_stored[row * d + t];

  for (std::int64_t bh = 0; bh < std::int64_t(s.batch) * s.heads; ++bh) {
    const std::int64_t base = bh * n;
    auto at = [&](const std::vector<float>& x, int row) { return &x[std::size_t(base + row) * d]; };
    for (int kb = 0; kb < ceil_div(n, kBlock); ++kb) {
      const int j0 = kb * kBlock, j1 = std::min(n, j0 + kBlock);
      std::vector<float> dk(std::size_t(kBlock) * d, 0.f), dv(std::size_t(kBlock) * d, 0.f);
      for (int qb = s.causal ? kb : 0; qb < ceil_div(n, kBlock); ++qb) {
        const int i0 = qb * kBlock, i1 = std::min(n, i0 + kBlock);
        for (int i = i0; i < i1; ++i) {
          const std::int64_t row = base + i;
          std::vector<float> score(std::size_t(j1 - j0), -INFINITY);
          float block_max = -INFINITY;
          for (int j = j0; j < j1 && (!s.causal || j <= i); ++j) {
            float acc = 0.f;
            for (int t = 0; t < d; ++t) acc += at(in.q.value, i)[t] * at(in.k.value, j)[t];
            score[std::size_t(j - j0)] = acc * scale;
            block_max = std::max(block_max, acc * scale);
          }
          for (int j = j0; j < j1 && (!s.causal || j <= i); ++j) {
            const float reference = bug == Bug::PFromBlockMax ? block_max : in.lse_stored[std::size_t(row)];
            const float p = std::exp(score[std::size_t(j - j0)] - reference);
            // Summed in the other order than D_i: a kernel's dot products seldom round like the
            // reference's, and where dP ≈ D (a row with one key) only ε₃₂ residues remain.
            float dp = 0.f;
            for (int t = d - 1; t >= 0; --t) dp += at(in.d_o.value, i)[t] * at(in.v.value, j)[t];
            const float ds = p * (bug == Bug::MissingDelta ? dp : dp - delta[std::size_t(row)]);
            const float p16 = round_to(s.dtype, p), ds16 = round_to(s.dtype, ds);
            for (int t = 0; t < d; ++t) {
              dv[std::size_t(j - j0) * d + t] += p16 * at(in.d_o.value, i)[t];
              dk[std::size_t(j - j0) * d + t] += ds16 * at(in.q.value, i)[t];
              if (!(bug == Bug::DroppedAtomic && qb == ceil_div(n, kBlock) - 1 && kb == 0))
                dq_accum[std::size_t(row) * d + t] += ds16 * at(in.k.value, j)[t];
            }
          }
        }
      }
      for (int j = j0; j < j1; ++j)
        for (int t = 0; t < d; ++t) {
          const std::size_t at_j = std::size_t(base + j) * d + t;
          const bool unwritten = bug == Bug::UnwrittenDkTile && bh == 0 && kb == 1;
          g.dk[at_j] = unwritten ? std::numeric_limits<float>::quiet_NaN()
                                 : round_to(s.dtype, dk[std::size_t(j - j0) * d + t] * scale);
          g.dv[at_j] = round_to(s.dtype, dv[std::size_t(j - j0) * d + t]);
        }
    }
  }
  for (std::size_t i = 0; i < elements; ++i)
    g.dq[i] = round_to(s.dtype, bug == Bug::DqWithoutScale ? dq_accum[i] : dq_accum[i] * scale);
  return g;
}

// The runner's check of each gradient on every row; the worst one's verdict.
bool passes(const Inputs& in, const Gradients& g, double* worst_ratio) {
  const AttentionShape& s = in.shape;
  const auto rows = all_rows(s);
  const BackwardInputs bi{in.q.value, in.k.value, in.v.value, in.d_o.value};
  const BackwardRows exact = backward_reference(s, bi, in.exact.stats, rows, rows, Precision::Fp64);
  const BackwardRows low = backward_reference(
      s, bi, backward_stats_low(s, in.o_stored, in.d_o.value, in.lse_stored), rows, rows, Precision::Low);
  const ErrorStats checks[] = {
      check_gradient_output(g.dq, s.head_dim, rows, exact.dq, low.dq, exact.dq_floor, s.dtype),
      check_gradient_output(g.dk, s.head_dim, rows, exact.dk, low.dk, exact.dk_floor, s.dtype),
      check_gradient_output(g.dv, s.head_dim, rows, exact.dv, low.dv, exact.dv_floor, s.dtype)};
  bool pass = true;
  *worst_ratio = 0;
  for (const ErrorStats& e : checks) {
    pass = pass && e.pass;
    if (e.tolerance > 0) *worst_ratio = std::max(*worst_ratio, e.worst_error / e.tolerance);
  }
  return pass;
}

}  // namespace

TEST_CASE("the backward pass rule fails every planted bug and passes the correct model",
          "[backward][pass-rule][broken]") {
  for (DType dtype : {DType::F16, DType::BF16})
    for (bool causal : {false, true})
      for (int n : {1, 100, 257}) {
        const AttentionShape s{.batch = 1, .heads = 2, .seqlen = n, .head_dim = 32, .causal = causal,
                               .dtype = dtype};
        const Inputs in = make_inputs(s);
        for (Bug bug : {Bug::None, Bug::MissingDelta, Bug::DqWithoutScale, Bug::DroppedAtomic,
                        Bug::PFromBlockMax, Bug::UnwrittenDkTile}) {
          // N = 1: every exact gradient but dV is 0 and there is one block; only the correct
          // model means anything there (its dS is nothing but rounding residues).
          if (n == 1 && bug != Bug::None) continue;
          double ratio = 0;
          const bool pass = passes(in, model_backward(in, bug), &ratio);
          INFO(name(bug) << " on " << s.to_string() << ": worst error / tolerance " << ratio);
          if (bug == Bug::None) {
            CHECK(pass);
            CHECK(ratio < 0.75);  // with room: a rule the correct model barely meets would be noise
          } else {
            CHECK_FALSE(pass);
          }
        }
      }
}
