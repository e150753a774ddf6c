// 2^x on the FMA pipes: range reduction and a cubic, for the exponentials of the softmax that do
// not go to the MUFU unit (step 32). Host and device compile the same arithmetic, so the CPU tests
// (tests/cpu/test_exp2_poly.cpp) measure the kernel's own function, bit for bit.
//
//   x = j + f,  j = floor(x),  f in [0, 1]        2^x = 2^j · 2^f ≈ 2^j · p(f)
//
// * Range: x ≤ 127 (the softmax's arguments are ≤ 0, or ≤ τ under the lazy rescale). x is first
//   clamped to −127: −inf (a masked score) becomes exactly +0 (j = −127, f = 0, p = 1, and the
//   exponent field of 1.0, 127, plus −127 is 0). On (−127, −126) the result is a subnormal,
//   2^-126·(p − 1), continuous and increasing, within 2^-126 of 2^x; ex2.approx.ftz flushes those
//   to 0 anyway. A NaN argument gives 0 (fmaxf returns the number): it cannot arise from finite
//   inputs, and the kernel's MUFU columns and the harness's poisoned outputs still catch NaN.
// * floor(x) by the rounding trick: x + 1.5·2^23 rounded toward −inf lands in [2^23, 2^24), where
//   a float's ulp is 1, so the sum is exactly 1.5·2^23 + floor(x) and its low mantissa bits are j
//   (two's complement, borrowing from the 1.5). The device does it in one FADD.RM; the host adds
//   floor(x) to the same constant, which is the same float. Subtracting the constant back gives j
//   exactly, and f = x − j is exact (x and j share x's ulp; for −1 < x < 0, f = 1 + x rounds, and
//   may round to 1, where p(1) = 2 is exact: still 2^x to the float).
// * Scale by 2^j without a multiply: the shifted sum's bits shifted left by 23 are j << 23 (the
//   constant's bits leave the word), and adding that to p's bits adds j to p's exponent field.
//   Exact for any positive normal p as long as the result's exponent stays in 1..254.
// * The cubic (scripts/fit_exp2_poly.py, numpy, fitted for this file):
//     p(f) = 1 + f + a(f² − f) + b(f³ − f²)  =  1 + c1 f + c2 f² + c3 f³,  c1 = 1 − a, c2 = a − b, c3 = b
//   has p(0) = 1 and p(1) = 2 for any a, b: 2^x is exact at every integer (x = 0 gives 1.0) and the
//   pieces meet at the integers, so the function is monotone. a and b minimise the largest
//   relative error |p(f)/2^f − 1| on [0, 1]: with two free parameters the optimum equioscillates
//   at three interior points (Chebyshev alternation), found by Remez's exchange on a grid of 4·10^5
//   points: a = 0.30457565, b = 0.07826797, error 1.0304e-4 (2^-13.24). c2 and c3 are then
//   rounded to multiples of 2^-24 and c1 = 1 − c2 − c3, so that every coefficient is an exact
//   float and Horner's partial sums at f = 1 are exact: p(1) evaluates to 2.0 exactly, not just
//   in real arithmetic. The float evaluation's error on [0, 1] is 1.031e-4 (the script emulates
//   the FMAs; the CPU test measures the header itself).
// * Against the formats P is stored in: fp16's unit roundoff is 2^-11 = 4.9e-4, bf16's 2^-8 =
//   3.9e-3, so the cubic's 1.03e-4 is a fifth of one fp16 rounding and a fortieth of a bf16 one;
//   MUFU.EX2 (ex2.approx.f32) is near 2^-22 relative (PTX ISA), far below either.
// * Cost (step 32's SASS): FMNMX, FADD.RM, 2 FADD, 3 FFMA (c3 stays in a register) and one LEA
//   (or IMAD by 2^23) for the exponent: 8 issued instructions on the FMA and integer pipes, where
//   MUFU.EX2 is one issue (and 8 cycles of a sub-partition's 4-lane MUFU pipe).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "common/host_device.hpp"

namespace ladder {

// p(f) = 1 + c1 f + c2 f² + c3 f³ (the constant term is 1 by construction).
struct Exp2Cubic {
  float c1, c2, c3;
};
// scripts/fit_exp2_poly.py: 11667284, 3796813 and 1313119 / 2^24. (A function, not a variable:
// host and device code can both call it.)
LADDER_HOST_DEVICE constexpr Exp2Cubic exp2_cubic() {
  return {0x1.640ea8p-1f, 0x1.cf7a68p-3f, 0x1.4095f0p-4f};
}
// The fit's own error (the script): the CPU test's bound adds the float evaluation's rounding.
inline constexpr float kExp2CubicFitError = 1.0305e-4f;

inline constexpr float kExp2PolyMinArg = -127.f;      // 2^-127: exponent field 0, i.e. +0 for f = 0
inline constexpr float kRoundShift = 12582912.f;      // 1.5 · 2^23: adding it rounds to an integer
inline constexpr int kFloatMantissaBits = 23;

LADDER_HOST_DEVICE inline std::uint32_t float_bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
#endif
}

LADDER_HOST_DEVICE inline float bits_float(std::uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
#endif
}

// 2^x for x ≤ 127 (−inf → 0), about 1.03e-4 relative error for 2^x ≥ 2^-126.
LADDER_HOST_DEVICE inline float exp2_poly(float x, Exp2Cubic c = exp2_cubic()) {
  x = fmaxf(x, kExp2PolyMinArg);
#if defined(__CUDA_ARCH__)
  const float shifted = __fadd_rd(x, kRoundShift);  // 1.5·2^23 + floor(x), exactly
#else
  const float shifted = std::floor(x) + kRoundShift;  // the same float
#endif
  const float j = shifted - kRoundShift;  // floor(x)
  const float f = x - j;                  // in [0, 1]
  const float p = fmaf(fmaf(fmaf(c.c3, f, c.c2), f, c.c1), f, 1.f);
  return bits_float(float_bits(p) + (float_bits(shifted) << kFloatMantissaBits));
}

}  // namespace ladder
