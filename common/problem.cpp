#include "common/problem.hpp"

#include <fmt/format.h>

#include <cmath>
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

std::string AttentionShape::to_string() const {
  // fp16 is left unnamed so the shapes of fp16 rounds read as they always have.
  return fmt::format("B={} H={} N={} D={} {}{}", batch, heads, seqlen, head_dim,
                     causal ? "causal" : "non-causal", dtype == DType::BF16 ? " bf16" : "");
}
std::string MatmulShape::to_string() const { return fmt::format("M={} N={} K={}", m, n, k); }
std::string ReductionShape::to_string() const { return fmt::format("n={}", count); }

namespace {
constexpr std::int64_t kMaxElements = std::int64_t(1) << 40;  // keeps every index in 64 bits
constexpr std::int64_t kMaxGridX = (std::int64_t(1) << 31) - 1;
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
  if (s.elements() > kMaxElements) return "attention tensors larger than 2^40 elements";
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
  double full = 4.0 * s.batch * s.heads * double(s.seqlen) * s.seqlen * s.head_dim;
  return s.causal ? full / 2.0 : full;
}
double flops(const MatmulShape& s) { return 2.0 * s.m * double(s.n) * s.k; }
double flops(const ReductionShape& s) { return double(s.count - 1); }

double min_bytes(const AttentionShape& s) {
  return 4.0 * double(s.elements()) * 2.0;  // read Q, K, V and write O, 2 bytes each (fp16 or bf16)
}
double min_bytes(const MatmulShape& s) {
  return 4.0 * (double(s.m) * s.k + double(s.k) * s.n + double(s.m) * s.n);
}
double min_bytes(const ReductionShape& s) { return 4.0 * double(s.count) + 4.0; }

double backward_flops(const AttentionShape& s) { return 2.5 * flops(s); }
double backward_min_bytes(const AttentionShape& s) {
  // Q, K, V, O, dO in and dQ, dK, dV out, 2 bytes each; the fp32 log-sum-exp in.
  return 8.0 * double(s.elements()) * 2.0 + 4.0 * double(s.rows());
}

}  // namespace ladder
