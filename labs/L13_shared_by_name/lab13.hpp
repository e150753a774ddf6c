// Lab 13's interface between your kernel file (shared_by_name.cu) and the given driver (run.cu):
// the shapes, and the launch. Given; do not edit.
#pragma once

#include <cuda_runtime.h>

namespace lab13 {

inline constexpr int kKeys = 64;       // rows of the tile: 4 warps × 16 keys
inline constexpr int kQueries = 128;   // columns: one lse and one D per query
inline constexpr int kThreads = 128;   // four warps

// One CTA computes one tile of a FlashAttention backward's dSᵀ from the softmax statistics, as
// step 36's consumers do (hopper::p_from_lse, then dS = P ∘ (dP − D)):
//   p[k][q]  = exp2(s[k][q] · scale_log2 − lse[q] · log2(e))
//   ds[k][q] = p[k][q] · (dp[k][q] − delta[q])
//   *total   = Σ ds over the tile (per warp, then over the four warps)
// s, dp and ds: kKeys × kQueries, row-major fp32; lse and delta: kQueries fp32. `where`, two
// words, gets the shared-memory window offsets of the dynamic base and of the aligned Storage.
cudaError_t launch_ds_tile(const float* s, const float* dp, const float* lse, const float* delta, float scale_log2,
                           float* ds, float* total, unsigned* where, cudaStream_t stream);

}  // namespace lab13
