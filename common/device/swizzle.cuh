// XOR swizzle of fp16 tiles in shared memory: conflict-free ldmatrix without padding.
//
// Shared memory has 32 banks of 4 bytes; a 128-byte line covers each bank once. Think of a line
// as 8 "bank groups" of 16 bytes. ldmatrix serves one 8×8 matrix per phase: 8 rows of 16 bytes,
// all at the same column of a row-major tile. With rows of 128 or 256 bytes (D = 64 or 128
// halves) those 8 pieces all sit in the same bank group: an 8-way conflict, 8 phases for one.
//
// Padding each row by 16 bytes (step 05) shifts row r by r bank groups and fixes it, at a cost
// of 16 bytes per row (12.5% at D = 64). The swizzle instead permutes the 16-byte chunks inside
// each row: logical chunk c of row r is stored at chunk c ^ (r % 8). The 8 rows r..r+7 (r a
// multiple of 8) that one ldmatrix phase reads at logical chunk c land in chunks
// c ^ 0, c ^ 1, ..., c ^ 7: eight different bank groups, no conflict, no wasted byte.
//
// Only the low three bits of the chunk index are touched, so a row must hold a multiple of 8
// chunks (D = 64, 128, ...) and a chunk never leaves its 128-byte line. Everything else follows:
//   * a 16-byte access (cp.async, uint4 load/store) at a chunk boundary stays one contiguous
//     16-byte piece, so writers and readers only need to agree on this one map;
//   * a warp writing whole rows (cp.async of 4 rows × 8 chunks) still touches each bank group
//     once per row: the permutation stays inside the row;
//   * 4-byte accesses inside a chunk (the C-fragment pairs of the epilogue) keep their offset
//     within the chunk.
#pragma once

#include <cuda_runtime.h>

namespace ladder::swizzle {

constexpr int kChunkHalves = 8;  // 16 bytes of fp16 (the shifts by 3 below)
constexpr int kPeriod = 8;       // rows after which the pattern repeats (8 bank groups)

// Column (in halves) where logical column `col` of a row with row % 8 == `row8` is stored.
// Written as (high chunk bits) + (low three chunk bits XOR row8) + (offset inside the chunk) so
// that, for a compile-time `col`, the first and last terms fold into an immediate offset.
// Shifts and masks rather than / and %: indices are never negative, and signed division would
// cost extra instructions to round toward zero.
__device__ __forceinline__ int xor_col(int col, int row8) {
  constexpr int kLowChunkMask = kPeriod - 1;
  const int chunk = col >> 3;  // col / kChunkHalves
  return ((chunk & ~kLowChunkMask) << 3) + (((chunk & kLowChunkMask) ^ row8) << 3) + (col & 7);
}

// Offset (in halves) of logical element (row, col) in a swizzled row-major tile whose rows are
// kRowHalves halves long.
template <int kRowHalves>
__device__ __forceinline__ int xor_offset(int row, int col) {
  static_assert(kRowHalves % (kChunkHalves * kPeriod) == 0,
                "the swizzle needs rows of a multiple of 8 chunks (64 halves)");
  return row * kRowHalves + xor_col(col, row & (kPeriod - 1));
}

}  // namespace ladder::swizzle
