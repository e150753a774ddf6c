// Lab 10 — the bank conflicts of a staging layout. YOUR FILE: where element (row, col) of the two
// staging buffers of step 07's kernel lives in shared memory. Fill in the TODOs, then
//   labs/check.sh L10
// The checker first runs your layout through a model of every shared-memory instruction that
// touches the buffers (32 lanes' addresses each, no GPU needed) and counts the wavefronts, then
// runs the kernel (staging.cu, given) with your layout against fp64, and times it against the
// naive layout. (README.md has the puzzle; solution/ has an answer, for after you tried.)
//
// The rules (the model checks each):
//   * a layout is a one-to-one map of the kRows × kCols elements into [0, size), size at most
//     kMaxSFloats / kMaxPHalves elements (lab10.hpp);
//   * S is written 2 floats at a time (st.shared.v2.f32): s_index(row, col + 1) must be
//     s_index(row, col) + 1 for every even col, and s_index(row, col) even (8-byte aligned);
//   * P is read 8 halves at a time (ldmatrix): p_index(row, 8c + i) must be p_index(row, 8c) + i,
//     and p_index(row, 8c) a multiple of 8 (16-byte aligned);
//   * every one of the four instructions (lab10.hpp) conflict-free: no bank serves two different
//     4-byte words in one wavefront's worth of lanes.
// The buffers start 128-byte aligned, so bank = (byte offset / 4) mod 32.
#pragma once

#include <cuda_runtime.h>  // __host__ __device__

#include "labs/L10_staging_layout/lab10.hpp"

namespace layout {

// TODO 1: S, fp32: its size in floats, and the float offset of S[row][col] (0 <= row < 32,
// 0 <= col < 64). As given: dense row-major, 256-byte rows.
inline constexpr int kSFloats = lab10::kRows * lab10::kCols;
__host__ __device__ constexpr int s_index(int row, int col) {
  return row * lab10::kCols + col;  // TODO
}

// TODO 2: P, fp16: its size in halves, and the half offset of P[row][col]. As given: dense
// row-major, 128-byte rows.
inline constexpr int kPHalves = lab10::kRows * lab10::kCols;
__host__ __device__ constexpr int p_index(int row, int col) {
  return row * lab10::kCols + col;  // TODO
}

}  // namespace layout
