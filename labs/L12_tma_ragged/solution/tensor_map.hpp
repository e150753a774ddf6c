// Lab 12 — a TMA tensor map for a ragged tile. REFERENCE SOLUTION: try the starter
// (../tensor_map.hpp) first.
#pragma once

#include <cstdint>

#include "labs/L12_tma_ragged/lab12.hpp"

namespace tmamap {

inline lab12::TensorMapArgs tensor_map_args(int rows) {
  lab12::TensorMapArgs a;
  // A [rows][64] tensor is 2-D. The driver lists dimensions innermost (contiguous) first: the 64
  // columns, then the rows. (Reading the shape "rows × 64" left to right gives the wrong order.)
  a.rank = 2;
  a.dims[0] = lab12::kD;
  a.dims[1] = cuuint64_t(rows);
  // rank - 1 strides, in bytes, for dimensions 1 and up: dimension 0 is contiguous by definition
  // (its stride is the element size, which the data type already says). One row is 128 bytes, a
  // multiple of 16 as every stride must be.
  a.strides[0] = lab12::kRowBytes;
  // The box: a whole row (64 halves = 128 bytes, exactly the 128-byte swizzle's span) by 128 rows
  // (each box dimension at most 256).
  a.box[0] = lab12::kD;
  a.box[1] = lab12::kBoxRows;
  a.element_strides[0] = 1;
  a.element_strides[1] = 1;
  a.interleave = CU_TENSOR_MAP_INTERLEAVE_NONE;    // interleaving is for NC/8HWC8-style layouts
  a.swizzle = CU_TENSOR_MAP_SWIZZLE_128B;          // what the kernel (and wgmma) reads
  a.l2_promotion = CU_TENSOR_MAP_L2_PROMOTION_L2_256B;  // what Part IV's maps use
  a.oob_fill = CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE;  // out-of-bounds elements are written as zeros
  return a;
}

// The copy engine writes the whole box, zeros for the rows past the end, and counts every byte it
// writes: 128 rows × 128 bytes = 16384 for every box, the ragged last one included. Announcing
// only the rows inside the tensor lets the phase complete before the last bytes have landed.
inline std::uint32_t expect_tx_bytes(int /*rows*/, int /*box*/) {
  return std::uint32_t(lab12::kBoxRows) * lab12::kRowBytes;
}

}  // namespace tmamap
