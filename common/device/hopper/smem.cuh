// Shared-memory layout rules every Part IV kernel obeys.
//
// A 128-byte-swizzled tile (what TMA writes and wgmma reads, wgmma.cuh) repeats its swizzle
// pattern every 8 rows of 128 bytes: the "swizzle atom" of 1024 bytes. The hardware computes the
// swizzle from address bits 4-9, so every tile must start on a 1024-byte boundary, or TMA and
// wgmma disagree about where a chunk lives. Dynamic shared memory is only guaranteed 16-byte
// alignment, so a kernel asks for kSwizzleAlign bytes more than its storage and rounds the base up.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ladder::hopper {

inline constexpr std::size_t kSwizzleAlign = 1024;  // bytes: one 8 x 128-byte swizzle atom

// Bytes of dynamic shared memory to request for a `Storage` (a struct of alignas(kSwizzleAlign)
// tiles and barriers): the struct plus the worst-case rounding of the base.
template <class Storage>
inline constexpr std::size_t smem_bytes_for = sizeof(Storage) + kSwizzleAlign;

// The dynamic shared memory base rounded up to the swizzle atom, as a `Storage`.
template <class Storage>
__device__ __forceinline__ Storage& aligned_smem(unsigned char* raw) {
  const auto base = (reinterpret_cast<std::uintptr_t>(raw) + kSwizzleAlign - 1) &
                    ~std::uintptr_t(kSwizzleAlign - 1);
  return *reinterpret_cast<Storage*>(base);
}

// The same rounding as an offset added to `raw` itself (step 36 on). aligned_smem's integer round
// trip hides from the compiler that the result points into shared memory, so every load and
// store through the Storage is generic (LD/ST: an address-space test on every access, a long
// scoreboard on every load). An offset from the extern __shared__ array keeps its provenance:
// the accesses compile to LDS/STS.
template <class Storage>
__device__ __forceinline__ Storage& aligned_smem_shared(unsigned char* raw) {
  const auto pad = (kSwizzleAlign - (reinterpret_cast<std::uintptr_t>(raw) & (kSwizzleAlign - 1))) &
                   (kSwizzleAlign - 1);
  return *reinterpret_cast<Storage*>(raw + pad);
}

// The same rounding for a kernel that lays its tiles out by hand (steps 16-19 do, to show the
// bytes; from step 20 on an AttentionStorage struct does it, shared_storage.cuh).
template <class Element>
__device__ __forceinline__ Element* aligned_smem_base(unsigned char* raw) {
  return reinterpret_cast<Element*>((reinterpret_cast<std::uintptr_t>(raw) + kSwizzleAlign - 1) &
                                    ~std::uintptr_t(kSwizzleAlign - 1));
}

}  // namespace ladder::hopper
