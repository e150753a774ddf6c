// Who holds what in an mma.m16n8k16 fragment, and which row address each lane hands to ldmatrix.
//
// The tensor-core steps (05, 06) keep every matrix of attention in these fragments, so the maps
// below are the whole contract between shared memory, ldmatrix, mma.sync and the softmax. They are
// the layouts of the PTX ISA ("Matrix Fragments for mma.m16n8k16", "ldmatrix"), written as code.
//
// Inside a warp, lane = 4·g + t: g = lane / 4 is the lane's "group" (a row), t = lane % 4 its place
// in the group (a pair of columns).
//
//   A (16×16, row-major)   a0 = A[g][2t, 2t+1]     a1 = A[g+8][2t, 2t+1]
//                          a2 = A[g][2t+8, 2t+9]   a3 = A[g+8][2t+8, 2t+9]
//   B (16×8, k × n)        b0 = B[2t, 2t+1][g]     b1 = B[2t+8, 2t+9][g]
//   C (16×8, fp32)         c0, c1 = C[g][2t, 2t+1] c2, c3 = C[g+8][2t, 2t+1]
//
// So a row of C is spread over the four lanes of one group (a "quad"): a row reduction is a
// reduction inside the lane's own registers and then across the quad (shuffle xor 1 and 2).
//
// ldmatrix.x4 loads four 8×8 b16 matrices; lanes 8i..8i+7 give the addresses of the 8 rows of
// matrix i (16 contiguous bytes each), and register i of every lane receives, from matrix i, the
// pair at row g, columns 2t and 2t+1 (with .trans: the pair at rows 2t, 2t+1, column g).
#pragma once

#include <cuda_runtime.h>

namespace ladder::frag {

constexpr unsigned kFullMask = 0xffffffffu;

__device__ __forceinline__ int group_of(int lane) { return lane >> 2; }        // g
__device__ __forceinline__ int thread_in_group(int lane) { return lane & 3; }  // t

// ---- A operand of a 16×16 row-major tile (also: a .trans B operand of a [k][n] tile) --------
// Matrices 0..3 must be (rows 0-7, cols 0-7), (rows 8-15, cols 0-7), (rows 0-7, cols 8-15),
// (rows 8-15, cols 8-15): then registers 0..3 are exactly a0..a3. Lane l addresses row
// l % 8 of matrix l / 8: row (l % 8) + 8·((l / 8) % 2), column 8·(l / 16).
//
// The same four addresses with ldmatrix.trans on a row-major [k][n] tile (V: keys × head dims)
// give the B operands of two adjacent n8 tiles: registers {0, 1} = (b0, b1) of columns n 0-7 and
// registers {2, 3} = (b0, b1) of columns n 8-15, because .trans hands lane l the pair at rows
// 2t, 2t+1 and column g of each matrix.
__device__ __forceinline__ int ldsm_a_row(int lane) { return (lane & 7) + ((lane >> 3) & 1) * 8; }
__device__ __forceinline__ int ldsm_a_col(int lane) { return (lane >> 4) * 8; }

// ---- B operands of two n8 tiles from a row-major [n][k] tile (K: keys × head dims) ---------
// B = Kᵀ, so B[k][n] = K[n][k] and b0 = K[n = g][k = 2t, 2t+1] is a contiguous pair of a K row:
// no transpose needed. Matrices 0..3 = (n 0-7, k 0-7), (n 0-7, k 8-15), (n 8-15, k 0-7),
// (n 8-15, k 8-15): registers {0, 1} = (b0, b1) of tile n 0-7, registers {2, 3} = tile n 8-15.
__device__ __forceinline__ int ldsm_b_row(int lane) { return (lane & 7) + (lane >> 4) * 8; }
__device__ __forceinline__ int ldsm_b_col(int lane) { return ((lane >> 3) & 1) * 8; }

// ---- Row reductions of a C fragment across its quad -----------------------------------------
// The four lanes 4g..4g+3 differ only in bits 0 and 1, so xor 1 and xor 2 visit all of them and
// every lane of the quad ends with the same value.
__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(kFullMask, x, 1));
  return fmaxf(x, __shfl_xor_sync(kFullMask, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(kFullMask, x, 1);
  return x + __shfl_xor_sync(kFullMask, x, 2);
}

}  // namespace ladder::frag
