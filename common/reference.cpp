#include "common/reference.hpp"


#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <set>
#include <thread>

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

void attention_row_fp64(const AttentionShape& s, const float* q_row, const float* k_head,
                        const float* v_head, int i, double* o, double* lse) {
  const int n_keys = s.causal ? i + 1 : s.seqlen;
  const int d = s.head_dim;
  const double scale = 1.0 / std::sqrt(double(d));
  std::vector<double> logits(n_keys);
  double m = -INFINITY;
  for (int j = 0; j < n_keys; ++j) {
    double acc = 0.0;
    for (int t = 0; t < d; ++t) acc += double(q_row[t]) * double(k_head[std::int64_t(j) * d + t]);
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
    for (int t = 0; t < d; ++t) o[t] += logits[j] * double(v_head[std::int64_t(j) * d + t]);
  for (int t = 0; t < d; ++t) o[t] /= l;
  *lse = m + std::log(l);
}

void attention_row_low(const AttentionShape& s, const float* q_row, const float* k_head,
                       const float* v_head, int i, double* o, double* lse) {
  const int n_keys = s.causal ? i + 1 : s.seqlen;
  const int d = s.head_dim;
  const float scale = s.softmax_scale();
  std::vector<float> logits(n_keys);
  float m = -INFINITY;
  for (int j = 0; j < n_keys; ++j) {
    float acc = 0.f;
    for (int t = 0; t < d; ++t) acc += q_row[t] * k_head[std::int64_t(j) * d + t];
    logits[j] = acc * scale;
    m = std::max(m, logits[j]);
  }
  float l = 0.f;
  std::vector<float> acc(d, 0.f);
  for (int j = 0; j < n_keys; ++j) {
    const float p = std::exp(logits[j] - m);
    l += p;  // the sum uses the fp32 probabilities ...
    const float p16 = round_to(s.dtype, p);  // ... the product with V their fp16 (bf16) rounding
    for (int t = 0; t < d; ++t) acc[t] += p16 * v_head[std::int64_t(j) * d + t];
  }
  for (int t = 0; t < d; ++t) o[t] = round_to(s.dtype, acc[t] / l);
  *lse = double(m + std::log(l));
}

}  // namespace

AttentionRows attention_reference(const AttentionShape& s, std::span<const float> q,
                                  std::span<const float> k, std::span<const float> v,
                                  std::span<const std::int64_t> rows, Precision precision) {
  AttentionRows out;
  out.rows.assign(rows.begin(), rows.end());
  out.o.resize(rows.size() * s.head_dim);
  out.lse.resize(rows.size());
  const std::int64_t head_elems = std::int64_t(s.seqlen) * s.head_dim;
  parallel_rows(rows.size(), [&](std::size_t r) {
    const std::int64_t row = rows[r];
    const std::int64_t bh = row / s.seqlen;
    const int i = int(row % s.seqlen);
    const float* q_row = q.data() + row * s.head_dim;
    const float* k_head = k.data() + bh * head_elems;
    const float* v_head = v.data() + bh * head_elems;
    double* o = out.o.data() + r * s.head_dim;
    if (precision == Precision::Fp64)
      attention_row_fp64(s, q_row, k_head, v_head, i, o, &out.lse[r]);
    else
      attention_row_low(s, q_row, k_head, v_head, i, o, &out.lse[r]);
  });
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
