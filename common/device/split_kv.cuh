// The combine of split-KV decoding (flash-decoding): the partial outputs of the key ranges of one
// query row, merged by their log-sum-exps, across CTAs (combine_splits) and across the warps of
// one CTA (merge_warps_and_store). Steps 28, 29 and 41-44 share them (common/split_kv.hpp has the
// split rule and the workspace's size); 41 runs combine_row inside its own kernel, 42 merges a
// CTA's rows with the whole CTA (combine_rows_in_cta), and 44's warps store their own rows
// (store_warp_rows).
//
// Why the merge is exact. Split s saw the keys J_s of the row and wrote
//   O_s = Σ_{j∈J_s} e^{x_j} v_j / Z_s,   Z_s = Σ_{j∈J_s} e^{x_j},   LSE_s = log Z_s
// (x_j the scaled logits). The row's attention over all keys is Σ_j e^{x_j} v_j / Z with
// Z = Σ_s Z_s, and Σ_j e^{x_j} v_j = Σ_s Z_s O_s, so
//   O = Σ_s (Z_s / Z) O_s = Σ_s exp(LSE_s − LSE) O_s,   LSE = log Σ_s exp(LSE_s).
// No term is dropped or approximated: it is the online softmax's rescaling, applied once more,
// across CTAs instead of across tiles. What differs from one CTA's pass is rounding only: the
// partials stay fp32 (never rounded to the element type), and the weights are computed after
// subtracting the largest LSE_s, so nothing overflows. A split that saw no visible key (a causal
// end, a range past the keys) has LSE_s = −inf: weight 0, never exp(−inf − (−inf)).
//
// Layout of the partials (the workspace): o_partial [rows][splits][D] fp32, lse2_partial
// [rows][splits] fp32 in log2 units (the kernels' exp2 domain: LSE_s · log2 e), where `rows`
// counts the output's query rows in the order of O and the LSE ((b·H + h)·Nq + i, dense layout):
// the combine needs no shape, only rows, splits and D.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "common/device/mma_element.cuh"

namespace ladder::split_kv {

inline constexpr int kCombineWarps = 4;  // one warp per row, four rows per CTA
inline constexpr int kCombineThreads = kCombineWarps * 32;
inline constexpr float kLn2 = 0.69314718055994531f;

__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
  for (int d = 16; d > 0; d /= 2) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, d));
  return x;
}
__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int d = 16; d > 0; d /= 2) x += __shfl_xor_sync(0xffffffffu, x, d);
  return x;
}

// A row's total log2-LSE over its splits' (−inf where no split saw a key), one warp: the largest
// first, so that no exp2 overflows, and a split that saw nothing weighs 0. `load` reads one value.
template <class Load>
__device__ __forceinline__ float row_lse2(const float* row_lse, int splits, int lane, Load load) {
  float m = -INFINITY;
  for (int s = lane; s < splits; s += 32) m = fmaxf(m, load(row_lse + s));
  m = warp_max(m);
  float z = 0.f;
  for (int s = lane; s < splits; s += 32) {
    const float ls = load(row_lse + s);
    if (ls != -INFINITY) z += exp2f(ls - m);
  }
  z = warp_sum(z);
  return z > 0.f ? m + log2f(z) : -INFINITY;
}

// One query row's merge: kHeadDim / 32 consecutive columns per lane, so a warp reads one split's
// row as one 256- or 512-byte piece and writes the output row in one piece. The warp's lanes all
// take part (the shuffles); the splits are summed in order 0, 1, ..., whoever runs the merge, so
// the result does not depend on which CTA or kernel does it. kFromL2: read the partials past L1
// (ld.global.cg), for a merge inside the kernel that wrote them: other SMs' stores are in L2, and
// this SM's L1 is not kept coherent with them.
template <class Element, int kHeadDim, bool kFromL2 = false>
__device__ __forceinline__ void combine_row(const float* __restrict__ o_partial,
                                            const float* __restrict__ lse2_partial,
                                            Element* __restrict__ o, float* __restrict__ lse,
                                            std::int64_t row, int splits, int lane) {
  constexpr int kPerLane = kHeadDim / 32;
  static_assert(kPerLane == 2 || kPerLane == 4, "D = 64 or 128");
  auto load = [](const auto* p) {
    if constexpr (kFromL2) return __ldcg(p);
    else return *p;
  };
  const float* row_lse = lse2_partial + row * splits;
  const float lse2 = row_lse2(row_lse, splits, lane, load);

  float acc[kPerLane] = {};
  const float* row_o = o_partial + row * splits * kHeadDim + lane * kPerLane;
  for (int s = 0; s < splits; ++s) {
    const float ls = load(row_lse + s);  // the same address in every lane: one broadcast
    if (ls == -INFINITY) continue;
    const float w = exp2f(ls - lse2);
    if constexpr (kPerLane == 4) {
      const float4 x = load(reinterpret_cast<const float4*>(row_o + std::int64_t(s) * kHeadDim));
      acc[0] += w * x.x, acc[1] += w * x.y, acc[2] += w * x.z, acc[3] += w * x.w;
    } else {
      const float2 x = load(reinterpret_cast<const float2*>(row_o + std::int64_t(s) * kHeadDim));
      acc[0] += w * x.x, acc[1] += w * x.y;
    }
  }
  Element* dst = o + row * kHeadDim + lane * kPerLane;
  if constexpr (kPerLane == 4)
    *reinterpret_cast<uint2*>(dst) =
        make_uint2(ptx::pack2_as<Element>(acc[0], acc[1]), ptx::pack2_as<Element>(acc[2], acc[3]));
  else
    *reinterpret_cast<std::uint32_t*>(dst) = ptx::pack2_as<Element>(acc[0], acc[1]);
  if (lane == 0 && lse != nullptr) lse[row] = lse2 * kLn2;
}

// The second kernel of steps 28 and 29: one warp per row.
template <class Element, int kHeadDim>
__global__ void __launch_bounds__(kCombineThreads)
    combine_splits(const float* __restrict__ o_partial, const float* __restrict__ lse2_partial,
                   Element* __restrict__ o, float* __restrict__ lse, std::int64_t rows, int splits) {
  const std::int64_t row = std::int64_t(blockIdx.x) * kCombineWarps + threadIdx.x / 32;
  if (row >= rows) return;  // the whole warp
  combine_row<Element, kHeadDim>(o_partial, lse2_partial, o, lse, row, splits, threadIdx.x % 32);
}

// ---- The merge of a CTA's own rows by the whole CTA (step 42) ---------------------------------
// combine_row walks a row's splits as a chain: a split's LSE, then the partial row it weighs. One
// warp per row over many CTAs (combine_splits) hides that; the few CTAs that merge at the end of a
// fused decode (step 41) cannot. Here the CTA that merges its `rows` (16 at most in step 42, 64 in
// step 44; any count up to kThreads, whose thread `row` writes the row's LSE) loads every
// split's LSE of them at once (they are contiguous: rows × splits floats from row0 · splits on),
// computes the weights in shared memory, one warp per row, and then each thread takes a column
// quad of a row and sums the splits with kMergeInFlight independent float4 loads issued before the
// first is used. The arithmetic is combine_row's, in the same order (a split with LSE −inf has
// weight 0 and a zero partial, and adding 0 changes no sum but an exact zero's sign), so O is the
// same bits.
inline constexpr int kMergeInFlight = 8;  // float4 loads a thread has in flight (128 B)

// Shared memory combine_rows_in_cta needs: the weights of rows × splits and the rows' totals.
constexpr std::size_t cta_merge_smem_bytes(int rows, int splits) {
  return sizeof(float) * (std::size_t(rows) * splits + rows);
}

template <int kThreads, int kHeadDim, class Element>
__device__ __forceinline__ void combine_rows_in_cta(float* smem, const float* __restrict__ o_partial,
                                                    const float* __restrict__ lse2_partial,
                                                    Element* __restrict__ o, float* __restrict__ lse,
                                                    std::int64_t row0, int rows, int splits) {
  constexpr int kWarps = kThreads / 32, kQuads = kHeadDim / 4;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  float* const s_w = smem;                  // [rows][splits]: the LSEs, then the weights
  float* const s_lse2 = smem + rows * splits;  // [rows]
  const float* const lse_src = lse2_partial + row0 * splits;
  for (int i = tid; i < rows * splits; i += kThreads) s_w[i] = __ldcg(lse_src + i);
  __syncthreads();
  for (int r = warp; r < rows; r += kWarps) {  // combine_row's reductions, from shared memory
    float* const w = s_w + r * splits;
    const float lse2 = row_lse2(w, splits, lane, [](const float* p) { return *p; });
    __syncwarp();  // every lane has read w[] before any lane overwrites it
    for (int s = lane; s < splits; s += 32) w[s] = w[s] == -INFINITY ? 0.f : exp2f(w[s] - lse2);
    if (lane == 0) s_lse2[r] = lse2;
  }
  __syncthreads();
  for (int item = tid; item < rows * kQuads; item += kThreads) {
    const int r = item / kQuads, c = (item % kQuads) * 4;
    const float* const src = o_partial + (row0 + r) * splits * kHeadDim + c;
    const float* const w = s_w + r * splits;
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    int s = 0;
    for (; s + kMergeInFlight <= splits; s += kMergeInFlight) {
      float4 x[kMergeInFlight];
#pragma unroll
      for (int k = 0; k < kMergeInFlight; ++k)
        x[k] = __ldcg(reinterpret_cast<const float4*>(src + std::int64_t(s + k) * kHeadDim));
#pragma unroll
      for (int k = 0; k < kMergeInFlight; ++k) {
        const float wt = w[s + k];
        acc.x += wt * x[k].x, acc.y += wt * x[k].y, acc.z += wt * x[k].z, acc.w += wt * x[k].w;
      }
    }
    for (; s < splits; ++s) {
      const float4 x = __ldcg(reinterpret_cast<const float4*>(src + std::int64_t(s) * kHeadDim));
      const float wt = w[s];
      acc.x += wt * x.x, acc.y += wt * x.y, acc.z += wt * x.z, acc.w += wt * x.w;
    }
    *reinterpret_cast<uint2*>(o + (row0 + r) * kHeadDim + c) =
        make_uint2(ptx::pack2_as<Element>(acc.x, acc.y), ptx::pack2_as<Element>(acc.z, acc.w));
  }
  if (tid < rows && lse != nullptr) lse[row0 + tid] = s_lse2[tid] * kLn2;
}

// ---- The same merge inside a CTA: its warps' partial states, then one row store ----------------
// A decode CTA of kWarps warps, each with its own online softmax over its own key tiles, ends with
// per warp and row an unnormalized O (an m16 × D mma accumulator: rows g and g + 8 of each lane,
// columns 8·nd + 2t, + 1), the row max in log2 units and the row sum. The warps meet in shared
// memory (`smem`, merge_smem_bytes of it, free for reuse: the caller's barrier comes before), the
// per-row weights exp2(m_w − m) / l are computed once per row, and the CTA writes either the final
// row (one split: O in the element type, the LSE) or its split's partial (fp32 O, log2 LSE) in
// the combine's layout. O is staged with rows padded by 8 floats: a float2 store of 8 rows × 4
// lanes then covers the 32 banks twice, the least two wavefronts can.
template <int kWarps, int kHeadDim>
constexpr std::size_t merge_smem_bytes() {
  constexpr int kRows = 16, kStride = kHeadDim + 8;
  return sizeof(float) * (std::size_t(kWarps) * kRows * (kStride + 2) + kRows * (kWarps + 1));
}

template <class Element>
struct RowsOut {
  std::int64_t row0;  // the first of the CTA's rows, in the order of O and the LSE
  int rows;           // how many of its 16 exist
  int splits, split;
  Element* o;         // splits == 1: the output and the LSE (natural log; may be null)
  float* lse;
  float* o_partial;   // splits > 1: the combine's layout
  float* lse2_partial;
};

template <int kWarps, int kHeadDim, class Element>
__device__ __forceinline__ void merge_warps_and_store(unsigned char* smem,
                                                      const float (&acc_o)[kHeadDim / 8][4],
                                                      const float (&row_max)[2], const float (&row_sum)[2],
                                                      const RowsOut<Element>& out) {
  constexpr int kRows = 16, kStride = kHeadDim + 8, kThreads = kWarps * 32;
  const int tid = threadIdx.x, warp = tid / 32, g = (tid % 32) / 4, t = tid % 4;
  float* const s_o = reinterpret_cast<float*>(smem);   // [warp][kRows][kStride]
  float* const s_m = s_o + kWarps * kRows * kStride;   // [warp][kRows]
  float* const s_l = s_m + kWarps * kRows;             // [warp][kRows]
  float* const s_w = s_l + kWarps * kRows;             // [kRows][warp]
  float* const s_lse2 = s_w + kRows * kWarps;          // [kRows]
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = g + 8 * h;
    float l = row_sum[h];  // this lane's share: the quad's sum
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    if (t == 0) s_m[warp * kRows + r] = row_max[h], s_l[warp * kRows + r] = l;
#pragma unroll
    for (int nd = 0; nd < kHeadDim / 8; ++nd)
      *reinterpret_cast<float2*>(s_o + (warp * kRows + r) * kStride + nd * 8 + 2 * t) =
          make_float2(acc_o[nd][2 * h], acc_o[nd][2 * h + 1]);
  }
  __syncthreads();
  if (tid < kRows) {  // row tid: weights that also normalize (a warp that saw no key: 0)
    float m = -INFINITY, l = 0.f, scale[kWarps];
#pragma unroll
    for (int w = 0; w < kWarps; ++w) m = fmaxf(m, s_m[w * kRows + tid]);
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float mw = s_m[w * kRows + tid];
      scale[w] = mw == -INFINITY ? 0.f : exp2f(mw - m);
      l += scale[w] * s_l[w * kRows + tid];
    }
    const float inv = l > 0.f ? 1.f / l : 0.f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) s_w[tid * kWarps + w] = scale[w] * inv;
    s_lse2[tid] = l > 0.f ? m + log2f(l) : -INFINITY;
  }
  __syncthreads();
  constexpr int kQuads = kHeadDim / 4;  // four columns per thread per step: float4 reads
  for (int idx = tid; idx < out.rows * kQuads; idx += kThreads) {
    const int r = idx / kQuads, c = (idx % kQuads) * 4;
    float4 y = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float wt = s_w[r * kWarps + w];
      const float4 x = *reinterpret_cast<const float4*>(s_o + (w * kRows + r) * kStride + c);
      y.x += wt * x.x, y.y += wt * x.y, y.z += wt * x.z, y.w += wt * x.w;
    }
    const std::int64_t row = out.row0 + r;
    if (out.splits == 1)
      *reinterpret_cast<uint2*>(out.o + row * kHeadDim + c) =
          make_uint2(ptx::pack2_as<Element>(y.x, y.y), ptx::pack2_as<Element>(y.z, y.w));
    else
      *reinterpret_cast<float4*>(out.o_partial + (row * out.splits + out.split) * kHeadDim + c) = y;
  }
  if (tid < out.rows) {
    const std::int64_t row = out.row0 + tid;
    if (out.splits > 1) out.lse2_partial[row * out.splits + out.split] = s_lse2[tid];
    else if (out.lse != nullptr) out.lse[row] = s_lse2[tid] * kLn2;
  }
}

// ---- One warp's own rows, straight from its registers (step 44) ----------------------------------
// A decode CTA whose warps each own an m16 tile of rows and see every key of the split for them
// has nothing to merge inside the CTA: merge_warps_and_store's arithmetic for one warp (weight
// exp2(m − m) / l = 1 / l, LSE m + log2 l; a row that saw no key writes O = 0 and LSE −inf), from
// the mma accumulator (rows g and g + 8 of each lane, columns 8·nd + 2t, + 1) to the final row or
// the split's partial. `out` is the warp's tile: its first row and how many of its 16 exist (may
// be none). Every lane of the warp calls it (the quad's shuffles).
template <int kHeadDim, class Element>
__device__ __forceinline__ void store_warp_rows(const float (&acc_o)[kHeadDim / 8][4], const float (&row_max)[2],
                                                const float (&row_sum)[2], const RowsOut<Element>& out) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float l = row_sum[h];  // this lane's share: the quad's sum
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    const int r = g + 8 * h;
    if (r >= out.rows) continue;
    const float inv = l > 0.f ? 1.f / l : 0.f, lse2 = l > 0.f ? row_max[h] + log2f(l) : -INFINITY;
    const std::int64_t row = out.row0 + r;
#pragma unroll
    for (int nd = 0; nd < kHeadDim / 8; ++nd) {
      const float x0 = acc_o[nd][2 * h] * inv, x1 = acc_o[nd][2 * h + 1] * inv;
      const int c = nd * 8 + 2 * t;
      if (out.splits == 1)
        *reinterpret_cast<std::uint32_t*>(out.o + row * kHeadDim + c) = ptx::pack2_as<Element>(x0, x1);
      else
        *reinterpret_cast<float2*>(out.o_partial + (row * out.splits + out.split) * kHeadDim + c) =
            make_float2(x0, x1);
    }
    if (t == 0 && out.splits > 1) out.lse2_partial[row * out.splits + out.split] = lse2;
    if (t == 0 && out.splits == 1 && out.lse != nullptr) out.lse[row] = lse2 * kLn2;
  }
}

}  // namespace ladder::split_kv
