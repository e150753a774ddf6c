// A test of lab 12's CPU model (a CPU test, label cpu; not part of the lab): the reference
// arguments must pass, and each classic mistake must be caught by the right check with the right
// diagnosis. A model that passed everything would let any starter through.
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "labs/L12_tma_ragged/model.hpp"

namespace {

using lab12::TensorMapArgs;
using lab12::model::Answers;
using lab12::model::Mistake;

TensorMapArgs ref_map(int rows) {
  TensorMapArgs a;
  a.rank = 2;
  a.dims[0] = 64;
  a.dims[1] = cuuint64_t(rows);
  a.strides[0] = 128;
  a.box[0] = 64;
  a.box[1] = 128;
  a.element_strides[0] = a.element_strides[1] = 1;
  a.swizzle = CU_TENSOR_MAP_SWIZZLE_128B;
  a.l2_promotion = CU_TENSOR_MAP_L2_PROMOTION_L2_256B;
  return a;
}
std::uint32_t ref_expect(int, int) { return 128 * 128; }

struct Case {
  std::string name;
  Answers answers;
  int check;  // 0: must pass
  Mistake mistake;
};

}  // namespace

int main() {
  std::vector<Case> cases;
  cases.push_back({"the reference arguments", {ref_map, ref_expect}, 0, Mistake::kNone});
  cases.push_back({"the starter (everything 0)", {[](int) { return TensorMapArgs{}; }, [](int, int) { return 0u; }}, 1,
                   Mistake::kRank});
  auto with_map = [&](std::string name, std::function<void(TensorMapArgs&, int)> change, int check, Mistake m) {
    cases.push_back({std::move(name),
                     {[change](int rows) { TensorMapArgs a = ref_map(rows); change(a, rows); return a; }, ref_expect},
                     check, m});
  };
  auto with_expect = [&](std::string name, std::function<std::uint32_t(int, int)> expect, Mistake m) {
    cases.push_back({std::move(name), {ref_map, std::move(expect)}, 5, m});
  };
  with_map("rank 3", [](TensorMapArgs& a, int) { a.rank = 3; a.dims[2] = 1; a.box[2] = 1; }, 1, Mistake::kRank);
  with_map("dims outer-first", [](TensorMapArgs& a, int rows) { a.dims[0] = cuuint64_t(rows); a.dims[1] = 64; }, 1,
           Mistake::kDimsOuterFirst);
  with_map("dims in bytes", [](TensorMapArgs& a, int) { a.dims[0] = 128; }, 1, Mistake::kDimsWrong);
  with_map("rows rounded up to the box", [](TensorMapArgs& a, int rows) { a.dims[1] = cuuint64_t((rows + 127) / 128 * 128); },
           1, Mistake::kDimsWrong);
  with_map("the innermost stride given", [](TensorMapArgs& a, int) { a.strides[0] = 2; a.strides[1] = 128; }, 2,
           Mistake::kInnermostStride);
  with_map("the stride in elements", [](TensorMapArgs& a, int) { a.strides[0] = 64; }, 2, Mistake::kStrideInElements);
  with_map("a stride of 100 bytes", [](TensorMapArgs& a, int) { a.strides[0] = 100; }, 2, Mistake::kStrideNot16);
  with_map("the stride of the whole tensor", [](TensorMapArgs& a, int rows) { a.strides[0] = cuuint64_t(rows) * 128 * 16; },
           2, Mistake::kStrideWrong);
  with_map("a second stride left over", [](TensorMapArgs& a, int rows) { a.strides[1] = cuuint64_t(rows) * 128; }, 2,
           Mistake::kStrideTail);
  with_map("box in bytes (128 halves)", [](TensorMapArgs& a, int) { a.box[0] = 128; }, 3, Mistake::kBoxOverSwizzleSpan);
  with_map("box rows = the whole tensor", [](TensorMapArgs& a, int rows) { a.box[1] = cuuint32_t(std::max(rows, 257)); },
           3, Mistake::kBoxOver256);
  with_map("box inner of 4 halves", [](TensorMapArgs& a, int) { a.box[0] = 4; }, 3, Mistake::kBoxInnerNot16);
  with_map("box of 64 rows", [](TensorMapArgs& a, int) { a.box[1] = 64; }, 3, Mistake::kBoxWrong);
  with_map("element strides 0", [](TensorMapArgs& a, int) { a.element_strides[0] = a.element_strides[1] = 0; }, 3,
           Mistake::kElementStrides);
  with_map("interleave 32B", [](TensorMapArgs& a, int) { a.interleave = CU_TENSOR_MAP_INTERLEAVE_32B; }, 4,
           Mistake::kInterleave);
  with_map("swizzle 1 (the descriptor's 128-byte)", [](TensorMapArgs& a, int) { a.swizzle = CU_TENSOR_MAP_SWIZZLE_32B; }, 4,
           Mistake::kSwizzleDescriptorEnum);
  with_map("no swizzle", [](TensorMapArgs& a, int) { a.swizzle = CU_TENSOR_MAP_SWIZZLE_NONE; }, 4, Mistake::kSwizzleNone);
  with_map("swizzle 64B", [](TensorMapArgs& a, int) { a.swizzle = CU_TENSOR_MAP_SWIZZLE_64B; }, 4, Mistake::kSwizzleOther);
  with_map("an L2 promotion out of range", [](TensorMapArgs& a, int) { a.l2_promotion = CUtensorMapL2promotion(7); }, 4,
           Mistake::kL2Promotion);
  with_map("NaN fill", [](TensorMapArgs& a, int) { a.oob_fill = CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA; }, 4,
           Mistake::kOobNan);
  with_expect("expect_tx of the rows inside the tensor only",
              [](int rows, int b) { return std::uint32_t(std::min(128, rows - b * 128)) * 128; }, Mistake::kExpectInBoundsOnly);
  with_expect("expect_tx in halves", [](int, int) { return 128u * 64; }, Mistake::kExpectElements);
  with_expect("expect_tx of K and V (two boxes)", [](int, int) { return 2u * 128 * 128; }, Mistake::kExpectWrong);
  with_expect("expect_tx 0", [](int, int) { return 0u; }, Mistake::kExpectWrong);

  int failures = 0;
  for (const auto& c : cases) {
    const auto f = lab12::model::check(c.answers);
    const bool ok = f.check == c.check && f.mistake == c.mistake;
    fmt::print("{} {}: {}\n", ok ? "ok  " : "FAIL", c.name,
               f.check ? fmt::format("check {} ({})", f.check, lab12::model::check_name(f.check)) : std::string("passes"));
    if (!ok || c.name.starts_with("the starter")) fmt::print("      {}\n", f.check ? f.what : std::string("(no finding)"));
    if (!ok) fmt::print("      expected check {} with mistake #{}, got check {} with mistake #{}\n", c.check,
                        int(c.mistake), f.check, int(f.mistake));
    failures += !ok;
  }
  fmt::print("{}\n", failures ? fmt::format("model selftest: {} case(s) FAILED", failures) : "model selftest: PASS");
  return failures ? 1 : 0;
}
