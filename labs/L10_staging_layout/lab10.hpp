// Lab 10's given interface (do not edit): the shape of the two staging buffers, and WHERE each
// lane of each warp touches them, instruction by instruction. The kernel (staging.cu) and the CPU
// model (model.hpp) both read these functions, so the model counts the very addresses the kernel
// uses.
//
// Step 07's kernel (chapter 07): 128 threads = 4 warps, Br = 32 query rows, Bc = 64 keys a block.
//   S (fp32, 32 × 64) is written from the mma.sync accumulators of S = Q Kᵀ, where the 4 warps are
//     a 2 × 2 grid (warp w: rows 16·(w / 2) .. +15, keys 32·(w % 2) .. +31), and read back by rows
//     by the softmax (warp w: rows 8w .. 8w + 7, one row per step, lane l: columns l and l + 32);
//   P (fp16, 32 × 64) is written by the softmax the same way, and read by ldmatrix.x4 as the A
//     operand of O += P V (the same 2 × 2 grid: warp w reads rows 16·(w / 2) .. +15, all 64 keys,
//     one k16 slice per instruction).
// Your layout (layout.hpp) says where logical element (row, col) of each buffer lives.
#pragma once

#include <cuda_runtime.h>  // __host__ __device__

namespace lab10 {

inline constexpr int kRows = 32;        // Br
inline constexpr int kCols = 64;        // Bc
inline constexpr int kWarps = 4;
inline constexpr int kThreads = kWarps * 32;
// The most each buffer may take (in elements): the padded layout's, 32 rows of 72. A layout needs
// at least kRows × kCols elements, one for each.
inline constexpr int kMaxSFloats = kRows * (kCols + 8);
inline constexpr int kMaxPHalves = kRows * (kCols + 8);

struct Coord {
  int row, col;
};

// The mma.m16n8k16 accumulator: lane = 4·g + t holds (g, 2t), (g, 2t + 1), (g + 8, 2t), (g + 8, 2t + 1).
__host__ __device__ constexpr int group_of(int lane) { return lane >> 2; }
__host__ __device__ constexpr int thread_in_group(int lane) { return lane & 3; }

// ---- The four shared-memory instructions of a key block, per warp -----------------------------
// 1. The S store: st.shared.v2.f32, 8 bytes a lane (S[row][col], S[row][col + 1]); one instruction
//    for each of the warp's 4 n8 tiles j and each half h (rows g, rows g + 8): 8 per warp.
inline constexpr int kSStores = 8;
__host__ __device__ constexpr Coord s_store(int warp, int lane, int i) {
  const int j = i / 2, h = i % 2;
  return {16 * (warp / 2) + group_of(lane) + 8 * h, 32 * (warp % 2) + 8 * j + 2 * thread_in_group(lane)};
}
// 2. The S read: ld.shared.f32, 4 bytes a lane; row r of the warp's 8, column half c: 16 per warp.
inline constexpr int kSLoads = 16;
__host__ __device__ constexpr Coord s_load(int warp, int lane, int i) {
  const int r = i / 2, c = i % 2;
  return {8 * warp + r, lane + 32 * c};
}
// 3. The P store: st.shared.b16, 2 bytes a lane; the same lanes and elements as the S read.
inline constexpr int kPStores = 16;
__host__ __device__ constexpr Coord p_store(int warp, int lane, int i) { return s_load(warp, lane, i); }
// 4. The P read: ldmatrix.x4, 16 bytes a lane (8 halves: P[row][col .. col + 7]); lanes 8m .. 8m + 7
//    give the 8 row addresses of matrix m (rows 0-7 / 8-15 of the warp's 16, key columns 0-7 / 8-15
//    of the k16 slice); one instruction per k16 slice kk: 4 per warp.
inline constexpr int kPLdsm = 4;
__host__ __device__ constexpr Coord p_ldsm(int warp, int lane, int kk) {
  return {16 * (warp / 2) + (lane & 7) + ((lane >> 3) & 1) * 8, 16 * kk + (lane >> 4) * 8};
}

// The naive layout: dense, row-major. The checker times your layout against it.
struct NaiveLayout {
  static constexpr int kSFloats = kRows * kCols;
  static constexpr int kPHalves = kRows * kCols;
  __host__ __device__ static constexpr int s_index(int row, int col) { return row * kCols + col; }
  __host__ __device__ static constexpr int p_index(int row, int col) { return row * kCols + col; }
};

}  // namespace lab10
