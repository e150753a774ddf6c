// The shared memory of a Part IV forward kernel, as one struct.
//
// Steps 16-19 lay their tiles out by hand (a base pointer plus offsets) to show the bytes. From
// step 20 on the layout is this struct: every tile alignas(kSwizzleAlign), so the compiler places
// them and the 128-byte swizzle's 1024-byte rule (smem.cuh) holds by construction; a kernel
// requests smem_bytes_for<Storage> and reaches it through aligned_smem<Storage>.
//
//   q         the CTA's kBlockM query rows, [D/64][kBlockM][64] in the 128-byte swizzle; after a
//             warpgroup's last S = Q·Kᵀ of a tile it is also where that warpgroup stages its rows
//             of O for the TMA store (each warpgroup touches only its own 64 rows)
//   k, v      the K/V ring: kStages blocks of kBlockN keys each, [D/64][kBlockN][64]
//   barriers  the ring's full/empty pairs and Q's (pipeline.cuh says who arrives on each)
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/device/hopper/smem.cuh"

namespace ladder::hopper {

template <class Element_, int kHeadDim_, int kBlockM_, int kBlockN_, int kStages_>
struct AttentionStorage {
  using Element = Element_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kBlockM = kBlockM_;
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kStages = kStages_;
  static constexpr std::uint32_t kQBytes = kBlockM * kHeadDim * sizeof(Element);
  static constexpr std::uint32_t kKVBytes = kBlockN * kHeadDim * sizeof(Element);  // one of K or V
  // Every tile is a whole number of swizzle atoms, so the alignment adds no padding between them.
  static_assert(kHeadDim % 64 == 0 && kQBytes % kSwizzleAlign == 0 && kKVBytes % kSwizzleAlign == 0);

  alignas(kSwizzleAlign) Element q[kBlockM * kHeadDim];
  alignas(kSwizzleAlign) Element k[kStages][kBlockN * kHeadDim];
  alignas(kSwizzleAlign) Element v[kStages][kBlockN * kHeadDim];
  std::uint64_t q_full;             // Q has landed (one arrival with the copy's bytes)
  std::uint64_t q_empty;            // every consumer warpgroup is done with the Q buffer
  std::uint64_t kv_full[kStages];   // stage s's K and V have landed
  std::uint64_t kv_empty[kStages];  // every consumer warp is done with stage s
};

}  // namespace ladder::hopper
