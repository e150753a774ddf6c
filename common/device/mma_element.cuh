// mma.sync and fragment packing for either element type of the ladder, fp16 or bf16.
//
// ptx.cuh's mma_m16n8k16_f32 and pack_half2 are fp16 only (the forward steps 05-15 are fp16
// kernels). A kernel templated on its element type calls these instead: the fragment layouts of
// the .f16 and .bf16 forms of mma.m16n8k16 are the same (two 16-bit values per b32 register, the
// lower index in the low half), so everything else in such a kernel is shared.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "common/device/ptx.cuh"

namespace ladder::ptx {

template <class Element>
inline constexpr bool kElementIsBf16 = std::is_same_v<Element, __nv_bfloat16>;

// D = A·B + D on m16n8k16 with fp32 accumulation, A and B of type Element (see ptx.cuh for the
// operand layouts).
template <class Element>
__device__ __forceinline__ void mma_m16n8k16(float (&d)[4], const std::uint32_t (&a)[4],
                                             const std::uint32_t (&b)[2]) {
  static_assert(std::is_same_v<Element, __half> || kElementIsBf16<Element>);
  if constexpr (kElementIsBf16<Element>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  } else {
    mma_m16n8k16_f32(d, a, b);
  }
}

// Two floats rounded (to nearest) to Element and packed into one b32 register, lo in the low half:
// the A-operand format, and the layout of an Element pair in memory.
template <class Element>
__device__ __forceinline__ std::uint32_t pack2_as(float lo, float hi) {
  if constexpr (kElementIsBf16<Element>) {
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<std::uint32_t*>(&h);
  } else {
    return pack_half2(lo, hi);
  }
}

// One Element as a float (exact: both types are subsets of fp32).
template <class Element>
__device__ __forceinline__ float element_to_float(Element x) {
  if constexpr (kElementIsBf16<Element>) return __bfloat162float(x);
  else return __half2float(x);
}

}  // namespace ladder::ptx
