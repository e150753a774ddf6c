// Lab 09's interface between your kernel file (overlap.cu) and the given driver (run.cu): the
// shapes, and the launch. Given; do not edit.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

namespace lab09 {

inline constexpr int kRows = 64;       // query rows: one warpgroup's S and O
inline constexpr int kHeadDim = 64;    // D
inline constexpr int kBlockN = 128;    // keys of the block
inline constexpr int kThreads = 128;   // one warpgroup

// One CTA, one warpgroup, the two products of one iteration of FlashAttention-3's loop:
//   o[64][64] = p · v              (p: 64 × 128, the previous block's probabilities, fp16)
//   l[64]     = Σ_j exp2(scale_log2 · (q · kᵀ)[row][j])   (the row sums of this block's scores)
// q: 64 × 64, k and v: 128 × 64, all row-major fp16; o and l fp32.
cudaError_t launch_overlap(const __half* q, const __half* k, const __half* v, const __half* p,
                           float scale_log2, float* o, float* l, cudaStream_t stream);

}  // namespace lab09
