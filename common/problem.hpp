// The three problems the ladder solves, their validation, and their operation and byte counts.
//
// This header has no CUDA in it: the CPU tests and `ladder --list` use it without a GPU.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/dtype.hpp"

namespace ladder {

// Backward: the gradients dQ, dK, dV of an attention problem (Part V); its shape is an AttentionShape.
enum class Kind { Attention, Matmul, Reduction, Backward };
const char* kind_name(Kind kind);

// O = softmax(Q Kᵀ · scale [+ causal mask]) V for every (batch, head).
// Q, K, V and O are fp16 (or bf16, for the variants that declare it: common/dtype.hpp), laid out
// [B, H, N, D] contiguous (PyTorch's SDPA layout); accumulation is fp32. fp8 (Part VIII, E4M3):
// Q, K, V one byte an element, each tensor with its power-of-two descale (common/dtype.hpp's
// quantization), O bf16; dense and GQA shapes only, causal or not (validate says why). The log-sum-exp of each row (natural log, of the scaled logits) is [B, H, N]
// fp32 and is written only by the variants that say so.
//
// Part VI: attention as models run it. Four optional properties, each off by default, so every
// shape of Parts I-V is the dense problem it always was:
//   kv_heads   GQA/MQA: Hkv K/V heads, dividing H; Q head h reads K/V head h / (H / Hkv).
//   kv_seqlen  keys per sequence when it differs from the queries' (decode: 1-16 queries against
//              a long cache). Causal is aligned to the end, as FlashAttention does: query i of
//              Nq sits at position Nk - Nq + i and sees keys j <= Nk - Nq + i.
//   q_lens     a packed variable-length batch (cu_seqlens): one query length per sequence, the
//              batch is its size; kv_lens the key lengths (empty: the same as q_lens).
//   page_size  a paged K/V cache: K and V live in pages of page_size rows found by a block table.
// The layouts (what a kernel receives; docs/part6_serving.md says why these):
//   dense   Q, O [B, H, Nq, D];  K, V [B, Hkv, Nk, D];  LSE [B, H, Nq]   (SDPA's, with enable_gqa)
//   varlen  Q, O [total_q, H, D]; K, V [total_k, Hkv, D]; LSE [H, total_q] (FlashAttention's)
//   paged   K, V are a pool of pages [num_pages, Hkv, page_size, D]: key j of sequence b is row
//           j % page_size of page block_table[b · pages_per_seq + j / page_size], so one page of
//           one head is one contiguous page_size·D block (a single bulk copy). Q, O as above.
struct AttentionShape {
  int batch = 4;
  int heads = 8;
  int seqlen = 4096;   // queries per sequence (varlen: the longest)
  int head_dim = 64;
  bool causal = false;
  DType dtype = DType::F16;
  int kv_heads = 0;    // 0: as many as heads
  int kv_seqlen = 0;   // 0: seqlen (varlen: ignored, kv_lens rules)
  std::vector<int> q_lens;   // varlen: empty = dense
  std::vector<int> kv_lens;  // varlen: empty = q_lens
  int page_size = 0;   // 0: contiguous K/V
  // Part VIII, fp8 only: one descale per (batch, head) of each of Q, K and V (FlashAttention-3's
  // descales of shape (batch, heads)) instead of one a tensor; K and V have one per (batch, K/V
  // head). A dense fp8 problem's (b, h) head is one contiguous block of [B, H, N, D], so each head
  // is quantized on its own (common/dtype.hpp's groups). Variants declare Feature::HeadScales.
  bool head_scales = false;

  // The properties, resolved.
  int hkv() const { return kv_heads > 0 ? kv_heads : heads; }
  int group() const { return heads / hkv(); }  // Q heads per K/V head
  bool varlen() const { return !q_lens.empty(); }
  bool paged() const { return page_size > 0; }
  bool gqa() const { return hkv() != heads; }
  // Some sequence has a different number of keys than queries (decode, chunked prefill).
  bool decode() const;
  int q_len(int b) const { return varlen() ? q_lens[std::size_t(b)] : seqlen; }
  int kv_len(int b) const;
  int max_kv_len() const;
  // Where sequence b starts in the packed varlen layout (rows of queries / keys); cu_seqlens.
  std::vector<int> cu_seqlens_q() const;
  std::vector<int> cu_seqlens_k() const;
  std::int64_t total_q() const;  // Σ q_len
  std::int64_t total_k() const;  // Σ kv_len
  // Paged: pages each sequence's block table row holds, and the pool's pages (each sequence owns
  // ceil(kv_len / page_size) of them).
  int pages_per_seq() const;
  std::int64_t num_pages() const;

  std::int64_t rows() const { return total_q() * heads; }  // query rows: of O and the LSE
  std::int64_t elements() const { return rows() * head_dim; }  // of one of Q, O
  std::int64_t kv_rows() const { return total_k() * hkv(); }
  std::int64_t kv_elements() const;  // of one of K, V as stored (paged: the whole pool)
  // Offsets, in elements, of query row (b, h, i) in Q and O and of key row (b, hk, j) in K and V
  // (paged: in the logical, contiguous K/V the block table maps), and of (b, h, i) in the LSE.
  std::int64_t q_offset(int b, int h, int i) const;
  std::int64_t kv_offset(int b, int hk, int j) const;
  std::int64_t lse_index(int b, int h, int i) const;
  // The last key query i of sequence b may see (causal: aligned to the end), or kv_len(b) - 1.
  int last_key(int b, int i) const;

  float softmax_scale() const;                                  // 1 / sqrt(D)
  // "B=4 H=8 N=4096 D=64 causal", " bf16" or " fp8" appended for those; then " Hkv=8", " Nkv=32768",
  // " varlen(4 seqs, 10 812 q)", " page=64", " fp8 per-head scales" for the properties that are on.
  std::string to_string() const;
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
// An fp8 shape must be dense self-attention (no varlen batch, paged cache or decode: no FP8
// variant serves them) with D a multiple of 16 (16-byte rows of 1-byte elements). head_scales is
// fp8's alone: a 16-bit problem has no descales to give per head.
std::optional<std::string> validate(const AttentionShape& s);
std::optional<std::string> validate(const MatmulShape& s);
std::optional<std::string> validate(const ReductionShape& s);
// A backward problem (Part V, and Part VI's GQA and varlen): a valid attention shape that is
// self-attention, every sequence as many keys as queries, with a contiguous K/V. Decode shapes
// (kv_seqlen or kv_lens differing from the queries') and paged caches are refused with the reason,
// and so is fp8 (forward-only in this course).
std::optional<std::string> validate_backward(const AttentionShape& s);

// Useful floating-point operations. Attention counts the two matrix products, 4·B·H·N²·D; a causal
// problem counts half of that (the convention of the FlashAttention papers: the exact number of
// unmasked pairs is N(N+1)/2, a little more than half, and the softmax is not counted).
//
// Part VI's shapes count the same products over the pairs that exist: Σ_b 4·H·Nq_b·Nk_b·D, and a
// causal sequence whose queries and keys are the same tokens (Nq_b = Nk_b) counts half, as above;
// one with fewer queries than keys (decode) counts its unmasked pairs exactly, since "half" of a
// 1-query row against a 128k cache would be meaningless.
double flops(const AttentionShape& s);
double flops(const MatmulShape& s);   // 2·M·N·K
double flops(const ReductionShape& s);  // n − 1 additions
// The backward pass of an attention problem: its five matrix products (S = QKᵀ recomputed,
// dV = PᵀdO, dP = dO Vᵀ, dQ = dS K, dK = dSᵀQ) are 2.5× the forward's two, halved for causal,
// the FlashAttention papers' convention.
double backward_flops(const AttentionShape& s);

// The fewest bytes any implementation must move through device memory: each input read once,
// each output written once. Naive kernels move more; the ledger of step 00 shows how much more.
// Attention: Q, K, V read and O written once (GQA: K and V have Hkv heads; paged: the pages in
// use), the block table and cu_seqlens not counted. Decode is bound by these bytes, not by FLOPs.
// Q, K, V at element_bytes(dtype) (fp8: 1), O at its output type's (fp8: bf16, 2).
double min_bytes(const AttentionShape& s);
double min_bytes(const MatmulShape& s);
double min_bytes(const ReductionShape& s);
// Backward: Q, K, V, O, dO and the log-sum-exp read once, dQ, dK, dV written once (GQA: K, V,
// dK, dV with Hkv heads).
double backward_min_bytes(const AttentionShape& s);

// A dimension for ragged tiles: how many blocks of `tile` cover `n`.
constexpr int ceil_div(int n, int tile) { return (n + tile - 1) / tile; }
constexpr std::int64_t ceil_div(std::int64_t n, std::int64_t tile) { return (n + tile - 1) / tile; }

}  // namespace ladder
