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
// ---- The same products on descriptors built once (step 33 on) -------------------------------
// A descriptor is a function of the address only through its 14-bit field (address >> 4), so the
// descriptor of a k16 step, a column block or a ring stage is the base's plus a byte offset / 16.
// Building it from the address each time (desc_k_major above) costs ptxas about seven uniform
// instructions per wgmma (mask, shift, or, the constant high word, the address add); advancing a
// descriptor built once costs one. Shared memory ends below 2^18 bytes, so the field never
// overflows into the LBO bits: a 32-bit add on the low word is exact, and the high word (SBO and
// the swizzle mode) is never touched.
__device__ __forceinline__ std::uint64_t desc_advance(std::uint64_t desc, std::uint32_t bytes) {
  const std::uint32_t lo = static_cast<std::uint32_t>(desc) + (bytes >> 4);
  return (desc & 0xFFFFFFFF00000000ull) | lo;
}

// issue_qk on descriptors: q_desc = desc_k_major(the warpgroup's first Q row), k_desc the stage's
// K block; the k16 steps and column blocks are constant offsets from them.
template <int kHeadDim, int kQRows, class Element, int kSRegs>
__device__ __forceinline__ void issue_qk_desc(float (&s)[kSRegs], std::uint64_t q_desc,
                                              std::uint64_t k_desc) {
  constexpr int kBlockN = 2 * kSRegs;
  constexpr std::uint32_t kQColumnBlock = kQRows * kSwizzleRowBytes;
  constexpr std::uint32_t kKColumnBlock = kBlockN * kSwizzleRowBytes;
#pragma unroll
  for (int kk = 0; kk < kHeadDim / 16; ++kk) {
    const std::uint32_t col = (kk % 4) * 32;
    Wgmma<kBlockN, Element>::ss(s, desc_advance(q_desc, (kk / 4) * kQColumnBlock + col),
                                desc_advance(k_desc, (kk / 4) * kKColumnBlock + col), kk > 0);
  }
}

// issue_pv on descriptors: v_desc = desc_mn_major(the stage's V block, its column-block bytes).
template <int kBlockN, class Element, int kORegs>
__device__ __forceinline__ void issue_pv_desc(float (&o)[kORegs],
                                              const std::uint32_t (&p)[kBlockN / 16][4],
                                              std::uint64_t v_desc) {
#pragma unroll
  for (int kk = 0; kk < kBlockN / 16; ++kk)
    Wgmma<2 * kORegs, Element>::rs(o, p[kk], desc_advance(v_desc, kk * 16 * kSwizzleRowBytes));
}
#endif  // LADDER_SM90A

}  // namespace ladder::hopper
