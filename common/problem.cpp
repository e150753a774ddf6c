#include "common/problem.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

namespace ladder {

const char* kind_name(Kind kind) {
  switch (kind) {
    case Kind::Attention: return "attention";
    case Kind::Matmul: return "matmul";
    case Kind::Reduction: return "reduction";
    case Kind::Backward: return "backward";
  }
  return "?";
}

float AttentionShape::softmax_scale() const { return 1.0f / std::sqrt(float(head_dim)); }

bool AttentionShape::decode() const {
  for (int b = 0; b < batch; ++b)
    if (q_len(b) != kv_len(b)) return true;
  return false;
}
int AttentionShape::kv_len(int b) const {
  if (varlen()) return kv_lens.empty() ? q_lens[std::size_t(b)] : kv_lens[std::size_t(b)];
  return kv_seqlen > 0 ? kv_seqlen : seqlen;
}
int AttentionShape::max_kv_len() const {
  int m = 0;
  for (int b = 0; b < batch; ++b) m = std::max(m, kv_len(b));
  return m;
}
namespace {
std::vector<int> prefix_sums(int batch, const std::function<int(int)>& len) {
  std::vector<int> cu(std::size_t(batch) + 1, 0);
  for (int b = 0; b < batch; ++b) cu[std::size_t(b) + 1] = cu[std::size_t(b)] + len(b);
  return cu;
}
}  // namespace
std::vector<int> AttentionShape::cu_seqlens_q() const {
  return prefix_sums(batch, [this](int b) { return q_len(b); });
}
std::vector<int> AttentionShape::cu_seqlens_k() const {
  return prefix_sums(batch, [this](int b) { return kv_len(b); });
}
std::int64_t AttentionShape::total_q() const {
  if (!varlen()) return std::int64_t(batch) * seqlen;
  std::int64_t t = 0;
  for (int n : q_lens) t += n;
  return t;
}
std::int64_t AttentionShape::total_k() const {
  std::int64_t t = 0;
  for (int b = 0; b < batch; ++b) t += kv_len(b);
  return t;
}
int AttentionShape::pages_per_seq() const {
  return paged() ? ceil_div(max_kv_len(), page_size) : 0;
}
std::int64_t AttentionShape::num_pages() const {
  std::int64_t n = 0;
  if (paged())
    for (int b = 0; b < batch; ++b) n += ceil_div(kv_len(b), page_size);
  return n;
}
std::int64_t AttentionShape::kv_elements() const {
  const std::int64_t rows = paged() ? num_pages() * page_size * hkv() : kv_rows();
  return rows * head_dim;
}
std::int64_t AttentionShape::q_offset(int b, int h, int i) const {
  if (varlen()) return ((std::int64_t(cu_seqlens_q()[std::size_t(b)]) + i) * heads + h) * head_dim;
  return ((std::int64_t(b) * heads + h) * seqlen + i) * head_dim;
}
std::int64_t AttentionShape::kv_offset(int b, int hk, int j) const {
  if (varlen()) return ((std::int64_t(cu_seqlens_k()[std::size_t(b)]) + j) * hkv() + hk) * head_dim;
  return ((std::int64_t(b) * hkv() + hk) * kv_len(0) + j) * head_dim;
}
std::int64_t AttentionShape::lse_index(int b, int h, int i) const {
  if (varlen()) return std::int64_t(h) * total_q() + cu_seqlens_q()[std::size_t(b)] + i;
  return (std::int64_t(b) * heads + h) * seqlen + i;
}
int AttentionShape::last_key(int b, int i) const {
  const int nk = kv_len(b);
  return causal ? std::min(nk - 1, nk - q_len(b) + i) : nk - 1;
}

std::string AttentionShape::to_string() const {
  // fp16 is left unnamed so the shapes of fp16 rounds read as they always have; so are the Part VI
  // properties that are off.
  std::string s = fmt::format("B={} H={} N={} D={} {}{}", batch, heads, seqlen, head_dim,
                              causal ? "causal" : "non-causal",
                              dtype == DType::F16 ? "" : std::string(" ") + dtype_name(dtype));
  if (gqa()) s += fmt::format(" Hkv={}", hkv());
  if (!varlen() && kv_seqlen > 0 && kv_seqlen != seqlen) s += fmt::format(" Nkv={}", kv_seqlen);
  if (varlen()) s += fmt::format(" varlen({} seqs, {} q, {} kv)", batch, total_q(), total_k());
  if (paged()) s += fmt::format(" page={}", page_size);
  if (head_scales) s += " fp8 per-head scales";
  return s;
}
std::string MatmulShape::to_string() const { return fmt::format("M={} N={} K={}", m, n, k); }
std::string ReductionShape::to_string() const { return fmt::format("n={}", count); }

namespace {
constexpr std::int64_t kMaxElements = std::int64_t(1) << 40;  // keeps every index in 64 bits
constexpr std::int64_t kMaxGridX = (std::int64_t(1) << 31) - 1;
constexpr int kRowBytes = 16;  // a row of K or V must be whole 16-byte vectors (cp.async, TMA)

// Part VIII's FP8 forward is a dense prefill kernel (FlashAttention-3's FP8 path): it serves GQA
// and the causal mask, and no variant serves the other Part VI layouts in fp8, so they are refused
// here, as a usage error, rather than listed as a table of skipped rows.
std::optional<std::string> validate_fp8(const AttentionShape& s) {
  const char* layout = s.varlen() ? "a variable-length batch"
                       : s.paged() ? "a paged K/V cache"
                       : s.decode() ? "a different number of keys than queries (decode)"
                                    : nullptr;
  if (layout)
    return fmt::format("fp8 (Part VIII) runs dense attention only, not {} (asked for {})", layout,
                       s.to_string());
  if (s.head_dim * element_bytes(s.dtype) % kRowBytes != 0)
    return fmt::format("fp8 head dimension D={} must be a multiple of {} ({}-byte rows of 1-byte "
                       "elements)", s.head_dim, kRowBytes / element_bytes(s.dtype), kRowBytes);
  return std::nullopt;
}
}

std::optional<std::string> validate(const AttentionShape& s) {
  if (s.batch <= 0 || s.heads <= 0 || s.seqlen <= 0 || s.head_dim <= 0)
    return fmt::format("attention sizes must be positive (got {})", s.to_string());
  if (s.head_dim % 8 != 0)
    return fmt::format("head dimension D={} must be a multiple of 8 (16-byte rows)", s.head_dim);
  // B·H is an int in the kernels and at most grid.x. Where a variant's grid puts it on grid.y or
  // grid.z (65535), the variant says so and refuses more (Constraints::max_batch_heads).
  if (std::int64_t(s.batch) * s.heads > kMaxGridX)
    return fmt::format("B·H = {} is more than the {} (batch, head) pairs one launch can cover",
                       std::int64_t(s.batch) * s.heads, kMaxGridX);
  if (s.kv_heads < 0 || s.kv_seqlen < 0 || s.page_size < 0)
    return "K/V heads, K/V length and page size must be positive (or 0: off)";
  if (s.heads % s.hkv() != 0)
    return fmt::format("K/V heads Hkv={} must divide the query heads H={} (GQA)", s.hkv(), s.heads);
  if (s.varlen()) {
    if (std::int64_t(s.q_lens.size()) != s.batch)
      return fmt::format("a variable-length batch of {} sequences has {} query lengths", s.batch,
                         s.q_lens.size());
    if (!s.kv_lens.empty() && s.kv_lens.size() != s.q_lens.size())
      return fmt::format("{} query lengths but {} key lengths", s.q_lens.size(), s.kv_lens.size());
    if (s.kv_seqlen > 0) return "a variable-length batch takes its key lengths from kv_lens, not kv_seqlen";
    std::int64_t total = 0;
    for (int b = 0; b < s.batch; ++b) {
      if (s.q_len(b) <= 0 || s.kv_len(b) <= 0)
        return fmt::format("sequence {} has length {} (queries) / {} (keys): lengths must be positive",
                           b, s.q_len(b), s.kv_len(b));
      total += s.q_len(b) + std::int64_t(s.kv_len(b));
    }
    if (total > std::numeric_limits<int>::max()) return "a variable-length batch of more than 2^31 tokens";
  }
  if (s.causal)
    for (int b = 0; b < s.batch; ++b)
      if (s.q_len(b) > s.kv_len(b))
        return fmt::format("causal with {} queries but {} keys in sequence {}: aligned to the end, "
                           "the first queries would see no key", s.q_len(b), s.kv_len(b), b);
  if (s.paged() && s.page_size % 8 != 0)
    return fmt::format("page size {} must be a multiple of 8 rows", s.page_size);
  if (s.elements() > kMaxElements || s.kv_elements() > kMaxElements)
    return "attention tensors larger than 2^40 elements";
  if (s.dtype == DType::E4M3) return validate_fp8(s);
  if (s.head_scales)
    return fmt::format("per-head descales are fp8's (Part VIII): a {} problem has no scales to give "
                       "per head (asked for {}); use --dtype fp8 with --fp8-scales head, or "
                       "--fp8-scales tensor", dtype_name(s.dtype), s.to_string());
  return std::nullopt;
}

std::optional<std::string> validate_backward(const AttentionShape& s) {
  if (s.dtype == DType::E4M3)
    return fmt::format("FP8 is forward-only in this course (Part VIII): no backward of {}", s.to_string());
  if (auto error = validate(s)) return error;
  if (s.paged())
    return fmt::format("the backward takes a contiguous K/V, not a paged cache (asked for {})", s.to_string());
  if (s.decode())
    return fmt::format("the backward is self-attention: every sequence needs as many keys as queries "
                       "(asked for {}; decode shapes have no backward)", s.to_string());
  return std::nullopt;
}

std::optional<std::string> validate(const MatmulShape& s) {
  if (s.m <= 0 || s.n <= 0 || s.k <= 0)
    return fmt::format("matrix sizes must be positive (got {})", s.to_string());
  return std::nullopt;
}

std::optional<std::string> validate(const ReductionShape& s) {
  if (s.count <= 0) return fmt::format("the element count must be positive (got {})", s.count);
  if (s.count > (std::int64_t(1) << 34)) return "reductions over more than 2^34 elements";
  return std::nullopt;
}

double flops(const AttentionShape& s) {
  double pairs = 0;  // (query, key) pairs of one head, over the batch
  for (int b = 0; b < s.batch; ++b) {
    const double nq = s.q_len(b), nk = s.kv_len(b);
    if (!s.causal) pairs += nq * nk;
    else if (nq == nk) pairs += nq * nk / 2.0;  // the papers' convention
    else pairs += nq * (nk - nq) + nq * (nq + 1) / 2.0;  // query i sees Nk - Nq + i + 1 keys
    if (!s.varlen()) { pairs *= s.batch; break; }  // every sequence alike
  }
  return 4.0 * s.heads * pairs * s.head_dim;
}
double flops(const MatmulShape& s) { return 2.0 * s.m * double(s.n) * s.k; }
double flops(const ReductionShape& s) { return double(s.count - 1); }

double min_bytes(const AttentionShape& s) {
  // read Q, K, V at their element size (fp16, bf16: 2 bytes; fp8: 1) and write O at its own
  const double in = element_bytes(s.dtype), out = element_bytes(output_dtype(s.dtype));
  return double(s.elements()) * (in + out) + 2.0 * double(s.kv_rows()) * s.head_dim * in;
}
double min_bytes(const MatmulShape& s) {
  return 4.0 * (double(s.m) * s.k + double(s.k) * s.n + double(s.m) * s.n);
}
double min_bytes(const ReductionShape& s) { return 4.0 * double(s.count) + 4.0; }

double backward_flops(const AttentionShape& s) { return 2.5 * flops(s); }
double backward_min_bytes(const AttentionShape& s) {
  // Q, O, dO in and dQ out; K, V in and dK, dV out (Hkv heads), 2 bytes each; the fp32 log-sum-exp in.
  return (4.0 * double(s.elements()) + 4.0 * double(s.kv_rows()) * s.head_dim) * 2.0 + 4.0 * double(s.rows());
}

}  // namespace ladder
