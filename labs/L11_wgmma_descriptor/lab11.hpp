// Lab 11's given interface (do not edit): the tile's fixed numbers and the one launch the checker
// makes. Included by your descriptor.hpp, by the kernel (wgmma_tile.cu), by the CPU model
// (model.hpp) and by the checker, so all four agree on them.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>
#include <string>
#include <vector>

namespace lab11 {

// One operand tile: kRows rows of kCols halves, K-major (the reduction dimension K runs along a
// row). One row is 128 bytes, exactly the width of the 128-byte swizzle; eight rows make the
// 1024-byte swizzle atom.
inline constexpr int kRows = 64;
inline constexpr int kCols = 64;
inline constexpr int kElementBytes = 2;                      // fp16
inline constexpr int kRowBytes = kCols * kElementBytes;      // 128
inline constexpr int kChunkBytes = 16;                       // the swizzle moves 16-byte chunks
inline constexpr int kChunksPerRow = kRowBytes / kChunkBytes;  // 8
inline constexpr int kAtomRows = 8;
inline constexpr int kAtomBytes = kAtomRows * kRowBytes;     // 1024
inline constexpr int kTileBytes = kRows * kRowBytes;         // 8192
inline constexpr int kK = 16;                                // wgmma's K for 16-bit inputs
inline constexpr int kKSteps = kCols / kK;                   // 4 instructions in the chain

// The checker's one GPU run: A [64][64] and B [64][64] fp16 (row-major in global memory) are
// staged into shared memory by your swizzled_offset, then D = A·Bᵀ (64×64 fp32) is one chain of
// four wgmma.m64n64k16 with your descriptors and advance. D comes back NaN-poisoned where the
// kernel did not write; `stray_writes` counts elements your offset put outside the tile (they
// are dropped, not written). `issued` is false if a descriptor (at any k step) could reach
// outside the kernel's shared tiles: the chain is then not issued at all. Returns "" or what went
// wrong with CUDA.
std::string run_tile(const std::vector<__half>& a, const std::vector<__half>& b, std::vector<float>& d,
                     int& stray_writes, bool& issued);

}  // namespace lab11
