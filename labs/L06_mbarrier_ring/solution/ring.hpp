// Lab 06 — the K/V mbarrier ring. REFERENCE SOLUTION: try the starter (../ring.hpp) first.
//
// Block i is the i-th K/V block a CTA processes. It lives in stage i mod kStages and is that
// stage's lap k = i / kStages: the k-th fill of the stage, the k-th phase of full[s] and of
// empty[s]. Phase k has parity k & 1.
#pragma once

#include <cuda_runtime.h>  // __host__ __device__

#include <cstdint>

#include "labs/L06_mbarrier_ring/lab06.hpp"

namespace ring {

__host__ __device__ constexpr int stage(int i, int stages) { return i % stages; }

// Block i's bytes have landed when phase k = i / stages of full[s] has completed.
__host__ __device__ constexpr std::uint32_t full_parity(int i, int stages) {
  return std::uint32_t(i / stages) & 1;
}

// Before its k-th fill, the stage must have been released k times: phase k - 1 of empty[s]
// completed, parity (k - 1) & 1 = (k & 1) ^ 1. For k = 0 that is parity 1, the phase "before"
// phase 0, which a fresh barrier reports complete: the first lap does not wait.
__host__ __device__ constexpr std::uint32_t empty_parity(int i, int stages) {
  return (std::uint32_t(i / stages) & 1) ^ 1;
}

// Both whole boxes, ragged or not: the copy engine writes (and counts) the rows past the end of
// the tensor too, as zeros. Announcing only the rows inside the tensor completes the phase before
// the last bytes land.
__host__ __device__ constexpr std::uint32_t expect_bytes(int block_rows, int head_dim, int /*rows_in_tensor*/) {
  return 2u * std::uint32_t(block_rows) * std::uint32_t(head_dim) * lab06::kElementBytes;
}

// After O += P V and its wgmma.wait_group: only then have the tensor cores finished reading V
// (and K, long before). Releasing earlier lets the producer overwrite V under the P V product.
inline constexpr lab06::Release kRelease = lab06::Release::kAfterOutput;

}  // namespace ring
