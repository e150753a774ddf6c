#include "common/reference.hpp"

#include "common/dtype.hpp"
#include "common/reference_detail.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <set>
#include <stdexcept>
#include <thread>
#include <type_traits>

namespace ladder {
namespace reference_detail {

void attention_row_fp64(const AttentionShape& s, const float* q_row, const float* k_head,
                        const float* v_head, std::int64_t key_stride, int n_keys, double* o,
                        double* lse, double* flip_floor) {
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
  double heaviest = 0.0;  // the flip floor's max_j exp(s_j − m) · max_t |v_jt|
  for (int j = 0; j < n_keys; ++j) {
    const float* v_row = v_head + std::int64_t(j) * key_stride;
    for (int t = 0; t < d; ++t) o[t] += logits[j] * double(v_row[t]);
    if (flip_floor != nullptr) {
      double v_max = 0.0;
      for (int t = 0; t < d; ++t) v_max = std::max(v_max, std::fabs(double(v_row[t])));
      heaviest = std::max(heaviest, logits[j] * v_max);
    }
  }
  for (int t = 0; t < d; ++t) o[t] /= l;
  if (flip_floor != nullptr) *flip_floor = kE4M3RoundingStep * heaviest / l;
  *lse = m + std::log(l);
}

}  // namespace reference_detail

namespace {
using reference_detail::attention_row_fp64;
using reference_detail::parallel_rows;

// P as a kernel rounds it before P·V: to the element type; in fp8 to e4m3 after FlashAttention-3's
// offset of 2^8 (kE4M3PScale), and the offset taken back (exact: a power of two).
float round_probability(DType t, float p) {
  if (t == DType::E4M3) return from_e4m3(to_e4m3(p * kE4M3PScale)) / kE4M3PScale;
  return round_to(t, p);
}

// The low-precision row, in the order a kernel works: key blocks of `block` keys from the last to
// the first (the kernels visit the diagonal and ragged blocks first), the running max raised block
// by block, P = exp(s − m_running) rounded for P·V, and the fp32 O and l rescaled by
// exp(m_old − m_new) when the max moves.
//
// Why the order matters for fp8: the rounding of P depends on the max it is taken against. With
// e4m3's 3 fraction bits a row's output error is a handful of its largest weights' rounding
// errors, so a reference that rounds exp(s − m_final) instead of the kernel's exp(s − m_running)
// draws another sample of them. Rounded the kernel's way, the two share all but the few P that
// lie within the kernel's last bits of a rounding boundary (their allowance: compare.hpp). The
// 16-bit types keep one block (the final max): their kernels' tiles differ from step to step, and
// with 8 or 11 fraction bits the two samples' spread stays inside the rule's factor of two.
void attention_row_low(const AttentionShape& s, const float* q_row, const float* k_head,
                       const float* v_head, std::int64_t key_stride, int n_keys, double* o,
                       double* lse, int fp8_key_block) {
  const int d = s.head_dim;
  const float scale = s.softmax_scale();
  std::vector<float> logits(n_keys);
  for (int j = 0; j < n_keys; ++j) {
    float acc = 0.f;
    for (int t = 0; t < d; ++t) acc += q_row[t] * k_head[std::int64_t(j) * key_stride + t];
    logits[j] = acc * scale;
  }
  const int block = s.dtype == DType::E4M3 ? fp8_key_block : n_keys;
  float m = -INFINITY, l = 0.f;
  std::vector<float> acc(d, 0.f);
  for (int start = (n_keys - 1) / block * block; start >= 0; start -= block) {
    const int stop = std::min(n_keys, start + block);
    float m_new = m;
    for (int j = start; j < stop; ++j) m_new = std::max(m_new, logits[j]);
    const float rescale = std::exp(m - m_new);  // 0 for the first block (m = −inf)
    l *= rescale;
    for (int t = 0; t < d; ++t) acc[t] *= rescale;
    m = m_new;
    for (int j = start; j < stop; ++j) {
      const float p = std::exp(logits[j] - m);
      l += p;  // the sum uses the fp32 probabilities ...
      const float pr = round_probability(s.dtype, p);  // ... the product with V their rounding
      for (int t = 0; t < d; ++t) acc[t] += pr * v_head[std::int64_t(j) * key_stride + t];
    }
  }
  for (int t = 0; t < d; ++t) o[t] = round_to(output_dtype(s.dtype), acc[t] / l);
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
RowIndex::Coord RowIndex::key_coord(std::int64_t row) const {
  if (!s.varlen()) {
    const std::int64_t bh = row / s.kv_len(0);
    return {int(bh / s.hkv()), int(bh % s.hkv()), int(row % s.kv_len(0))};
  }
  const std::int64_t token = row / s.hkv();
  const int b = int(std::upper_bound(cu_k.begin(), cu_k.end(), token) - cu_k.begin()) - 1;
  return {b, int(row % s.hkv()), int(token - cu_k[std::size_t(b)])};
}
std::int64_t RowIndex::key_row(int b, int hk, int j) const { return key_offset(b, hk, j) / s.head_dim; }

AttentionRows attention_reference(const AttentionShape& s, std::span<const float> q,
                                  std::span<const float> k, std::span<const float> v,
                                  std::span<const std::int64_t> rows, Precision precision,
                                  int fp8_key_block) {
  if (fp8_key_block < 1) throw std::invalid_argument("attention_reference: the fp8 key block must be positive");
  AttentionRows out;
  out.rows.assign(rows.begin(), rows.end());
  out.o.resize(rows.size() * s.head_dim);
  out.lse.resize(rows.size());
  out.lse_at.resize(rows.size());
  const bool flip_floors = s.dtype == DType::E4M3 && precision == Precision::Fp64;
  if (flip_floors) out.floor.resize(rows.size());
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
    if (precision == Precision::Fp64) {
      attention_row_fp64(s, q_row, k_head, v_head, index.key_stride(), n_keys, o, &out.lse[r],
                         flip_floors ? &out.floor[r] : nullptr);
    } else {
      attention_row_low(s, q_row, k_head, v_head, index.key_stride(), n_keys, o, &out.lse[r], fp8_key_block);
    }
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

std::vector<std::int64_t> select_key_rows(const AttentionShape& s, std::int64_t max_rows,
                                          std::uint64_t seed) {
  // The key rows of s are the query rows of a problem with Hkv heads and the key lengths.
  AttentionShape keys = s;
  keys.heads = s.hkv();
  keys.kv_heads = 0;
  keys.page_size = 0;
  if (s.varlen()) {
    keys.q_lens = s.kv_lens.empty() ? s.q_lens : s.kv_lens;
    keys.kv_lens.clear();
    keys.seqlen = s.max_kv_len();
  } else {
    keys.seqlen = s.kv_len(0);
    keys.kv_seqlen = 0;
  }
  return select_attention_rows(keys, max_rows, seed);
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
