// Lab 07's given interface (do not edit): the kernel's fixed sizes and the one conversion every
// side needs. Included by your backward_ds.hpp, by the kernel (backward_kv.cu), by the fragment
// model (model.hpp) and by the checker, so all four agree on them.
#pragma once

#include <cuda_fp16.h>  // __float2half_rn and __half_as_ushort: host and device

#include <cstdint>

namespace lab07 {

inline constexpr int kStep = 57;          // the lab's number in the registry (50 + lab)
inline constexpr int kHeadDim = 64;       // D
inline constexpr int kKeysPerWarp = 16;   // rows of one warp's Sᵀ, Pᵀ, dPᵀ, dSᵀ: one m16 tile
inline constexpr int kWarps = 4;
inline constexpr int kBlockN = kKeysPerWarp * kWarps;  // keys per CTA (the outer loop's block)
inline constexpr int kBlockM = 64;        // queries per step of the inner loop
inline constexpr int kQueryTiles = kBlockM / 8;        // n8 tiles of one warp's Sᵀ (along queries)
inline constexpr int kQuerySteps = kBlockM / 16;       // k16 steps of dV += Pᵀ dO (along queries)
inline constexpr float kLog2e = 1.4426950408889634f;  // exp(x) = exp2(x · log2 e)

// Two fp32 values as one b32 register of two fp16, `lo` in the low half: the packing mma.sync's
// A and B operands use (round to nearest even, as the GPU's cvt.rn.f16x2.f32 does).
__host__ __device__ inline std::uint32_t pack_half2(float lo, float hi) {
  const std::uint32_t l = __half_as_ushort(__float2half_rn(lo));
  const std::uint32_t h = __half_as_ushort(__float2half_rn(hi));
  return l | (h << 16);
}

}  // namespace lab07
