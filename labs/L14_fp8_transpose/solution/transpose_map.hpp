// Lab 14 — the FP8 V transpose. REFERENCE SOLUTION: try the starter (../transpose_map.hpp) first.
#pragma once

#include <cuda_runtime.h>  // __host__ __device__

#include <cstdint>

#include "labs/L14_fp8_transpose/lab14.hpp"

namespace lab14 {

// PRMT picks byte n of its result from byte (selector >> 4n) & 7 of the pair {y : x}: 0-3 are x's
// bytes, 4-7 y's. A loaded register holds, of its two keys k and k + 1, the bytes
// (V[k][d], V[k][d + 1], V[k + 1][d], V[k + 1][d + 1]): head dim d in bytes 0 and 2, d + 1 in 1 and 3.
inline constexpr std::uint32_t kHeadDimEven = 0x6420;  // x0 x2 y0 y2: keys 2t, 2t + 1, 8 + 2t, 9 + 2t of head dim d
inline constexpr std::uint32_t kHeadDimOdd = 0x7531;   // x1 x3 y1 y3: the same four keys of head dim d + 1

// Matrix i's eight rows are eight consecutive keys at the unit's head-dim chunk: 16h + 8·half,
// i = 2h + half, which is simply 8i. Lane (q, t) then gets keys 2t, 2t + 1 of matrix 2h
// (16h + 2t, 16h + 2t + 1) and of matrix 2h + 1 (16h + 8 + 2t, 16h + 9 + 2t): the four keys of slots
// 16h + 4t .. 16h + 4t + 3 in P's order, which is why the rows are read in the natural order.
// Eight consecutive keys have eight different key % 8, so the swizzle puts their chunk c in
// eight different chunk positions: one wavefront a phase.
__host__ __device__ constexpr std::uint32_t load_offset(int unit, int lane) {
  const int key = kSliceKeys * unit_slice(unit) + kMatrixRows * matrix_of(lane) + row_of(lane);
  return swizzled_offset(key, kChunkBytes * unit_chunk(unit));
}

// Which of its two head dims, 16c + 2q or 16c + 2q + 1, lane group q puts in store register
// 2h + σ: σ itself for q < 4, the other one for q ≥ 4. Rows 16c + 2q + σ for all eight q would have
// row % 8 ∈ {0, 2, 4, 6} twice (or {1, 3, 5, 7}): two rows to a chunk position, a 2-way store. With
// the upper four groups flipped, a matrix's rows are 16c + {0, 2, 4, 6, 9, 11, 13, 15} (σ = 0) or
// 16c + {1, 3, 5, 7, 8, 10, 12, 14} (σ = 1): eight different row % 8. The flip costs nothing: it is
// only which selector those lanes use.
__host__ __device__ constexpr int head_dim_parity(int sigma, int q) { return sigma ^ (q >= 4 ? 1 : 0); }

// Row r of store matrix i = 2h + σ is register 2h + σ of lane group q = r: Vᵀ row 16c + 2r + the
// parity above, at slots 32kk + 16h .. 32kk + 16h + 15 (lane t's word is slots 16h + 4t .. + 3).
__host__ __device__ constexpr std::uint32_t store_offset(int unit, int lane) {
  const int i = matrix_of(lane), r = row_of(lane);
  const int row = 16 * unit_chunk(unit) + 2 * r + head_dim_parity(i % 2, r);
  return swizzled_offset(row, kSliceKeys * unit_slice(unit) + 16 * (i / 2));
}

// Store register 2h + σ of lane 4q + t = __byte_perm(R[2h], R[2h + 1], selector(σ, lane)): the
// head dim its row in the store matrix holds (store_offset, with r = q).
__host__ __device__ constexpr std::uint32_t selector(int sigma, int lane) {
  return head_dim_parity(sigma, group_of(lane)) ? kHeadDimOdd : kHeadDimEven;
}

}  // namespace lab14
