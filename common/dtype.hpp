// The element type of an attention problem's Q, K, V and O, and its host-side conversions.
//
// fp16 (IEEE half: 5 exponent bits, 10 fraction bits, largest 65504) is the ladder's type from
// step 00 on. bf16 (8 exponent bits like fp32, 7 fraction bits) is what most models are trained
// and served in: it cannot overflow where fp32 would not, and it is eight times coarser. Both are
// 16 bits wide and the tensor cores multiply either at the same rate, so a kernel supports both
// by changing its element type, its conversions and its instruction's type suffix, nothing else.
//
// fp8 (Part VIII) is OCP e4m3 ("e4m3fn": 4 exponent bits, bias 7, 3 fraction bits, subnormals down
// to 2^-9, largest 448, no infinity, 0x7F/0xFF NaN), one byte, twice Hopper's 16-bit tensor-core
// rate. Only Q, K and V are fp8: an FP8 forward writes O in bf16 (output_dtype), as FlashAttention-3
// does, and fp8 is forward-only. Its range is too small for raw activations, so each tensor travels
// with a scale (quantize_e4m3 below).
//
// No CUDA device code here: the CPU reference and tests use it without a GPU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

namespace ladder {

enum class DType { F16, BF16, E4M3 };

const char* dtype_name(DType t);                         // "fp16", "bf16", "fp8"
// "fp16"/"f16"/"half", "bf16", "fp8"/"e4m3"/"fp8_e4m3"
std::optional<DType> parse_dtype(std::string_view name);
int fraction_bits(DType t);                              // 10, 7, 3
int element_bytes(DType t);                              // 2, 2, 1: of Q, K and V as stored
// The type O is written in: fp16 and bf16 themselves; fp8's is bf16 (one byte of output would
// throw away what the fp32 accumulators computed, and O feeds a 16-bit projection next).
DType output_dtype(DType t);

// The 16-bit types' bits, rounded to nearest even as the GPU's conversion instructions do (cvt.rn).
// fp8 is one byte and has its own pair below: these throw std::invalid_argument for E4M3, so that
// a 16-bit buffer is never read as fp8 (or the reverse) by accident.
std::uint16_t to_bits(DType t, float x);
float from_bits(DType t, std::uint16_t bits);
// x rounded to the type (fp8: to_e4m3's rounding, saturating at ±448).
float round_to(DType t, float x);

// ---- fp8 (e4m3) ---------------------------------------------------------------------------------
inline constexpr float kE4M3Max = 448.0f;         // the largest finite e4m3 value (0x7E)
inline constexpr std::uint8_t kE4M3NaN = 0x7F;    // what a NaN converts to
// FlashAttention-3's offset of P before its e4m3 rounding: P = exp(s - m) lies in [0, 1], where
// e4m3 has only its subnormals below 2^-6; P·2^8 lies in [0, 256], inside e4m3's 448, so P keeps
// 3 fraction bits down to 2^-14. The row sum is taken from the unscaled fp32 P.
inline constexpr float kE4M3PScale = 256.0f;
// The key tile of Part VIII's FP8 kernels, which the low-precision reference follows: P is rounded
// to e4m3 against the running max of the blocks seen so far (reference.cpp says why), block by
// block over this many keys, visited from the last block to the first as the kernels visit them.
// The default: a variant with another key tile declares it (Variant::rounds_p_in_blocks_of), and
// its rows are checked against a low reference of its own.
inline constexpr int kE4M3KeyBlock = 128;
// The largest gap between neighbouring normal e4m3 values, relative to the smaller of the two
// (3 fraction bits: 1 + 1/8 after 1): what moving a rounded P to its neighbouring code can cost.
inline constexpr double kE4M3RoundingStep = 0.125;

// Round to nearest even, saturating to ±448 (what cvt.rn.satfinite.e4m3x2.f32 does: infinities
// and finite overflows become ±448, NaN becomes 0x7F); the byte as stored.
std::uint8_t to_e4m3(float x);
// The exact value of a byte (subnormals included; 0x7F and 0xFF are NaN).
float from_e4m3(std::uint8_t bits);

// Per-tensor quantization, as the harness feeds an fp8 problem (and cuDNN's documentation
// suggests: a scale of 448/amax rounded down to a power of two):
//   descale = 2^ceil(log2(amax / 448))   (amax = max |x| > 0; 1 when amax == 0)
//   byte    = to_e4m3(x / descale)        (|x / descale| <= 448: nothing saturates)
//   value   = from_e4m3(byte) · descale   (what the kernel's products see, and the references use)
// A power of two makes x / descale and from_e4m3(byte) · descale exact in fp32, so the only
// rounding is e4m3's: |x - value| <= half an e4m3 ulp of x / descale, times descale. The kernel
// gets descale (AttentionArgs::q_descale, k_descale, v_descale) and multiplies the scores by
// q_descale · k_descale and O by v_descale.
//
// By groups (FlashAttention-3's descales of shape (batch, heads); AttentionShape::head_scales): x
// is `groups` equal contiguous chunks (a dense [B, H, N, D] tensor's (b, h) heads, B·H of them),
// each quantized by the rule above from its own amax, so one head's large values do not cost the
// others their precision. The kernel then gets the descales as device arrays
// (AttentionArgs::q_head_descale, ...).
struct QuantizedTensor {
  std::vector<std::uint8_t> bits;  // e4m3 bytes, uploaded to the device
  std::vector<float> value;        // from_e4m3(bits[i]) · (the descale of i's group), exactly
  // The per-tensor descale, a power of two. With groups > 1 there is none: it is 1.0f and unused,
  // so that code which multiplies by it (the scalar AttentionArgs::q_descale, ...) is unchanged.
  float descale = 1.0f;
  // One power of two a group, in order (group g: elements g·size/groups .. (g+1)·size/groups - 1);
  // per tensor, the single element `descale`.
  std::vector<float> descales;
  std::size_t group_size() const { return descales.empty() ? 0 : bits.size() / descales.size(); }
};
// The descale of a tensor whose largest magnitude is `amax` (finite, >= 0); see above. Past fp32's
// normal range (amax below about 2^-117) it stays 2^-126 and the smallest elements flush to 0.
float e4m3_descale(float amax);
// Throws std::invalid_argument for groups == 0 or a size that `groups` does not divide.
QuantizedTensor quantize_e4m3(std::span<const float> x, std::size_t groups = 1);

}  // namespace ladder
