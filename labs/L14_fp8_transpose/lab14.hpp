// Lab 14's given interface (do not edit): the tile, the two layouts the transpose connects, what
// a unit is, and the one launch the checker makes. Included by your transpose_map.hpp, by the
// kernel (transpose.cu), by the CPU model (model.hpp) and by the checker, so all four agree on
// them.
//
// Step 45's producer transposes every V block in shared memory (chapter 45): V arrives from TMA
// as [128 keys][D = 128] e4m3 bytes, and P·V's 8-bit wgmma wants its B operand K-major, Vᵀ
// [128 head dims][128 keys]. Both tiles are 128 rows of 128 bytes in the 128-byte swizzle, and
// inside every 32-key slice Vᵀ holds its keys in P's order (permuted_key below).
#pragma once

#include <cuda_runtime.h>  // __host__ __device__

#include <cstdint>
#include <string>
#include <vector>

namespace lab14 {

// ---- The tiles ----------------------------------------------------------------------------------
inline constexpr int kRowBytes = 128;                       // one swizzled row: 128 one-byte elements
inline constexpr int kRows = 128;                           // V: 128 keys; Vᵀ: 128 head dims
inline constexpr int kTileBytes = kRows * kRowBytes;        // 16384, one V block (or its Vᵀ)
inline constexpr int kChunkBytes = 16;                      // the swizzle moves 16-byte chunks
inline constexpr int kChunksPerRow = kRowBytes / kChunkBytes;  // 8
inline constexpr int kSwizzleRows = 8;                      // the pattern repeats every 8 rows (1024 bytes)

// Byte `byte` of row `row` in the 128-byte swizzle (lab L11): chunk byte / 16 of the row is stored
// at chunk position (byte / 16) ^ (row % 8); the byte keeps its place inside the chunk. V is
// stored so (TMA writes it), and Vᵀ must be (wgmma's descriptor reads it so). Both tiles start on
// a 1024-byte boundary, so the chunk position is also the row's group of four banks.
__host__ __device__ constexpr std::uint32_t swizzled_offset(int row, int byte) {
  const int chunk = (byte / kChunkBytes) ^ (row % kSwizzleRows);
  return std::uint32_t(row * kRowBytes + chunk * kChunkBytes + byte % kChunkBytes);
}

// ---- P's key order ------------------------------------------------------------------------------
// An 8-bit wgmma reduces over 32 elements a k step: one k32 slice of keys. Its A operand (P, from
// registers) gives quad lane t four consecutive slots a register, slots 16h + 4t .. 16h + 4t + 3,
// but S's accumulator gave that lane the key pairs 2t, 2t + 1 of every 8 keys. Step 45 packs the
// keys the lane has, 16h + 2t, 16h + 2t + 1, 16h + 8 + 2t, 16h + 9 + 2t, into those four slots,
// and Vᵀ must hold its keys in the same order. Slot `slot` (0 .. 31) of a slice holds this key of
// the slice.
inline constexpr int kSliceKeys = 32;
inline constexpr int kSlices = kRows / kSliceKeys;  // 4
__host__ __device__ constexpr int permuted_key(int slot) {
  const int h = slot / 16, t = (slot % 16) / 4, f = slot % 4;
  return 16 * h + 8 * (f / 2) + 2 * t + f % 2;
}
// What Vᵀ row d, slot `slot` must hold: V[vt_source_key(slot)][d].
__host__ __device__ constexpr int vt_source_key(int slot) {
  return kSliceKeys * (slot / kSliceKeys) + permuted_key(slot % kSliceKeys);
}

// ---- A unit of the transpose --------------------------------------------------------------------
// One warp moves one unit with one ldmatrix.x4.trans.b16, four __byte_perm (PRMT) and one
// stmatrix.x4.b16: head-dim chunk c (head dims 16c .. 16c + 15) of slice kk (keys 32kk ..
// 32kk + 31), 512 bytes. 32 units make a tile.
inline constexpr int kUnits = kChunksPerRow * kSlices;  // 32
__host__ __device__ constexpr int unit_chunk(int unit) { return unit % kChunksPerRow; }
__host__ __device__ constexpr int unit_slice(int unit) { return unit / kChunksPerRow; }

// ---- The two instructions' lanes ----------------------------------------------------------------
// Both instructions move four 8 × 8 matrices of 16-bit elements (8 rows of 16 bytes each).
//   * Addresses: lane 8i + r gives the shared-memory address of row r of matrix i.
//   * Data: lane 4q + t holds, in its register i, 16-bit elements of matrix i:
//       ldmatrix.x4.trans: element q of rows 2t and 2t + 1 (low half: row 2t);
//       stmatrix.x4:       elements 2t and 2t + 1 of row q (low half: element 2t).
// So a lane's two roles use two different splits of the lane number: 8i + r for the row it
// names, 4q + t for the data it holds.
inline constexpr int kLanes = 32;
inline constexpr int kMatrices = 4;
inline constexpr int kMatrixRows = 8;
__host__ __device__ constexpr int matrix_of(int lane) { return lane / kMatrixRows; }  // i
__host__ __device__ constexpr int row_of(int lane) { return lane % kMatrixRows; }     // r
__host__ __device__ constexpr int group_of(int lane) { return lane / 4; }             // q
__host__ __device__ constexpr int quad_lane(int lane) { return lane % 4; }            // t

// ---- The GPU run --------------------------------------------------------------------------------
// `v` holds whole V blocks, each [128 keys][128 head dims] row-major (not swizzled). One CTA a
// block stages it into shared memory in the swizzle, runs the 32 units through your map (real
// ldmatrix.x4.trans, __byte_perm, stmatrix.x4), and writes Vᵀ back row-major, [128 head dims]
// [128 slots], into `vt`. Shared Vᵀ is filled with kPoison first, so a byte no store reached comes
// back as kPoison. `refused_units` counts the units a warp did not run because some lane's offset
// was outside its tile or not 16-byte aligned (the instructions would fault). Returns "" or what
// went wrong with CUDA.
inline constexpr std::uint8_t kPoison = 0xFF;  // e4m3 NaN, as is 0x7F: the checker's V holds neither
std::string run_tiles(const std::vector<std::uint8_t>& v, std::vector<std::uint8_t>& vt, int& refused_units);

}  // namespace lab14
