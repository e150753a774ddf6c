// Lab 11 — the wgmma shared-memory descriptor with the 128-byte swizzle. REFERENCE SOLUTION: try
// the starter (../descriptor.hpp) first.
#pragma once

#include <cuda_runtime.h>  // __host__ __device__

#include <cstdint>

#include "labs/L11_wgmma_descriptor/lab11.hpp"

namespace wgdesc {

// Row r starts r·128 bytes in (an 8-row atom is 1024 bytes, so atoms follow each other with no
// gap). Inside the row, the chunk c = col / 8 is stored at chunk position c ^ (r % 8): the eight
// rows of an atom put the same logical chunk in eight different 16-byte bank groups, so a read of
// one chunk column (eight rows, 128 bytes) touches all 32 banks once. The half's place inside
// its chunk does not move.
__host__ __device__ constexpr std::uint32_t swizzled_offset(int row, int col) {
  const int chunk = (col / 8) ^ (row % lab11::kAtomRows);
  return std::uint32_t(row * lab11::kRowBytes + chunk * lab11::kChunkBytes + (col % 8) * lab11::kElementBytes);
}

// Every address-like field counts 16-byte units (the byte value >> 4, 14 bits):
//   bits  0-13  start address >> 4
//   bits 16-29  LBO >> 4: unused by a swizzled K-major operand whose K extent (64 halves) is one
//               swizzle row; the PTX ISA says it is assumed to be 1, so 16 bytes
//   bits 32-45  SBO >> 4: from one 8-row group to the next, one atom, 1024 bytes
//   bits 49-51  base offset: 0, the tile starts on the swizzle pattern's 1024-byte boundary
//   bits 62-63  swizzle mode: 1 = 128-byte (2 = 64-byte, 3 = 32-byte, 0 = none). Not the tensor
//               map's numbering, where CU_TENSOR_MAP_SWIZZLE_128B is 3.
__host__ __device__ constexpr std::uint64_t make_desc(std::uint32_t smem_addr) {
  const auto field = [](std::uint32_t bytes) { return std::uint64_t((bytes >> 4) & 0x3FFF); };
  return field(smem_addr) | (field(16) << 16) | (field(lab11::kAtomBytes) << 32) | (std::uint64_t(0) << 49) |
         (std::uint64_t(1) << 62);
}

// A k16 step is 16 halves = 32 bytes further along every row: start address + 32 bytes, which in
// the field's 16-byte units is + 2. The hardware applies the swizzle to the address it computes,
// so the plain offset is right even though the chunks moved.
__host__ __device__ constexpr std::uint64_t k_step_advance() {
  return (lab11::kK * lab11::kElementBytes) >> 4;
}

}  // namespace wgdesc
