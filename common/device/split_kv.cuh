// The combine of split-KV decoding (flash-decoding): the partial outputs of the key ranges of one
// query row, merged by their log-sum-exps. Steps 28 and 29 share it (common/split_kv.hpp has the
// split rule and the workspace's size).
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

// kHeadDim / 32 consecutive columns per lane: a warp reads one split's row as one 256- or
// 512-byte piece, and writes the output row in one piece.
template <class Element, int kHeadDim>
__global__ void __launch_bounds__(kCombineThreads)
    combine_splits(const float* __restrict__ o_partial, const float* __restrict__ lse2_partial,
                   Element* __restrict__ o, float* __restrict__ lse, std::int64_t rows, int splits) {
  constexpr int kPerLane = kHeadDim / 32;
  static_assert(kPerLane == 2 || kPerLane == 4, "D = 64 or 128");
  const int lane = threadIdx.x % 32;
  const std::int64_t row = std::int64_t(blockIdx.x) * kCombineWarps + threadIdx.x / 32;
  if (row >= rows) return;  // the whole warp
  const float* row_lse = lse2_partial + row * splits;

  float m = -INFINITY;
  for (int s = lane; s < splits; s += 32) m = fmaxf(m, row_lse[s]);
  m = warp_max(m);
  float z = 0.f;
  for (int s = lane; s < splits; s += 32)
    if (row_lse[s] != -INFINITY) z += exp2f(row_lse[s] - m);
  z = warp_sum(z);
  const float lse2 = z > 0.f ? m + log2f(z) : -INFINITY;

  float acc[kPerLane] = {};
  const float* row_o = o_partial + row * splits * kHeadDim + lane * kPerLane;
  for (int s = 0; s < splits; ++s) {
    const float ls = row_lse[s];  // the same address in every lane: one broadcast
    if (ls == -INFINITY) continue;
    const float w = exp2f(ls - lse2);
    if constexpr (kPerLane == 4) {
      const float4 x = *reinterpret_cast<const float4*>(row_o + std::int64_t(s) * kHeadDim);
      acc[0] += w * x.x, acc[1] += w * x.y, acc[2] += w * x.z, acc[3] += w * x.w;
    } else {
      const float2 x = *reinterpret_cast<const float2*>(row_o + std::int64_t(s) * kHeadDim);
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

}  // namespace ladder::split_kv
