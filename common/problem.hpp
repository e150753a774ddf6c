// The three problems the ladder solves, their validation, and their operation and byte counts.
//
// This header has no CUDA in it: the CPU tests and `ladder --list` use it without a GPU.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "common/dtype.hpp"

namespace ladder {

// Backward: the gradients dQ, dK, dV of an attention problem (Part V); its shape is an AttentionShape.
enum class Kind { Attention, Matmul, Reduction, Backward };
const char* kind_name(Kind kind);

// O = softmax(Q Kᵀ · scale [+ causal mask]) V for every (batch, head).
// Q, K, V and O are fp16 (or bf16, for the variants that declare it: common/dtype.hpp), laid out
// [B, H, N, D] contiguous (PyTorch's SDPA layout); accumulation is fp32. The log-sum-exp of each row (natural log, of the scaled logits) is [B, H, N]
// fp32 and is written only by the variants that say so.
struct AttentionShape {
  int batch = 4;
  int heads = 8;
  int seqlen = 4096;
  int head_dim = 64;
  bool causal = false;
  DType dtype = DType::F16;

  std::int64_t rows() const { return std::int64_t(batch) * heads * seqlen; }
  std::int64_t elements() const { return rows() * head_dim; }  // of one of Q, K, V, O
  float softmax_scale() const;                                  // 1 / sqrt(D)
  std::string to_string() const;  // "B=4 H=8 N=4096 D=64 causal", " bf16" appended for bf16
};

// C = A B with A [M, K], B [K, N], C [M, N], fp32, row-major.
struct MatmulShape {
  int m = 4096;
  int n = 4096;
  int k = 4096;
  std::string to_string() const;
};

// out = sum of n fp32 values.
struct ReductionShape {
  std::int64_t count = std::int64_t(1) << 26;
  std::string to_string() const;
};

// Returns an error message for a shape that no step can run, or nothing if the shape is valid.
std::optional<std::string> validate(const AttentionShape& s);
std::optional<std::string> validate(const MatmulShape& s);
std::optional<std::string> validate(const ReductionShape& s);

// Useful floating-point operations. Attention counts the two matrix products, 4·B·H·N²·D; a causal
// problem counts half of that (the convention of the FlashAttention papers: the exact number of
// unmasked pairs is N(N+1)/2, a little more than half, and the softmax is not counted).
double flops(const AttentionShape& s);
double flops(const MatmulShape& s);   // 2·M·N·K
double flops(const ReductionShape& s);  // n − 1 additions
// The backward pass of an attention problem: its five matrix products (S = QKᵀ recomputed,
// dV = PᵀdO, dP = dO Vᵀ, dQ = dS K, dK = dSᵀQ) are 2.5× the forward's two, halved for causal,
// the FlashAttention papers' convention.
double backward_flops(const AttentionShape& s);

// The fewest bytes any implementation must move through device memory: each input read once,
// each output written once. Naive kernels move more; the ledger of step 00 shows how much more.
double min_bytes(const AttentionShape& s);
double min_bytes(const MatmulShape& s);
double min_bytes(const ReductionShape& s);
// Backward: Q, K, V, O, dO and the log-sum-exp read once, dQ, dK, dV written once.
double backward_min_bytes(const AttentionShape& s);

// A dimension for ragged tiles: how many blocks of `tile` cover `n`.
constexpr int ceil_div(int n, int tile) { return (n + tile - 1) / tile; }
constexpr std::int64_t ceil_div(std::int64_t n, std::int64_t tile) { return (n + tile - 1) / tile; }

}  // namespace ladder
