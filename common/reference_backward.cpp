// The backward pass's CPU references (reference.hpp): the fp64 forward it starts from, the
// statistics a kernel works from, and rows of dQ, dK and dV in fp64 and in low precision, for
// dense, GQA and packed variable-length problems alike.
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include "common/dtype.hpp"
#include "common/reference.hpp"
#include "common/reference_detail.hpp"

namespace ladder {
using reference_detail::attention_row_fp64;
using reference_detail::parallel_rows;

ForwardForBackward forward_for_backward_fp64(const AttentionShape& s, std::span<const float> q,
                                             std::span<const float> k, std::span<const float> v,
                                             std::span<const float> d_o) {
  ForwardForBackward out;
  const std::size_t rows = std::size_t(s.rows());
  const int d = s.head_dim;
  out.o.resize(rows * d);
  out.stats.lse.resize(rows);
  out.stats.delta.resize(rows);
  const RowIndex index(s);
  parallel_rows(rows, [&](std::size_t row) {
    const auto [b, h, i] = index.coord(std::int64_t(row));
    const std::int64_t head = index.key_offset(b, h / s.group(), 0);
    double* o = out.o.data() + row * d;
    attention_row_fp64(s, q.data() + row * d, k.data() + head, v.data() + head, index.key_stride(),
                       s.last_key(b, i) + 1, o, &out.stats.lse[row]);
    double delta = 0.0;
    for (int t = 0; t < d; ++t) delta += double(d_o[row * d + t]) * o[t];
    out.stats.delta[row] = delta;
  });
  return out;
}

BackwardStats backward_stats_low(const AttentionShape& s, std::span<const float> o_stored,
                                 std::span<const float> d_o, std::span<const float> lse_stored) {
  BackwardStats out;
  const std::size_t rows = std::size_t(s.rows());
  const RowIndex index(s);
  out.lse.resize(rows);
  out.delta.resize(rows);
  for (std::size_t row = 0; row < rows; ++row) {
    const auto [b, h, i] = index.coord(std::int64_t(row));
    out.lse[row] = lse_stored[std::size_t(index.lse_index(b, h, i))];
    float delta = 0.f;
    for (int t = 0; t < s.head_dim; ++t)
      delta += d_o[row * s.head_dim + t] * o_stored[row * s.head_dim + t];
    out.delta[row] = delta;
  }
  return out;
}

namespace {
// One gradient row of sequence b in precision T (double, or float with the kernel's roundings).
// Query row (h, i): dQ_i = scale Σ_j dS_ij K_j over the keys it sees (K/V head h / group). Key row
// (hk, j): dV_j = Σ_(h,i) P_ij dO_i and dK_j = scale Σ_(h,i) dS_ij Q_i over the query rows of
// every head h of hk's group that see key j.
template <typename T>
struct GradientRow {
  const AttentionShape& s;
  const BackwardInputs& in;
  const BackwardStats& stats;
  const RowIndex& index;
  int b;  // the sequence (dense: the batch entry)

  const float* query_at(std::span<const float> x, int h, int i) const {
    return x.data() + index.row(b, h, i) * s.head_dim;
  }
  const float* key_at(std::span<const float> x, int hk, int j) const {
    return x.data() + index.key_offset(b, hk, j);
  }
  // The first query that sees key j (causal aligned to the end, as the forward's last_key).
  int first_query(int j) const {
    return s.causal ? std::max(0, j - (s.kv_len(b) - s.q_len(b))) : 0;
  }
  T round(T x) const {
    if constexpr (std::is_same_v<T, float>) return round_to(s.dtype, x);
    return x;
  }
  T dot(const float* a, const float* c) const {
    T acc = 0;
    for (int t = 0; t < s.head_dim; ++t) acc += T(a[t]) * T(c[t]);
    return acc;
  }
  // P_ij and dS_ij of query row (h, i) and key j (each rounded as it feeds a product in low
  // precision).
  void probabilities(int h, int i, int j, T* p, T* ds) const {
    const std::int64_t row = index.row(b, h, i);
    const int hk = h / s.group();
    const T score = dot(query_at(in.q, h, i), key_at(in.k, hk, j)) * scale();
    const T prob = std::exp(score - T(stats.lse[std::size_t(row)]));
    const T dp = dot(query_at(in.d_o, h, i), key_at(in.v, hk, j));
    *p = round(prob);
    *ds = round(prob * (dp - T(stats.delta[std::size_t(row)])));
  }
  T scale() const {
    return std::is_same_v<T, float> ? T(s.softmax_scale()) : T(1.0 / std::sqrt(double(s.head_dim)));
  }
  // The magnitude that dS_ij's cancellation is made of: P_ij (Σ_d |dO_id V_jd| + |D_i|).
  double cancelling(int h, int i, int j) const {
    const std::int64_t row = index.row(b, h, i);
    const float* d_o = query_at(in.d_o, h, i);
    const float* v = key_at(in.v, h / s.group(), j);
    double magnitude = std::fabs(stats.delta[std::size_t(row)]);
    for (int t = 0; t < s.head_dim; ++t) magnitude += std::fabs(double(d_o[t]) * v[t]);
    return exact_p(h, i, j) * magnitude;
  }
  double exact_p(int h, int i, int j) const {
    const float* q = query_at(in.q, h, i);
    const float* k = key_at(in.k, h / s.group(), j);
    double score = 0;
    for (int t = 0; t < s.head_dim; ++t) score += double(q[t]) * k[t];
    return std::exp(score / std::sqrt(double(s.head_dim)) - stats.lse[std::size_t(index.row(b, h, i))]);
  }
  double max_abs(const float* x) const {
    double m = 0;
    for (int t = 0; t < s.head_dim; ++t) m = std::max(m, std::fabs(double(x[t])));
    return m;
  }
  // The two rounding noises a correct kernel carries and the low-precision reference samples only
  // once (its own realization), so that 2× its error is no bound where the realization is small:
  // - fp32: dP_ij and D_i are D-long dot products, off by about ε₃₂·sqrt(D)·Σ|terms| each, and
  //   where dP ≈ D (a row with one key, a near one-hot P) that residue is all dS has;
  // - the element type: P and dS are rounded before their products (unit roundoff u), and a
  //   gradient row is a cancelling sum (Σ_j dS_ij = 0): the roundings add up to about
  //   u·sqrt(Σ_j term_j²), term_j = |dS_ij|·max|K_j| (or |P_ij|·max|dO_i| for dV), whatever the
  //   size of the result. A kernel whose fp32 dS differs from the reference's in the last bit
  //   rounds some of them the other way: a fresh sample of that noise.
  // Both are sums over the terms of the row, so a dK or dV row of a GQA problem, which sums over
  // the query rows of a whole group of heads, accumulates every one of them.
  static constexpr double kEpsilon32 = 0x1p-24;  // fp32's unit roundoff
  double unit_roundoff() const { return std::ldexp(1.0, -fraction_bits(s.dtype) - 1); }
  struct Noise {
    double residue = 0;   // Σ_j P_ij (Σ|dO V| + |D|) · max|X_j|
    double squares = 0;   // Σ_j term_j²
    double floor(const GradientRow& g, bool has_ds) const {
      const double fp32 = has_ds ? kEpsilon32 * std::sqrt(double(g.s.head_dim)) * residue : 0.0;
      return double(has_ds ? g.scale() : T(1)) * fp32 + g.unit_roundoff() * std::sqrt(squares);
    }
  };

  void query(int h, int i, double* dq, double* floor) const {
    std::vector<T> acc(s.head_dim, T(0));
    Noise noise;
    const int hk = h / s.group();
    for (int j = 0; j <= s.last_key(b, i); ++j) {
      T p, ds;
      probabilities(h, i, j, &p, &ds);
      const float* kj = key_at(in.k, hk, j);
      for (int t = 0; t < s.head_dim; ++t) acc[t] += ds * T(kj[t]);
      if (floor) {
        noise.residue += cancelling(h, i, j) * max_abs(kj);
        const double term = double(scale()) * std::fabs(double(ds)) * max_abs(kj);
        noise.squares += term * term;
      }
    }
    for (int t = 0; t < s.head_dim; ++t) dq[t] = double(round(acc[t] * scale()));
    if (floor) *floor = noise.floor(*this, true);
  }
  void key(int hk, int j, double* dk, double* dv, double* floor_k, double* floor_v) const {
    std::vector<T> acc_k(s.head_dim, T(0)), acc_v(s.head_dim, T(0));
    Noise noise_k, noise_v;
    for (int h = hk * s.group(); h < (hk + 1) * s.group(); ++h)
      for (int i = first_query(j); i < s.q_len(b); ++i) {
        T p, ds;
        probabilities(h, i, j, &p, &ds);
        const float* qi = query_at(in.q, h, i);
        const float* doi = query_at(in.d_o, h, i);
        for (int t = 0; t < s.head_dim; ++t) {
          acc_v[t] += p * T(doi[t]);
          acc_k[t] += ds * T(qi[t]);
        }
        if (floor_k) {
          noise_k.residue += cancelling(h, i, j) * max_abs(qi);
          const double term_k = double(scale()) * std::fabs(double(ds)) * max_abs(qi);
          const double term_v = std::fabs(double(p)) * max_abs(doi);
          noise_k.squares += term_k * term_k;
          noise_v.squares += term_v * term_v;
        }
      }
    for (int t = 0; t < s.head_dim; ++t) {
      dk[t] = double(round(acc_k[t] * scale()));
      dv[t] = double(round(acc_v[t]));
    }
    if (floor_k) *floor_k = noise_k.floor(*this, true);
    if (floor_v) *floor_v = noise_v.floor(*this, false);
  }
};

template <typename T>
void backward_rows(const AttentionShape& s, const BackwardInputs& in, const BackwardStats& stats,
                   BackwardRows& out) {
  const int d = s.head_dim;
  const bool floors = !out.dq_floor.empty() || !out.dk_floor.empty();
  const RowIndex index(s);
  parallel_rows(out.q_rows.size() + out.k_rows.size(), [&](std::size_t r) {
    if (r < out.q_rows.size()) {
      const auto [b, h, i] = index.coord(out.q_rows[r]);
      GradientRow<T>{s, in, stats, index, b}.query(h, i, out.dq.data() + r * d,
                                                   floors ? &out.dq_floor[r] : nullptr);
    } else {
      const std::size_t kr = r - out.q_rows.size();
      const auto [b, hk, j] = index.key_coord(out.k_rows[kr]);
      GradientRow<T>{s, in, stats, index, b}.key(hk, j, out.dk.data() + kr * d, out.dv.data() + kr * d,
                                                 floors ? &out.dk_floor[kr] : nullptr,
                                                 floors ? &out.dv_floor[kr] : nullptr);
    }
  });
}
}  // namespace

BackwardRows backward_reference(const AttentionShape& s, const BackwardInputs& in,
                                const BackwardStats& stats, std::span<const std::int64_t> q_rows,
                                std::span<const std::int64_t> k_rows, Precision precision) {
  if (s.dtype == DType::E4M3)  // validate_backward refuses it; a direct caller is told so too
    throw std::invalid_argument("FP8 is forward-only in this course (Part VIII): no backward reference");
  BackwardRows out;
  out.q_rows.assign(q_rows.begin(), q_rows.end());
  out.k_rows.assign(k_rows.begin(), k_rows.end());
  out.dq.resize(q_rows.size() * s.head_dim);
  out.dk.resize(k_rows.size() * s.head_dim);
  out.dv.resize(k_rows.size() * s.head_dim);
  if (precision == Precision::Fp64) {
    out.dq_floor.resize(q_rows.size());
    out.dk_floor.resize(k_rows.size());
    out.dv_floor.resize(k_rows.size());
    backward_rows<double>(s, in, stats, out);
  } else {
    backward_rows<float>(s, in, stats, out);
  }
  return out;
}

}  // namespace ladder
