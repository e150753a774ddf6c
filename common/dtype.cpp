#include "common/dtype.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

namespace ladder {

namespace {
// e4m3's layout: 1 sign bit, 4 exponent bits (bias 7), 3 fraction bits.
constexpr int kE4M3Bias = 7;
constexpr int kE4M3MinNormalExponent = 1 - kE4M3Bias;  // 2^-6
constexpr std::uint8_t kE4M3Sign = 0x80;
constexpr std::uint8_t kE4M3MaxCode = 0x7E;  // 448 = 1.75 · 2^8; 0x7F is NaN
constexpr int kE4M3FractionBits = 3;
constexpr std::uint8_t kE4M3FractionMask = (1 << kE4M3FractionBits) - 1;
constexpr std::uint8_t kE4M3ExponentMask = 0xF;

void refuse_fp8(const char* what) {
  throw std::invalid_argument(std::string(what) +
                              ": fp8 (e4m3) is one byte, not 16 bits: use to_e4m3 / from_e4m3");
}
}  // namespace

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F16: return "fp16";
    case DType::BF16: return "bf16";
    case DType::E4M3: return "fp8";
  }
  return "?";
}

std::optional<DType> parse_dtype(std::string_view name) {
  if (name == "fp16" || name == "f16" || name == "half") return DType::F16;
  if (name == "bf16") return DType::BF16;
  if (name == "fp8" || name == "e4m3" || name == "fp8_e4m3") return DType::E4M3;
  return std::nullopt;
}

int fraction_bits(DType t) {
  switch (t) {
    case DType::F16: return 10;
    case DType::BF16: return 7;
    case DType::E4M3: return kE4M3FractionBits;
  }
  return 0;
}

int element_bytes(DType t) { return t == DType::E4M3 ? 1 : 2; }

DType output_dtype(DType t) { return t == DType::E4M3 ? DType::BF16 : t; }

// The conversions are cuda_fp16.h's and cuda_bf16.h's host implementations (round to nearest
// even, NaN and infinity kept), so the CPU rounds exactly like the kernels' cvt.rn.
std::uint16_t to_bits(DType t, float x) {
  if (t == DType::E4M3) refuse_fp8("to_bits");
  if (t == DType::BF16) return std::bit_cast<std::uint16_t>(__float2bfloat16_rn(x));
  return std::bit_cast<std::uint16_t>(__float2half_rn(x));
}

float from_bits(DType t, std::uint16_t bits) {
  if (t == DType::E4M3) refuse_fp8("from_bits");
  if (t == DType::BF16) return __bfloat162float(std::bit_cast<__nv_bfloat16>(bits));
  return __half2float(std::bit_cast<__half>(bits));
}

float round_to(DType t, float x) {
  if (t == DType::E4M3) return from_e4m3(to_e4m3(x));
  return from_bits(t, to_bits(t, x));
}

// Written out rather than taken from cuda_fp8.h, so that the CPU tests can hold the two against
// each other (tests/cpu/test_fp8.cpp). In double, where every step below is exact: a float and
// its e4m3 neighbours are all doubles, and nearbyint rounds half to even.
std::uint8_t to_e4m3(float x) {
  if (std::isnan(x)) return kE4M3NaN;
  const std::uint8_t sign = std::signbit(x) ? kE4M3Sign : 0;
  const double a = std::fabs(double(x));
  if (a >= double(kE4M3Max)) return sign | kE4M3MaxCode;  // satfinite: inf and overflow too
  int e = 0;
  std::frexp(a, &e);  // a = f · 2^e, f in [0.5, 1): a's binade is [2^(e-1), 2^e)
  // The spacing of e4m3 values at a: 2^(e-1-3) in a normal binade, 2^-9 among the subnormals.
  const int quantum_exponent = std::max(e - 1, kE4M3MinNormalExponent) - kE4M3FractionBits;
  const double r = std::ldexp(std::nearbyint(std::ldexp(a, -quantum_exponent)), quantum_exponent);
  if (r == 0) return sign;
  std::frexp(r, &e);  // rounding may have carried r into the next binade
  const int exponent = e - 1;
  if (exponent < kE4M3MinNormalExponent)  // subnormal: the fraction counts 2^-9 steps
    return sign | std::uint8_t(std::ldexp(r, kE4M3FractionBits - kE4M3MinNormalExponent));
  const int fraction = int(std::ldexp(r, kE4M3FractionBits - exponent)) - (1 << kE4M3FractionBits);
  return sign | std::uint8_t((exponent + kE4M3Bias) << kE4M3FractionBits) | std::uint8_t(fraction);
}

float from_e4m3(std::uint8_t bits) {
  const int exponent_field = (bits >> kE4M3FractionBits) & kE4M3ExponentMask;
  const int fraction = bits & kE4M3FractionMask;
  if (exponent_field == kE4M3ExponentMask && fraction == kE4M3FractionMask)
    return std::numeric_limits<float>::quiet_NaN();
  const float magnitude =
      exponent_field == 0
          ? std::ldexp(float(fraction), kE4M3MinNormalExponent - kE4M3FractionBits)
          : std::ldexp(float((1 << kE4M3FractionBits) + fraction),
                       exponent_field - kE4M3Bias - kE4M3FractionBits);
  return (bits & kE4M3Sign) ? -magnitude : magnitude;
}

float e4m3_descale(float amax) {
  if (!std::isfinite(amax)) throw std::invalid_argument("e4m3_descale: an infinite or NaN amax has no scale");
  if (!(amax > 0)) return 1.0f;
  // The smallest power of two p with amax <= 448 · p, in double (exact), kept a normal float.
  const int min_exponent = std::numeric_limits<float>::min_exponent - 1;  // 2^-126
  int e = 0;
  std::frexp(double(amax) / double(kE4M3Max), &e);  // amax / 448 in [2^(e-1), 2^e)
  int exponent = e;
  while (exponent - 1 >= min_exponent && double(amax) <= double(kE4M3Max) * std::ldexp(1.0, exponent - 1))
    --exponent;
  return std::ldexp(1.0f, std::max(exponent, min_exponent));
}

QuantizedTensor quantize_e4m3(std::span<const float> x, std::size_t groups) {
  if (groups == 0 || x.size() % groups != 0)
    throw std::invalid_argument(
        "quantize_e4m3: " + std::to_string(x.size()) + " elements do not split into " +
        std::to_string(groups) + " equal groups (give a group count that divides the size: B·H "
        "heads of a dense [B, H, N, D] tensor, or 1 for one descale a tensor)");
  const std::size_t size = x.size() / groups;
  QuantizedTensor t;
  t.bits.resize(x.size());
  t.value.resize(x.size());
  t.descales.resize(groups);
  for (std::size_t g = 0; g < groups; ++g) {
    const std::span<const float> chunk = x.subspan(g * size, size);
    float amax = 0.0f;
    for (float v : chunk) amax = std::max(amax, std::fabs(v));
    const float descale = e4m3_descale(amax);
    t.descales[g] = descale;
    for (std::size_t i = g * size; i < (g + 1) * size; ++i) {
      t.bits[i] = to_e4m3(x[i] / descale);  // exact: a division by a power of two
      t.value[i] = from_e4m3(t.bits[i]) * descale;
    }
  }
  // Per tensor, the one descale; by groups none (1, so that the scalar a kernel folds is neutral).
  t.descale = groups == 1 ? t.descales[0] : 1.0f;
  return t;
}

}  // namespace ladder
