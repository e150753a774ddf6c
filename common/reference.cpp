#include "common/reference.hpp"

#include "common/dtype.hpp"


#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <set>
#include <thread>
#include <type_traits>

namespace ladder {
namespace {

// Run fn(i) for i in [0, count) on all cores; results go to disjoint slots, so no locking.
template <typename Fn>
void parallel_rows(std::size_t count, Fn fn) {
  const std::size_t threads = std::clamp<std::size_t>(std::thread::hardware_concurrency(), 1, 64);
  if (count < 4 || threads == 1) {
    for (std::size_t i = 0; i < count; ++i) fn(i);
    return;
  }
  std::vector<std::thread> pool;
  for (std::size_t t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      for (std::size_t i = t; i < count; i += threads) fn(i);
    });
  for (auto& th : pool) th.join();
}

// One query row against keys 0 .. n_keys - 1, key j at k_head + j · key_stride (V alike):
// key_stride is D in the dense layouts and Hkv · D in the packed variable-length one.
void attention_row_fp64(const AttentionShape& s, const float* q_row, const float* k_head,
                        const float* v_head, std::int64_t key_stride, int n_keys, double* o,
                        double* lse) {
  const int d = s.head_dim;
  const double scale = 1.0 / std::sqrt(double(d));
  std::vector<double> logits(n_keys);
  double m = -INFINITY;
  for (int j = 0; j < n_keys; ++j) {
    double acc = 0.0;
    for (int t = 0; t < d; ++t) acc += double(q_row[t]) * double(k_head[std::int64_t(j) * key_stride + t]);
    logits[j] = acc * scale;
    m = std::max(m, logits[j]);
  }
  double l = 0.0;
  for (int j = 0; j < n_keys; ++j) {
    logits[j] = std::exp(logits[j] - m);
    l += logits[j];
  }
  std::fill(o, o + d, 0.0);
  for (int j = 0; j < n_keys; ++j)
    for (int t = 0; t < d; ++t) o[t] += logits[j] * double(v_head[std::int64_t(j) * key_stride + t]);
  for (int t = 0; t < d; ++t) o[t] /= l;
  *lse = m + std::log(l);
}

void attention_row_low(const AttentionShape& s, const float* q_row, const float* k_head,
                       const float* v_head, std::int64_t key_stride, int n_keys, double* o,
                       double* lse) {
  const int d = s.head_dim;
  const float scale = s.softmax_scale();
  std::vector<float> logits(n_keys);
  float m = -INFINITY;
  for (int j = 0; j < n_keys; ++j) {
    float acc = 0.f;
    for (int t = 0; t < d; ++t) acc += q_row[t] * k_head[std::int64_t(j) * key_stride + t];
    logits[j] = acc * scale;
    m = std::max(m, logits[j]);
  }
  float l = 0.f;
  std::vector<float> acc(d, 0.f);
  for (int j = 0; j < n_keys; ++j) {
    const float p = std::exp(logits[j] - m);
    l += p;  // the sum uses the fp32 probabilities ...
    const float p16 = round_to(s.dtype, p);  // ... the product with V their fp16 (bf16) rounding
    for (int t = 0; t < d; ++t) acc[t] += p16 * v_head[std::int64_t(j) * key_stride + t];
  }
  for (int t = 0; t < d; ++t) o[t] = round_to(s.dtype, acc[t] / l);
  *lse = double(m + std::log(l));
}

}  // namespace

RowIndex::RowIndex(const AttentionShape& shape) : s(shape), cu_q(shape.cu_seqlens_q()), cu_k(shape.cu_seqlens_k()) {}

RowIndex::Coord RowIndex::coord(std::int64_t row) const {
  if (!s.varlen()) {
    const std::int64_t bh = row / s.seqlen;
    return {int(bh / s.heads), int(bh % s.heads), int(row % s.seqlen)};
  }
  const std::int64_t token = row / s.heads;
  const int b = int(std::upper_bound(cu_q.begin(), cu_q.end(), token) - cu_q.begin()) - 1;
  return {b, int(row % s.heads), int(token - cu_q[std::size_t(b)])};
}
std::int64_t RowIndex::row(int b, int h, int i) const {
  if (!s.varlen()) return (std::int64_t(b) * s.heads + h) * s.seqlen + i;
  return (std::int64_t(cu_q[std::size_t(b)]) + i) * s.heads + h;
}
std::int64_t RowIndex::key_offset(int b, int hk, int j) const {
  if (!s.varlen()) return ((std::int64_t(b) * s.hkv() + hk) * s.kv_len(0) + j) * s.head_dim;
  return ((std::int64_t(cu_k[std::size_t(b)]) + j) * s.hkv() + hk) * s.head_dim;
}
std::int64_t RowIndex::lse_index(int b, int h, int i) const {
  if (!s.varlen()) return row(b, h, i);
  return std::int64_t(h) * s.total_q() + cu_q[std::size_t(b)] + i;
}
std::int64_t RowIndex::key_stride() const {
  return s.varlen() ? std::int64_t(s.hkv()) * s.head_dim : s.head_dim;
}

AttentionRows attention_reference(const AttentionShape& s, std::span<const float> q,
                                  std::span<const float> k, std::span<const float> v,
                                  std::span<const std::int64_t> rows, Precision precision) {
  AttentionRows out;
  out.rows.assign(rows.begin(), rows.end());
  out.o.resize(rows.size() * s.head_dim);
  out.lse.resize(rows.size());
  out.lse_at.resize(rows.size());
  const RowIndex index(s);
  parallel_rows(rows.size(), [&](std::size_t r) {
    const std::int64_t row = rows[r];
    const auto [b, h, i] = index.coord(row);
    const int hk = h / s.group();
    const float* q_row = q.data() + row * s.head_dim;
    const float* k_head = k.data() + index.key_offset(b, hk, 0);
    const float* v_head = v.data() + index.key_offset(b, hk, 0);
    const int n_keys = s.last_key(b, i) + 1;
    double* o = out.o.data() + r * s.head_dim;
    out.lse_at[r] = index.lse_index(b, h, i);
    if (precision == Precision::Fp64)
      attention_row_fp64(s, q_row, k_head, v_head, index.key_stride(), n_keys, o, &out.lse[r]);
    else
      attention_row_low(s, q_row, k_head, v_head, index.key_stride(), n_keys, o, &out.lse[r]);
  });
  return out;
}

PagedCache page_cache(const AttentionShape& s, const RowIndex& index, std::span<const std::uint16_t> k,
                      std::span<const std::uint16_t> v, std::uint64_t seed) {
  const int p = s.page_size, d = s.head_dim, hkv = s.hkv(), pps = s.pages_per_seq();
  PagedCache out;
  const std::size_t page_elems = std::size_t(hkv) * p * d;
  out.k.assign(std::size_t(s.num_pages()) * page_elems, to_bits(s.dtype, kPagePadValue));
  out.v = out.k;
  out.block_table.assign(std::size_t(s.batch) * pps, -1);
  std::vector<int> order(std::size_t(s.num_pages()));
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937_64(seed ^ 0xBA6Eull));
  std::size_t next = 0;
  for (int b = 0; b < s.batch; ++b)
    for (int page = 0; page < ceil_div(s.kv_len(b), p); ++page) {
      const int phys = order[next++];
      out.block_table[std::size_t(b) * pps + page] = phys;
      for (int hk = 0; hk < hkv; ++hk)
        for (int r = 0; r < p && page * p + r < s.kv_len(b); ++r) {
          const std::int64_t from = index.key_offset(b, hk, page * p + r);
          const std::size_t to = std::size_t(phys) * page_elems + (std::size_t(hk) * p + r) * d;
          std::copy_n(k.begin() + from, d, out.k.begin() + std::ptrdiff_t(to));
          std::copy_n(v.begin() + from, d, out.v.begin() + std::ptrdiff_t(to));
        }
    }
  return out;
}

std::vector<std::int64_t> select_attention_rows(const AttentionShape& s, std::int64_t max_rows,
                                                std::uint64_t seed) {
  if (!s.varlen()) return select_rows(s.rows(), s.seqlen, max_rows, seed);
  const std::int64_t total = s.rows();
  std::vector<std::int64_t> rows;
  if (total <= max_rows) {
    rows.resize(std::size_t(total));
    for (std::int64_t r = 0; r < total; ++r) rows[std::size_t(r)] = r;
    return rows;
  }
  // Every (sequence, head, tile of queries) once, and each sequence's first and last query.
  const RowIndex index(s);
  std::set<std::int64_t> chosen;
  std::mt19937_64 rng(seed ^ 0x5EEDull);
  for (int b = 0; b < s.batch; ++b)
    for (int h = 0; h < s.heads; ++h) {
      const int n = s.q_len(b);
      chosen.insert(index.row(b, h, 0));
      chosen.insert(index.row(b, h, n - 1));
      for (int t0 = 0; t0 < n; t0 += int(kCoverageTileRows)) {
        const int in_tile = std::min(int(kCoverageTileRows), n - t0);
        chosen.insert(index.row(b, h, t0 + int(rng() % std::uint64_t(in_tile))));
      }
    }
  std::uniform_int_distribution<std::int64_t> pick(0, total - 1);
  while (std::int64_t(chosen.size()) < max_rows) chosen.insert(pick(rng));
  return {chosen.begin(), chosen.end()};
}

// ---- the backward pass ----------------------------------------------------------------------
ForwardForBackward forward_for_backward_fp64(const AttentionShape& s, std::span<const float> q,
                                             std::span<const float> k, std::span<const float> v,
                                             std::span<const float> d_o) {
  ForwardForBackward out;
  const std::size_t rows = std::size_t(s.rows());
  const int d = s.head_dim;
  out.o.resize(rows * d);
  out.stats.lse.resize(rows);
  out.stats.delta.resize(rows);
  const std::int64_t head_elems = std::int64_t(s.seqlen) * d;
  parallel_rows(rows, [&](std::size_t row) {
    const std::int64_t bh = std::int64_t(row) / s.seqlen;
    const int i = int(std::int64_t(row) % s.seqlen);
    double* o = out.o.data() + row * d;
    attention_row_fp64(s, q.data() + row * d, k.data() + bh * head_elems, v.data() + bh * head_elems,
                       d, s.causal ? i + 1 : s.seqlen, o, &out.stats.lse[row]);
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
  out.lse.assign(lse_stored.begin(), lse_stored.end());
  out.delta.resize(rows);
  for (std::size_t row = 0; row < rows; ++row) {
    float delta = 0.f;
    for (int t = 0; t < s.head_dim; ++t)
      delta += d_o[row * s.head_dim + t] * o_stored[row * s.head_dim + t];
    out.delta[row] = delta;
  }
  return out;
}

namespace {
// One gradient row in precision T (double, or float with the kernel's roundings). Query row i:
// dQ_i = scale Σ_j dS_ij K_j over the keys it sees. Key row j: dV_j = Σ_i P_ij dO_i and
// dK_j = scale Σ_i dS_ij Q_i over the query rows that see it.
template <typename T>
struct GradientRow {
  const AttentionShape& s;
  const BackwardInputs& in;
  const BackwardStats& stats;
  std::int64_t bh;  // (batch, head)

  const float* at(std::span<const float> x, int row) const {
    return x.data() + (bh * s.seqlen + row) * s.head_dim;
  }
  T round(T x) const {
    if constexpr (std::is_same_v<T, float>) return round_to(s.dtype, x);
    return x;
  }
  T dot(const float* a, const float* b) const {
    T acc = 0;
    for (int t = 0; t < s.head_dim; ++t) acc += T(a[t]) * T(b[t]);
    return acc;
  }
  // P_ij and dS_ij (each rounded as it feeds a product in low precision).
  void probabilities(int i, int j, T* p, T* ds) const {
    const std::int64_t row = bh * s.seqlen + i;
    const T score = dot(at(in.q, i), at(in.k, j)) * scale();
    const T prob = std::exp(score - T(stats.lse[row]));
    const T dp = dot(at(in.d_o, i), at(in.v, j));
    *p = round(prob);
    *ds = round(prob * (dp - T(stats.delta[row])));
  }
  T scale() const {
    return std::is_same_v<T, float> ? T(s.softmax_scale()) : T(1.0 / std::sqrt(double(s.head_dim)));
  }
  // The magnitude that dS_ij's cancellation is made of: P_ij (Σ_d |dO_id V_jd| + |D_i|).
  double cancelling(int i, int j) const {
    const std::int64_t row = bh * s.seqlen + i;
    double magnitude = std::fabs(stats.delta[row]);
    for (int t = 0; t < s.head_dim; ++t) magnitude += std::fabs(double(at(in.d_o, i)[t]) * at(in.v, j)[t]);
    return exact_p(i, j) * magnitude;
  }
  double exact_p(int i, int j) const {
    double score = 0;
    for (int t = 0; t < s.head_dim; ++t) score += double(at(in.q, i)[t]) * at(in.k, j)[t];
    return std::exp(score / std::sqrt(double(s.head_dim)) - stats.lse[bh * s.seqlen + i]);
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

  void query(int i, double* dq, double* floor) const {
    std::vector<T> acc(s.head_dim, T(0));
    Noise noise;
    const int last = s.causal ? i : s.seqlen - 1;
    for (int j = 0; j <= last; ++j) {
      T p, ds;
      probabilities(i, j, &p, &ds);
      const float* kj = at(in.k, j);
      for (int t = 0; t < s.head_dim; ++t) acc[t] += ds * T(kj[t]);
      if (floor) {
        noise.residue += cancelling(i, j) * max_abs(kj);
        const double term = double(scale()) * std::fabs(double(ds)) * max_abs(kj);
        noise.squares += term * term;
      }
    }
    for (int t = 0; t < s.head_dim; ++t) dq[t] = double(round(acc[t] * scale()));
    if (floor) *floor = noise.floor(*this, true);
  }
  void key(int j, double* dk, double* dv, double* floor_k, double* floor_v) const {
    std::vector<T> acc_k(s.head_dim, T(0)), acc_v(s.head_dim, T(0));
    Noise noise_k, noise_v;
    for (int i = s.causal ? j : 0; i < s.seqlen; ++i) {
      T p, ds;
      probabilities(i, j, &p, &ds);
      const float* qi = at(in.q, i);
      const float* doi = at(in.d_o, i);
      for (int t = 0; t < s.head_dim; ++t) {
        acc_v[t] += p * T(doi[t]);
        acc_k[t] += ds * T(qi[t]);
      }
      if (floor_k) {
        noise_k.residue += cancelling(i, j) * max_abs(qi);
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
  parallel_rows(out.q_rows.size() + out.k_rows.size(), [&](std::size_t r) {
    if (r < out.q_rows.size()) {
      const std::int64_t row = out.q_rows[r];
      GradientRow<T>{s, in, stats, row / s.seqlen}.query(int(row % s.seqlen), out.dq.data() + r * d,
                                                          floors ? &out.dq_floor[r] : nullptr);
    } else {
      const std::size_t kr = r - out.q_rows.size();
      const std::int64_t row = out.k_rows[kr];
      GradientRow<T>{s, in, stats, row / s.seqlen}.key(int(row % s.seqlen), out.dk.data() + kr * d,
                                                        out.dv.data() + kr * d,
                                                        floors ? &out.dk_floor[kr] : nullptr,
                                                        floors ? &out.dv_floor[kr] : nullptr);
    }
  });
}
}  // namespace

BackwardRows backward_reference(const AttentionShape& s, const BackwardInputs& in,
                                const BackwardStats& stats, std::span<const std::int64_t> q_rows,
                                std::span<const std::int64_t> k_rows, Precision precision) {
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
  }
  if (precision == Precision::Fp64)
    backward_rows<double>(s, in, stats, out);
  else
    backward_rows<float>(s, in, stats, out);
  return out;
}

MatmulRows matmul_reference(const MatmulShape& s, std::span<const float> a,
                            std::span<const float> b, std::span<const std::int64_t> rows,
                            Precision precision) {
  MatmulRows out;
  out.rows.assign(rows.begin(), rows.end());
  out.c.resize(rows.size() * std::size_t(s.n));
  parallel_rows(rows.size(), [&](std::size_t r) {
    const float* a_row = a.data() + rows[r] * s.k;
    double* c_row = out.c.data() + r * s.n;
    if (precision == Precision::Fp64) {
      std::vector<double> acc(s.n, 0.0);
      for (int kk = 0; kk < s.k; ++kk) {
        const double x = a_row[kk];
        const float* b_row = b.data() + std::int64_t(kk) * s.n;
        for (int j = 0; j < s.n; ++j) acc[j] += x * double(b_row[j]);
      }
      std::copy(acc.begin(), acc.end(), c_row);
    } else {
      std::vector<float> acc(s.n, 0.f);
      for (int kk = 0; kk < s.k; ++kk) {
        const float x = a_row[kk];
        const float* b_row = b.data() + std::int64_t(kk) * s.n;
        for (int j = 0; j < s.n; ++j) acc[j] += x * b_row[j];
      }
      std::copy(acc.begin(), acc.end(), c_row);
    }
  });
  return out;
}

double reduction_reference(std::span<const float> x, Precision precision) {
  if (precision == Precision::Fp64) {
    double sum = 0.0;
    for (float value : x) sum += value;
    return sum;
  }
  float sum = 0.f;
  for (float value : x) sum += value;
  return sum;
}

double sum_of_magnitudes(std::span<const float> x) {
  double sum = 0.0;
  for (float value : x) sum += std::fabs(value);
  return sum;
}

std::vector<std::int64_t> select_rows(std::int64_t total_rows, std::int64_t rows_per_head,
                                      std::int64_t max_rows, std::uint64_t seed,
                                      std::int64_t tile_rows) {
  std::vector<std::int64_t> rows;
  if (total_rows <= max_rows) {
    rows.resize(total_rows);
    for (std::int64_t r = 0; r < total_rows; ++r) rows[r] = r;
    return rows;
  }
  std::set<std::int64_t> chosen;
  std::mt19937_64 rng(seed ^ 0x5EEDull);
  const std::int64_t heads = total_rows / rows_per_head;
  for (std::int64_t h = 0; h < heads; ++h) {
    const std::int64_t first = h * rows_per_head;
    chosen.insert(first);
    chosen.insert(first + rows_per_head - 1);
    for (std::int64_t t0 = 0; t0 < rows_per_head; t0 += tile_rows) {
      const std::int64_t rows_in_tile = std::min(tile_rows, rows_per_head - t0);
      chosen.insert(first + t0 + std::int64_t(rng() % std::uint64_t(rows_in_tile)));
    }
  }
  std::uniform_int_distribution<std::int64_t> pick(0, total_rows - 1);
  while (std::int64_t(chosen.size()) < max_rows) chosen.insert(pick(rng));
  return {chosen.begin(), chosen.end()};
}

void online_softmax_update(OnlineSoftmaxState& state, std::span<const double> block) {
  double block_max = -INFINITY;
  for (double x : block) block_max = std::max(block_max, x);
  const double m_new = std::max(state.m, block_max);
  if (m_new == -INFINITY) return;  // nothing but −inf so far: keep l = 0
  // The history was summed relative to the old maximum; move it to the new one.
  double l = state.l * std::exp(state.m - m_new);
  for (double x : block) l += std::exp(x - m_new);
  state.m = m_new;
  state.l = l;
}

std::vector<double> online_softmax(std::span<const double> x, std::span<const int> block_sizes) {
  OnlineSoftmaxState state;
  std::size_t offset = 0;
  for (int size : block_sizes) {
    const std::size_t take = std::min<std::size_t>(size, x.size() - offset);
    online_softmax_update(state, x.subspan(offset, take));
    offset += take;
  }
  if (offset != x.size()) online_softmax_update(state, x.subspan(offset));
  std::vector<double> p(x.size());
  for (std::size_t j = 0; j < x.size(); ++j) p[j] = std::exp(x[j] - state.m) / state.l;
  return p;
}

std::vector<double> softmax(std::span<const double> x) {
  double m = -INFINITY;
  for (double v : x) m = std::max(m, v);
  double l = 0.0;
  for (double v : x) l += std::exp(v - m);
  std::vector<double> p(x.size());
  for (std::size_t j = 0; j < x.size(); ++j) p[j] = std::exp(x[j] - m) / l;
  return p;
}

}  // namespace ladder
