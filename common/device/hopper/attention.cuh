// The attention arithmetic on wgmma fragments, shared by every Part IV step: the element mask, the
// online softmax, P as the A operand of P·V, and the final normalisation and store. It is step
// 06's code (FlashAttention-2's), re-indexed for a warpgroup's 64 × N accumulator
// (wgmma.cuh): a thread holds rows r and r + 8, and for each n8 column tile j the pairs
// s[4j + 0..1] (row r) and s[4j + 2..3] (row r + 8) at columns 8j + 2t, 8j + 2t + 1.
// Everything here is per thread plus quad shuffles; nothing depends on the instruction that
// produced the fragment, which is why Part IV's steps can change everything else.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>

#include "common/device/mma_fragments.cuh"
#include "common/exp2_poly.hpp"
#include "common/lazy_rescale.hpp"
#include "common/device/hopper/wgmma.cuh"
#include "common/device/ptx.cuh"

namespace ladder::hopper {

// Keys at or past `key_end` of each row become −inf: the ragged end (key >= n) and, causal, the
// keys after the row's own position. Called only on blocks that can need it.
template <int kBlockN, bool kCausal>
__device__ __forceinline__ void mask_scores(float (&s)[kBlockN / 2], int row0, int kv_start, int n,
                                            int t) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = row0 + 8 * h;
    const int key_end = kCausal ? min(n, row + 1) : n;
    const int visible = key_end - kv_start - 2 * t;  // columns 8j + e of this thread are visible
#pragma unroll
    for (int j = 0; j < kBlockN / 8; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e)
        if (8 * j + e >= visible) s[4 * j + 2 * h + e] = -INFINITY;
  }
}

// Which exponentials go to the FMA pipes (step 32's split; Part VIII's step 46): with kPolyEvery =
// 0 none, all MUFU.EX2; otherwise the n8 column tiles j with j % kPolyEvery == kPolyEvery − 1 get
// the cubic of common/exp2_poly.hpp, interleaved so that both pipes have work along the whole row.
inline constexpr int kPolyNone = 0;
template <int kPolyEvery>
__device__ __forceinline__ float softmax_exp2(float x, int j) {
  if constexpr (kPolyEvery != kPolyNone)
    if (j % kPolyEvery == kPolyEvery - 1) return exp2_poly(x);
  return ptx::exp2_approx(x);
}

// Online softmax of one S block, in place: s becomes P = exp(s·scale − m_new) (unnormalised),
// the running max and sum advance, and `rescale` receives exp(m_old − m_new) per row for the
// caller to apply to O — separately, because from step 19 on O may still be in the tensor cores'
// hands when the softmax runs. A row with no visible key yet keeps m = −inf; it is computed
// against 0 so that exp2 sees −inf, not NaN (−inf − −inf).
//
// kPLog2Offset (Part VIII's FP8, fp8.cuh): P is computed as exp(s·scale − m_new) · 2^kPLog2Offset,
// and the row sum with it, so that P lands in e4m3's normal range; O / l is unchanged.
// kPolyEvery: which of P's exponentials the FMA pipes compute (softmax_exp2); the rescale's stay
// on MUFU.
template <int kBlockN, int kPLog2Offset = 0, int kPolyEvery = kPolyNone>
__device__ __forceinline__ void online_softmax(float (&s)[kBlockN / 2], float (&row_max)[2],
                                               float (&row_sum)[2], float scale_log2,
                                               float (&rescale)[2]) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float m = row_max[h];
#pragma unroll
    for (int j = 0; j < kBlockN / 8; ++j)
      m = fmaxf(m, fmaxf(s[4 * j + 2 * h], s[4 * j + 2 * h + 1]));
    m = frag::quad_max(m);
    const float m_scaled = (m == -INFINITY) ? 0.f : m * scale_log2;
    rescale[h] = ptx::exp2_approx(row_max[h] * scale_log2 - m_scaled);
    row_max[h] = m;
    float p_bias = m_scaled;  // exp2's argument is s·scale_log2 − p_bias
    if constexpr (kPLog2Offset != 0) p_bias -= float(kPLog2Offset);
    float sum = 0.f;
#pragma unroll
    for (int j = 0; j < kBlockN / 8; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float p = softmax_exp2<kPolyEvery>(fmaf(s[4 * j + 2 * h + e], scale_log2, -p_bias), j);
        s[4 * j + 2 * h + e] = p;
        sum += p;
      }
    row_sum[h] = row_sum[h] * rescale[h] + sum;  // per-thread partial; reduced over the quad at the end
  }
}

// The same with FlashAttention-4's conditional rescaling (common/lazy_rescale.hpp, chapter 32): a
// row's reference max moves only when the block's max exceeds it by more than 2^τ, and `moved`
// says whether it did; when it did not, rescale is exactly exp2(0) = 1 and the caller may skip O's
// rescale (warp-uniformly: chapter 32's vote). Exact arithmetic: O and l always share the
// reference, which cancels in O / l.
template <int kBlockN>
__device__ __forceinline__ void online_softmax_lazy(float (&s)[kBlockN / 2], float (&row_max)[2],
                                                    float (&row_sum)[2], float scale_log2,
                                                    float (&rescale)[2], bool (&moved)[2]) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float m = fmaxf(s[2 * h], s[2 * h + 1]);
#pragma unroll
    for (int j = 1; j < kBlockN / 8; ++j)
      m = fmaxf(m, fmaxf(s[4 * j + 2 * h], s[4 * j + 2 * h + 1]));
    m = frag::quad_max(m);  // the block's max, the same in the row's four threads
    moved[h] = must_raise_max(row_max[h], m, scale_log2);
    m = moved[h] ? m : row_max[h];
    const float m_scaled = (m == -INFINITY) ? 0.f : m * scale_log2;
    rescale[h] = ptx::exp2_approx(row_max[h] * scale_log2 - m_scaled);
    row_max[h] = m;
    float sum = 0.f;
#pragma unroll
    for (int j = 0; j < kBlockN / 8; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float p = ptx::exp2_approx(fmaf(s[4 * j + 2 * h + e], scale_log2, -m_scaled));
        s[4 * j + 2 * h + e] = p;
        sum += p;
      }
    row_sum[h] = row_sum[h] * rescale[h] + sum;
  }
}

template <int kHeadDim>
__device__ __forceinline__ void rescale_o(float (&o)[kHeadDim / 2], const float (&rescale)[2]) {
#pragma unroll
  for (int j = 0; j < kHeadDim / 8; ++j)
#pragma unroll
    for (int c = 0; c < 4; ++c) o[4 * j + c] *= rescale[c / 2];
}

// P (fp32 accumulator layout) -> A fragments of P·V in the element type (fp16 or bf16), one per
// k16 step of keys: the accumulator's n8 tiles 2kk and 2kk+1 are exactly the A fragment of k16
// step kk.
template <int kBlockN, class Element = __half>
__device__ __forceinline__ void p_to_a(const float (&s)[kBlockN / 2],
                                       std::uint32_t (&a)[kBlockN / 16][4]) {
#pragma unroll
  for (int kk = 0; kk < kBlockN / 16; ++kk)
#pragma unroll
    for (int r = 0; r < 4; ++r) a[kk][r] = pack2<Element>(s[8 * kk + 2 * r], s[8 * kk + 2 * r + 1]);
}

// Two floats stored as two elements of the output's type (4 bytes).
__device__ __forceinline__ void store2(__half* dst, float lo, float hi) {
  *reinterpret_cast<__half2*>(dst) = __floats2half2_rn(lo, hi);
}
__device__ __forceinline__ void store2(__nv_bfloat16* dst, float lo, float hi) {
  *reinterpret_cast<__nv_bfloat162*>(dst) = __floats2bfloat162_rn(lo, hi);
}

// The deferred normalisation: the quad's partial sums are added up, and O / l is written as fp16 (bf16)
// straight from the accumulator (4 bytes per lane; rows past N are not written). A row with
// l == 0 or NaN (impossible with at least one visible key, which every row has) would get 0.
template <int kHeadDim>
__device__ __forceinline__ void finalize_rows(float (&o)[kHeadDim / 2], const float (&row_sum)[2]) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float l = frag::quad_sum(row_sum[h]);
    const float inv = (l > 0.f) ? 1.f / l : 0.f;
#pragma unroll
    for (int j = 0; j < kHeadDim / 8; ++j) {
      o[4 * j + 2 * h] *= inv;
      o[4 * j + 2 * h + 1] *= inv;
    }
  }
}

// The log-sum-exp the backward recomputes P from (registry.hpp: the natural log of the row's sum
// of exp(S / sqrt(D))): ln l + m · scale, or, with the base-2 scale the softmax already holds,
// ln 2 · (log2 l + m · scale_log2). `lse_rows` is row 0 of the tile's head (and sequence) in the LSE
// tensor; one lane of each quad (the four hold the same l once it is summed) writes this thread's
// rows row0, row0 + 8 below n_rows. Call it before finalize_rows, on the per-thread sums. A row
// that saw no key (l == 0, impossible in self-attention) gets +inf, as step 06 writes: its P is 0.
__device__ __forceinline__ void store_lse(const float (&row_max)[2], const float (&row_sum)[2], float scale_log2,
                                          float* lse_rows, int row0, int n_rows, int t) {
  constexpr float kLn2 = 0.6931471805599453f;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float l = frag::quad_sum(row_sum[h]);
    const int row = row0 + 8 * h;
    if (t == 0 && row < n_rows)
      lse_rows[row] = (l > 0.f) ? kLn2 * fmaf(row_max[h], scale_log2, log2f(l)) : INFINITY;
  }
}

// `row_stride`: elements from one row to the next (Part VI's packed layout [tokens, H, D]: H·D).
template <int kHeadDim, class Element>
__device__ __forceinline__ void store_o_rows(const float (&o)[kHeadDim / 2], Element* o_head, int row0,
                                             int n, int t, std::int64_t row_stride = kHeadDim) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = row0 + 8 * h;
    if (row >= n) continue;
    Element* dst = o_head + std::int64_t(row) * row_stride + 2 * t;
#pragma unroll
    for (int j = 0; j < kHeadDim / 8; ++j) store2(dst + 8 * j, o[4 * j + 2 * h], o[4 * j + 2 * h + 1]);
  }
}

// The same rows written to shared memory instead, in the 128-byte swizzle of a [D/64][kTileRows]
// [64] tile (the layout a TMA store reads): row R, column 8j + 2t goes to column block j / 8,
// chunk (j % 8) ^ (R % 8). Conflict-free: a warp's 8 rows (g) hit 8 different chunks.
template <int kHeadDim, int kTileRows, class Element>
__device__ __forceinline__ void stage_o_rows(const float (&o)[kHeadDim / 2], Element* tile,
                                             int local_row0, int t) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = local_row0 + 8 * h;
#pragma unroll
    for (int j = 0; j < kHeadDim / 8; ++j) {
      Element* dst = tile + (j / 8) * kTileRows * 64 + row * 64 + (((j % 8) ^ (row % 8)) * 8) + 2 * t;
      store2(dst, o[4 * j + 2 * h], o[4 * j + 2 * h + 1]);
    }
  }
}

}  // namespace ladder::hopper
