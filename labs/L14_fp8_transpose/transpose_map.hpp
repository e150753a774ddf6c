// Lab 14 — the FP8 V transpose. YOUR FILE: the lane map of step 45's matrix transpose, which
// turns V [128 keys][128 head dims] into Vᵀ [128 head dims][128 keys in P's order] in shared
// memory, one unit (16 head dims × 32 keys) per ldmatrix.x4.trans + four __byte_perm + one
// stmatrix.x4. Fill in the TODOs, then
//   labs/check.sh L14
// The checker first runs your map through a CPU model of the three instructions, lane by lane, on
// one tile (no GPU needed): every address, every byte of Vᵀ, every 8-row phase's banks. Then, on
// an H100/H200, the given kernel (transpose.cu) runs the real instructions through your map on
// seven random tiles, checked byte for byte. (README.md has the puzzle; solution/ has the
// answers, for after you tried.)
//
// What the kernel does with your three functions, for each unit of a tile, in every lane:
//     ldmatrix.x4.trans.b16  R[0..3]  <-  [v  + load_offset(unit, lane)]
//     W[2h + σ] = __byte_perm(R[2h], R[2h + 1], selector(σ, lane))      for h, σ ∈ {0, 1}
//     stmatrix.x4.b16  [vt + store_offset(unit, lane)]  <-  W[0..3]
// lab14.hpp has what every lane of the two instructions names and holds, the swizzle, P's key
// order (permuted_key) and what a unit is (unit_chunk, unit_slice). Read it first.
#pragma once

#include <cuda_runtime.h>  // __host__ __device__

#include <cstdint>

#include "labs/L14_fp8_transpose/lab14.hpp"

namespace lab14 {

// TODO 1: the byte offset in V (from the tile's start) of the row that lane 8i + r names for
// ldmatrix: row r of matrix i, one 16-byte piece of one key's row. Which key, and where does the
// unit's head-dim chunk of that key sit in V's 128-byte row? Decide with TODO 2 which keys each
// matrix must hold: lane 4q + t receives from matrix i its rows 2t and 2t + 1.
// As given: keys 32kk + 8i + r, at the chunk's place in a plain row-major tile. A starting point.
__host__ __device__ constexpr std::uint32_t load_offset(int unit, int lane) {
  const int key = kSliceKeys * unit_slice(unit) + kMatrixRows * matrix_of(lane) + row_of(lane);
  return std::uint32_t(key * kRowBytes + kChunkBytes * unit_chunk(unit));  // TODO
}

// TODO 2: the __byte_perm selector that makes lane `lane`'s store register 2h + σ out of its loaded
// registers R[2h] (the low word, bytes 0-3 of the pair) and R[2h + 1] (bytes 4-7): byte n of the
// result is byte (selector >> 4n) & 7 of the pair. A store register is four bytes of ONE Vᵀ row:
// one head dim, four consecutive slots in P's order. Which bytes of R[2h] and R[2h + 1] are those?
// As given: the low 16-bit halves of both registers for σ = 0, the high halves for σ = 1, what a
// transpose of 16-bit elements would keep together. A starting point.
__host__ __device__ constexpr std::uint32_t selector(int sigma, [[maybe_unused]] int lane) {
  return sigma == 0 ? 0x5410u : 0x7632u;  // TODO
}

// TODO 3: the byte offset in Vᵀ of the row that lane 8i + r names for stmatrix: row r of store
// matrix i, i.e. register i of the lanes of group q = r, 16 bytes of one Vᵀ row (four lanes' words).
// Which head dim (Vᵀ row) does that register hold (TODO 2), at which slots, and where does the
// swizzle put them? Then look at the eight rows of one store matrix: under the swizzle, do they
// hit eight different groups of banks?
// As given: register 2h + σ of group r is head dim 16c + 2r + σ, slots 32kk + 16h .. + 15, in the
// swizzle. A starting point.
__host__ __device__ constexpr std::uint32_t store_offset(int unit, int lane) {
  const int i = matrix_of(lane), r = row_of(lane);
  const int row = 16 * unit_chunk(unit) + 2 * r + i % 2;  // TODO
  return swizzled_offset(row, kSliceKeys * unit_slice(unit) + 16 * (i / 2));
}

}  // namespace lab14
