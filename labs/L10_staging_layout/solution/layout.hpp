// Lab 10 — one answer (look after you tried): XOR swizzles, no extra memory.
// (The padded layout of chapter 07's v5, rows of 72 elements, passes too; README.md says why.)
#pragma once

#include <cuda_runtime.h>  // __host__ __device__

#include "labs/L10_staging_layout/lab10.hpp"

namespace layout {

// S: a half-warp's 8-byte stores cover 4 consecutive rows × 32 bytes (8 banks) at the same
// column; a 64-float row is two full turns of the 32 banks, so the 4 rows land on the same 8.
// Swap the 32-byte chunks of row r by XOR with r % 4: the 4 rows' chunks then fall in 4
// different quarters of the banks. A row's read (32 consecutive floats) stays a permutation of
// 32 consecutive floats, and a pair (col, col + 1) never leaves its chunk.
inline constexpr int kSFloats = lab10::kRows * lab10::kCols;
__host__ __device__ constexpr int s_index(int row, int col) {
  return row * lab10::kCols + (col ^ ((row & 3) << 3));
}

// P: an ldmatrix phase reads the same 16-byte column chunk of 8 consecutive rows; a 128-byte row
// is one turn of the banks, so all 8 rows hit the same 4 banks. XOR the chunk index with r % 8:
// the 8 rows' chunks become 8 different chunks. The softmax's 2-byte stores of one row still
// cover 64 contiguous bytes' worth of distinct chunks.
inline constexpr int kPHalves = lab10::kRows * lab10::kCols;
__host__ __device__ constexpr int p_index(int row, int col) {
  return row * lab10::kCols + (col ^ ((row & 7) << 3));
}

}  // namespace layout
