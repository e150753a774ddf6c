// Lab 11 — the wgmma shared-memory descriptor with the 128-byte swizzle. YOUR FILE: three answers
// that the given kernel (wgmma_tile.cu) uses to stage two 64×64 fp16 tiles in shared memory and
// to describe them to wgmma. Fill in the TODOs, then
//   labs/check.sh L11
// The checker first runs these functions through a CPU model of the layout and of the descriptor
// (no GPU needed), then, on an H100/H200, one chain of wgmma.m64n64k16 that reads the tiles
// through your descriptors, checked element by element against a CPU product.
// (README.md has the puzzle; solution/ has the answers, for after you tried.)
//
// The tile (lab11.hpp): 64 rows of 64 halves, K-major: row r holds K elements 0..63 of row r of
// the operand, 128 bytes, eight 16-byte chunks of 8 halves each. The tile starts on a 1024-byte
// boundary. Read common/device/hopper/wgmma.cuh (the descriptor's bit fields) and smem.cuh (why
// 1024) before you start.
#pragma once

#include <cuda_runtime.h>  // __host__ __device__

#include <cstdint>

#include "labs/L11_wgmma_descriptor/lab11.hpp"

namespace wgdesc {

// TODO 1: the byte offset, from the tile's start, of element (row, col) in the 128-byte swizzle
// layout: rows of 128 bytes one after the other, and inside a row the 16-byte chunk that holds
// `col` moved to another chunk position that depends on the row. Which chunk position, for
// which rows? (What goes wrong in an 8-row column read without it?)
// As given: the plain row-major offset, a starting point that is NOT the swizzle.
__host__ __device__ constexpr std::uint32_t swizzled_offset(int row, int col) {
  return std::uint32_t(row * lab11::kRowBytes + col * lab11::kElementBytes);  // TODO
}

// TODO 2: the 64-bit matrix descriptor of a K-major tile in this layout that starts at shared
// address `smem_addr` (1024-byte aligned): the start address, the leading byte offset (LBO), the
// stride byte offset (SBO), the base offset and the swizzle mode, each in its bit field, each in
// the unit the hardware counts in.
__host__ __device__ constexpr std::uint64_t make_desc([[maybe_unused]] std::uint32_t smem_addr) {
  return 0;  // TODO
}

// TODO 3: what the kernel adds to a tile's descriptor to go from one k16 step to the next
// (k step kk uses make_desc(tile) + kk * k_step_advance()). How many bytes along the row is one
// k16 step, and in which unit does the field you change count?
__host__ __device__ constexpr std::uint64_t k_step_advance() {
  return 0;  // TODO
}

}  // namespace wgdesc
