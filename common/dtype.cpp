#include "common/dtype.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <bit>

namespace ladder {

const char* dtype_name(DType t) { return t == DType::BF16 ? "bf16" : "fp16"; }

std::optional<DType> parse_dtype(std::string_view name) {
  if (name == "fp16" || name == "f16" || name == "half") return DType::F16;
  if (name == "bf16") return DType::BF16;
  return std::nullopt;
}

int fraction_bits(DType t) { return t == DType::BF16 ? 7 : 10; }

// The conversions are cuda_fp16.h's and cuda_bf16.h's host implementations (round to nearest
// even, NaN and infinity kept), so the CPU rounds exactly like the kernels' cvt.rn.
std::uint16_t to_bits(DType t, float x) {
  if (t == DType::BF16) return std::bit_cast<std::uint16_t>(__float2bfloat16_rn(x));
  return std::bit_cast<std::uint16_t>(__float2half_rn(x));
}

float from_bits(DType t, std::uint16_t bits) {
  if (t == DType::BF16) return __bfloat162float(std::bit_cast<__nv_bfloat16>(bits));
  return __half2float(std::bit_cast<__half>(bits));
}

}  // namespace ladder
