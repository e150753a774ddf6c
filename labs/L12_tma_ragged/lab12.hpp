// Lab 12's given interface (do not edit): the tensor, the box, the arguments you fill in, and the
// one launch the checker makes. Included by your tensor_map.hpp, by the kernel (tma_boxes.cu), by
// the CPU model (model.hpp) and by the checker, so all four agree on them.
#pragma once

#include <cuda.h>  // the CUtensorMap* enums (no driver library is linked: see tma_boxes.cu)
#include <cuda_fp16.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

namespace lab12 {

// The tensor: `rows` rows of kD fp16 values, row-major and packed (row r starts r·kD·2 bytes after
// the base); `rows` is any count from 1 up, usually not a multiple of kBoxRows.
inline constexpr int kD = 64;                          // one row: 64 halves, 128 bytes
inline constexpr int kElementBytes = 2;
inline constexpr int kRowBytes = kD * kElementBytes;   // 128
// One TMA copy brings one box of kBoxRows rows × kD columns into shared memory; box b starts at
// row b·kBoxRows. The last box of a ragged tensor reaches past the end.
inline constexpr int kBoxRows = 128;
inline int boxes(int rows) { return (rows + kBoxRows - 1) / kBoxRows; }

// Everything cuTensorMapEncodeTiled takes besides the map and the base address. The data type is
// given; the rest is yours (tensor_map.hpp). Arrays are indexed by dimension, innermost first,
// the unused tail left 0.
struct TensorMapArgs {
  CUtensorMapDataType type = CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  cuuint32_t rank = 0;
  cuuint64_t dims[5] = {};             // globalDim: elements per dimension
  cuuint64_t strides[4] = {};          // globalStrides: bytes, for dimensions 1 .. rank-1 only
  cuuint32_t box[5] = {};              // boxDim: elements of one box per dimension
  cuuint32_t element_strides[5] = {};  // elementStrides: 1 = every element
  CUtensorMapInterleave interleave = CU_TENSOR_MAP_INTERLEAVE_NONE;
  CUtensorMapSwizzle swizzle = CU_TENSOR_MAP_SWIZZLE_NONE;
  CUtensorMapL2promotion l2_promotion = CU_TENSOR_MAP_L2_PROMOTION_NONE;
  CUtensorMapFloatOOBfill oob_fill = CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE;
};

// Where the kernel reads element (r, c) of a landed box: the 128-byte swizzle (the layout wgmma
// reads, chapter 16 and lab 11): 16-byte chunk c / 8 of row r at chunk position (c / 8) ^ (r % 8).
inline constexpr std::uint32_t swizzled_offset(int r, int c) {
  return std::uint32_t(r * kRowBytes + (((c / 8) ^ (r % 8)) * 16) + (c % 8) * kElementBytes);
}

// A wait for a box that does not complete in kStallMs is reported as a timeout instead of hanging
// the GPU. LADDER_LAB_STALL_MS raises it (compute-sanitizer runs ~100× slower).
inline constexpr int kStallMs = 250;
inline int stall_ms() {
  const char* env = std::getenv("LADDER_LAB_STALL_MS");
  const int ms = env ? std::atoi(env) : 0;
  return ms > 0 ? ms : kStallMs;
}

// The checker's GPU run: one CTA per box, each loads its box with your map, announcing
// expect[b] bytes on its mbarrier, waits (bounded), and copies what it reads out, un-swizzled,
// to `out` (boxes(rows)·kBoxRows rows of kD halves).
struct BoxRun {
  std::string error;         // a CUDA error, or why the kernel was not launched
  int encode_result = -1;    // cuTensorMapEncodeTiled's CUresult (0: the driver took the map)
  std::vector<int> status;   // per box: 1 the barrier completed, 2 timed out, 0 did not run
  std::vector<__half> out;   // what each box read; rows the box did not bring keep the poison 0xFFFF
};
inline constexpr unsigned short kPoison = 0xFFFF;  // a NaN: never what the copy engine writes
BoxRun run_boxes(const TensorMapArgs& args, int rows, const std::vector<__half>& tensor,
                 const std::vector<std::uint32_t>& expect);

}  // namespace lab12
