// Lab 12's CPU side (given, do not edit): your tensor map's arguments checked against the rules of
// cuTensorMapEncodeTiled (cuda.h's comment block) and of the kernel that uses the map, and your
// expect_tx bytes against what the copy engine delivers, box by box, with a diagnosis for each
// classic mistake. Used by the checker (then the GPU run) and by model_selftest.cpp (the reference
// passes; each classic mistake is caught with its diagnosis).
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>

#include "labs/L12_tma_ragged/lab12.hpp"

namespace lab12::model {

struct Answers {
  std::function<TensorMapArgs(int rows)> map;
  std::function<std::uint32_t(int rows, int box)> expect;
};

enum class Mistake {
  kNone,
  kRank, kDimsOuterFirst, kDimsWrong,                                       // check 1
  kInnermostStride, kStrideInElements, kStrideNot16, kStrideWrong, kStrideTail,  // check 2
  kBoxOverSwizzleSpan, kBoxOver256, kBoxInnerNot16, kBoxWrong, kElementStrides,  // check 3
  kInterleave, kSwizzleDescriptorEnum, kSwizzleNone, kSwizzleOther, kL2Promotion, kOobNan,  // check 4
  kExpectInBoundsOnly, kExpectElements, kExpectWrong,                       // check 5
};

struct Finding {
  int check = 0;  // 0: every check passed
  Mistake mistake = Mistake::kNone;
  std::string what;
};

inline const char* check_name(int check) {
  switch (check) {
    case 1: return "rank and dims";
    case 2: return "strides";
    case 3: return "box and element strides";
    case 4: return "interleave, swizzle, L2 promotion, out-of-bounds fill";
    case 5: return "expect_tx, box by box";
    default: return "passed";
  }
}

// The row counts every check runs at: ragged and not, one box and many.
inline constexpr int kTryRows[] = {1, 100, 128, 1000, 1029, 4097};

inline std::string args_line(const TensorMapArgs& a) {
  const int r = int(a.rank <= 5 ? a.rank : 5);
  std::string dims, strides, box, es;
  for (int i = 0; i < r; ++i) {
    dims += fmt::format("{}{}", i ? ", " : "", a.dims[i]);
    box += fmt::format("{}{}", i ? ", " : "", a.box[i]);
    es += fmt::format("{}{}", i ? ", " : "", a.element_strides[i]);
    if (i + 1 < r) strides += fmt::format("{}{}", i ? ", " : "", a.strides[i]);
  }
  return fmt::format("rank {}, dims {{{}}}, strides {{{}}} bytes, box {{{}}}, element strides {{{}}}, interleave {}, "
                     "swizzle {}, L2 promotion {}, OOB fill {}",
                     a.rank, dims, strides, box, es, int(a.interleave), int(a.swizzle), int(a.l2_promotion),
                     int(a.oob_fill));
}

inline Finding check_map(const TensorMapArgs& a, int rows) {
  const std::string at = fmt::format("rows = {}: ", rows);
  const auto n = cuuint64_t(rows);
  // Check 1: rank and dims.
  if (a.rank != 2)
    return {1, Mistake::kRank,
            at + fmt::format("rank {}: a [rows × 64] tensor has two dimensions, and the kernel's copy "
                             "(cp.async.bulk.tensor.2d) gives two coordinates", a.rank)};
  if (a.dims[0] == n && a.dims[1] == cuuint64_t(kD) && n != cuuint64_t(kD))
    return {1, Mistake::kDimsOuterFirst,
            at + fmt::format("dims {{{}, {}}} are outer-first. The driver lists dimensions innermost first: "
                             "dims[0] is the contiguous one, the 64 columns; dims[1] the rows", a.dims[0], a.dims[1])};
  if (a.dims[0] != cuuint64_t(kD) || a.dims[1] != n)
    return {1, Mistake::kDimsWrong,
            at + fmt::format("dims {{{}, {}}}: in elements, innermost first, that is {{{}, {}}}", a.dims[0], a.dims[1],
                             kD, rows)};
  // Check 2: strides (rank - 1 of them: dims 1 and up).
  const cuuint64_t s = a.strides[0];
  if (s == cuuint64_t(kElementBytes))
    return {2, Mistake::kInnermostStride,
            at + "strides[0] = 2 is the innermost dimension's stride (one element). The array holds rank - 1 "
                 "strides, for dimensions 1 and up: dimension 0 is contiguous by definition. strides[0] is "
                 "the stride of dims[1], the rows"};
  if (s == cuuint64_t(kD))
    return {2, Mistake::kStrideInElements,
            at + "strides[0] = 64 counts elements; strides are in bytes: one row of 64 halves is 128 bytes"};
  if (s % 16 != 0)
    return {2, Mistake::kStrideNot16, at + fmt::format("strides[0] = {} bytes: every stride must be a multiple of 16", s)};
  if (s != cuuint64_t(kRowBytes))
    return {2, Mistake::kStrideWrong,
            at + fmt::format("strides[0] = {} bytes: from one row to the next is 64 halves, 128 bytes", s)};
  for (int i = 1; i < 4; ++i)
    if (a.strides[i] != 0)
      return {2, Mistake::kStrideTail,
              at + fmt::format("strides[{}] = {}: a rank-2 map has one stride; the rest of the array is unused "
                               "(set to 0 so nothing looks meant)", i, a.strides[i])};
  // Check 3: box and element strides.
  if (a.box[0] * kElementBytes > 128 && a.swizzle == CU_TENSOR_MAP_SWIZZLE_128B)
    return {3, Mistake::kBoxOverSwizzleSpan,
            at + fmt::format("box[0] = {} halves is {} bytes: with the 128-byte swizzle the box's inner dimension "
                             "must fit its span, at most 128 bytes", a.box[0], a.box[0] * kElementBytes)};
  if (a.box[0] > 256 || a.box[1] > 256)
    return {3, Mistake::kBoxOver256,
            at + fmt::format("box {{{}, {}}}: every box dimension is at most 256 elements. One copy does not bring "
                             "the whole tensor; the kernel copies box after box of {} rows",
                             a.box[0], a.box[1], kBoxRows)};
  if ((a.box[0] * kElementBytes) % 16 != 0)
    return {3, Mistake::kBoxInnerNot16,
            at + fmt::format("box[0] = {} halves: the inner dimension must be a multiple of 16 bytes", a.box[0])};
  if (a.box[0] != cuuint32_t(kD) || a.box[1] != cuuint32_t(kBoxRows))
    return {3, Mistake::kBoxWrong,
            at + fmt::format("box {{{}, {}}}: the kernel's box is a whole row by {} rows, {{{}, {}}} (its buffer "
                             "and its coordinates b · {} assume it)", a.box[0], a.box[1], kBoxRows, kD, kBoxRows,
                             kBoxRows)};
  if (a.element_strides[0] != 1 || a.element_strides[1] != 1)
    return {3, Mistake::kElementStrides,
            at + fmt::format("element strides {{{}, {}}}: 1 takes every element (0 is invalid, 2 would take every "
                             "other one)", a.element_strides[0], a.element_strides[1])};
  // Check 4: the four enums.
  if (a.interleave != CU_TENSOR_MAP_INTERLEAVE_NONE)
    return {4, Mistake::kInterleave,
            at + "interleave is for interleaved layouts such as NC/8HWC8 (and needs rank 3 or more); a plain "
                 "row-major tensor is CU_TENSOR_MAP_INTERLEAVE_NONE"};
  if (a.swizzle != CU_TENSOR_MAP_SWIZZLE_128B) {
    if (a.swizzle == CU_TENSOR_MAP_SWIZZLE_32B)
      return {4, Mistake::kSwizzleDescriptorEnum,
              at + "swizzle 1 is CU_TENSOR_MAP_SWIZZLE_32B. 1 means 128-byte in the wgmma descriptor's field, "
                   "not in this enum: here it is CU_TENSOR_MAP_SWIZZLE_128B (3)"};
    if (a.swizzle == CU_TENSOR_MAP_SWIZZLE_NONE)
      return {4, Mistake::kSwizzleNone,
              at + "no swizzle: the box would land row-major, and the kernel (like wgmma) reads the 128-byte "
                   "swizzle: CU_TENSOR_MAP_SWIZZLE_128B, whose span is exactly one 64-half row"};
    return {4, Mistake::kSwizzleOther,
            at + fmt::format("swizzle {}: the kernel reads the 128-byte swizzle, CU_TENSOR_MAP_SWIZZLE_128B (3)",
                             int(a.swizzle))};
  }
  if (int(a.l2_promotion) < 0 || int(a.l2_promotion) > int(CU_TENSOR_MAP_L2_PROMOTION_L2_256B))
    return {4, Mistake::kL2Promotion,
            at + fmt::format("L2 promotion {} is not one of the enum's values (NONE, L2_64B, L2_128B, L2_256B)",
                             int(a.l2_promotion))};
  if (a.oob_fill != CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)
    return {4, Mistake::kOobNan,
            at + "CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA fills the rows past the end with NaN; they must "
                 "read as 0: CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE (zeros)"};
  return {};
}

// Check 5: what every box's barrier is told against what the copy engine delivers: the whole
// box, zero-filled past the end, counted in full.
inline Finding check_expect(const Answers& ans, int rows) {
  const std::uint32_t delivered = std::uint32_t(kBoxRows) * kRowBytes;
  for (int b = 0; b < boxes(rows); ++b) {
    const std::uint32_t got = ans.expect(rows, b);
    if (got == delivered) continue;
    const int inside = std::min(kBoxRows, rows - b * kBoxRows);
    const std::string at = fmt::format("rows = {}, box {} ({} of its {} rows inside the tensor): expect_tx {} bytes, the "
                                       "copy delivers {}", rows, b, inside, kBoxRows, got, delivered);
    if (got == std::uint32_t(inside) * kRowBytes)
      return {5, Mistake::kExpectInBoundsOnly,
              at + ". Counting only the rows inside the tensor: the copy engine writes the whole box, zeros past "
                   "the end, and counts every byte, so the phase completes before the last bytes have landed"};
    if (got == delivered / kElementBytes || got == std::uint32_t(inside) * kD)
      return {5, Mistake::kExpectElements, at + ". That counts halves; expect_tx counts bytes"};
    return {5, Mistake::kExpectWrong,
            at + (got > delivered ? ". More than arrives: the phase never completes (a timeout on the GPU)"
                                  : ". Fewer than arrive: the phase completes before the box has landed")};
  }
  return {};
}

inline Finding check(const Answers& ans) {
  for (int rows : kTryRows)
    if (Finding f = check_map(ans.map(rows), rows); f.check) return f;
  for (int rows : kTryRows)
    if (Finding f = check_expect(ans, rows); f.check) return f;
  return {};
}

}  // namespace lab12::model
