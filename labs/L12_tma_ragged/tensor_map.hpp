// Lab 12 — a TMA tensor map for a ragged tile. YOUR FILE: the arguments of cuTensorMapEncodeTiled
// for a [rows × 64] fp16 tensor loaded in boxes of 128 rows, and the bytes each box's mbarrier
// must wait for. Fill in the TODOs, then
//   labs/check.sh L12
// The checker first checks these arguments against the rules of the driver and of the kernel on
// the CPU (no GPU needed), then, on an H100/H200, loads every box of tensors of 1 to 4097 rows
// with your map and compares every element; a barrier that never completes is reported as a
// timeout, not hung.
// (README.md has the puzzle; solution/ has the answers, for after you tried.)
//
// Read first: common/device/hopper/tma.cuh (how Part IV's 4-D maps are built; this one is 2-D)
// and the comment block of cuTensorMapEncodeTiled in cuda.h (its rules).
#pragma once

#include <cstdint>

#include "labs/L12_tma_ragged/lab12.hpp"

namespace tmamap {

// TODO 1-6: the map of a tensor of `rows` rows × lab12::kD halves (lab12.hpp), for the kernel's
// 2-D copy of the box at coordinates {0, b · kBoxRows}. `a.type` is set already (fp16).
inline lab12::TensorMapArgs tensor_map_args(int rows) {
  lab12::TensorMapArgs a;
  a.rank = 0;  // TODO 1: how many dimensions?
  // TODO 2: a.dims[...]: the size of each dimension, in elements. Which one comes first?
  // TODO 3: a.strides[...]: in bytes. Which dimensions have a stride in this array?
  // TODO 4: a.box[...]: one box, per dimension, in elements.
  // TODO 5: a.element_strides[...]: every element of the box, none skipped.
  // TODO 6: a.interleave, a.swizzle (the kernel reads the 128-byte swizzle), a.l2_promotion,
  //         a.oob_fill (rows past the end must read as 0).
  (void)rows;
  return a;
}

// TODO 7: the bytes the mbarrier of box `box` (0 .. lab12::boxes(rows) - 1) must be told to
// expect (mbarrier.arrive.expect_tx) before its copy completes. The last box of a ragged tensor
// holds fewer rows of the tensor: does the copy engine count the others?
inline std::uint32_t expect_tx_bytes(int rows, int box) {
  (void)rows;
  (void)box;
  return 0;  // TODO
}

}  // namespace tmamap
