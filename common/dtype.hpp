// The element type of an attention problem's Q, K, V and O, and its host-side conversions.
//
// fp16 (IEEE half: 5 exponent bits, 10 fraction bits, largest 65504) is the ladder's type from
// step 00 on. bf16 (8 exponent bits like fp32, 7 fraction bits) is what most models are trained
// and served in: it cannot overflow where fp32 would not, and it is eight times coarser. Both are
// 16 bits wide and the tensor cores multiply either at the same rate, so a kernel supports both
// by changing its element type, its conversions and its instruction's type suffix, nothing else.
//
// No CUDA device code here: the CPU reference and tests use it without a GPU.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace ladder {

enum class DType { F16, BF16 };

const char* dtype_name(DType t);                         // "fp16", "bf16"
std::optional<DType> parse_dtype(std::string_view name);  // "fp16"/"f16"/"half", "bf16"
int fraction_bits(DType t);                              // 10, 7

// Round to nearest even, as the GPU's conversion instructions do (cvt.rn); the bits as stored.
std::uint16_t to_bits(DType t, float x);
float from_bits(DType t, std::uint16_t bits);
inline float round_to(DType t, float x) { return from_bits(t, to_bits(t, x)); }

}  // namespace ladder
