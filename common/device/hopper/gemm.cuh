// The two products of an attention block on a warpgroup, issued and not waited for: the caller
// fences, commits and waits (wgmma.cuh's protocol), because where it waits is the schedule.
//
//   issue_qk  S (64 × kBlockN)  = Q (64 × D) · Kᵀ, SS form: both operands K-major in shared
//             memory, reduced over the head dimension in k16 steps
//   issue_pv  O (64 × D)       += P (64 × kBlockN) · V, RS form: P from registers (p_to_a,
//             attention.cuh), V MN-major in shared memory, reduced over the keys
//
// Operands are shared-memory byte addresses of 128-byte-swizzled tiles [D/64][rows][64]: q_addr
// is the warpgroup's first row of its Q tile of kQRows rows (so it steps by kQRows rows from one
// 64-column block to the next), k_addr and v_addr a ring stage's block.
#pragma once

#include <cstdint>

#include "common/device/hopper/arch.cuh"
#include "common/device/hopper/wgmma.cuh"

namespace ladder::hopper {

inline constexpr std::uint32_t kSwizzleRowBytes = 128;  // one row of a 64-column block (16-bit)

#if LADDER_SM90A
template <int kHeadDim, int kQRows, class Element, int kSRegs>
__device__ __forceinline__ void issue_qk(float (&s)[kSRegs], std::uint32_t q_addr,
                                         std::uint32_t k_addr) {
  constexpr int kBlockN = 2 * kSRegs;
  constexpr std::uint32_t kQColumnBlock = kQRows * kSwizzleRowBytes;
  constexpr std::uint32_t kKColumnBlock = kBlockN * kSwizzleRowBytes;
#pragma unroll
  for (int kk = 0; kk < kHeadDim / 16; ++kk) {
    const std::uint32_t col = (kk % 4) * 32;  // bytes into the 128-byte row
    Wgmma<kBlockN, Element>::ss(s, desc_k_major(q_addr + (kk / 4) * kQColumnBlock + col),
                                desc_k_major(k_addr + (kk / 4) * kKColumnBlock + col), kk > 0);
  }
}

template <int kBlockN, class Element, int kORegs>
__device__ __forceinline__ void issue_pv(float (&o)[kORegs], const std::uint32_t (&p)[kBlockN / 16][4],
                                         std::uint32_t v_addr) {
  constexpr int kHeadDim = 2 * kORegs;
  constexpr std::uint32_t kVColumnBlock = kBlockN * kSwizzleRowBytes;
#pragma unroll
  for (int kk = 0; kk < kBlockN / 16; ++kk)
    Wgmma<kHeadDim, Element>::rs(o, p[kk], desc_mn_major(v_addr + kk * 16 * kSwizzleRowBytes, kVColumnBlock));
}
#endif  // LADDER_SM90A

}  // namespace ladder::hopper
