// cuDNN's FP8 forward attention (the frontend's sdpa_fp8 graph) as a row of the attention peers:
// 99/cudnn_fp8, beside 99/cudnn and 99/cudnn_lse (cudnn_attention.hpp), for fp8 problems only
// (DType::E4M3, Part VIII: e4m3 Q, K, V with per-tensor power-of-two descales, bf16 O).
//
// What cuDNN 9.19 does on Hopper (its frontend 1.32, node/sdpa_support_surface.h, the FP8 branch
// of validate_sdpa_support_surface): e4m3 in, fp32 softmax and accumulation, and O in e4m3 too: a
// bf16/fp16 O is "only supported on Blackwell architecture with cuDNN version 9.13.0 and newer".
// The harness reads a bf16 O, so the row writes cuDNN's e4m3 O into a buffer of its own and widens
// it into the harness's O afterwards, outside the timed launch (cudnn_fp8.cpp says how). Its error
// is then that of a 3-fraction-bit O, about 2^4 times a bf16 one: the row is declared approximate
// (kCudnnFp8Approximate), so it reports its error as a multiple of the tolerance, never hidden.
//
// Without cuDNN the row is there too, refusing every problem with cudnn_not_built_message().
//
// Everything in this header is plain C++ (no cuDNN), so the CPU tests use it in every build.
#pragma once

#include <cstdint>

#include "common/registry.hpp"

namespace ladder::peers {

// ---- The scales ---------------------------------------------------------------------------------
// The graph's six per-tensor fp32 factors (frontend 1.32: Graph::sdpa_fp8 in graph_interface.h, the
// composite node's FP8 branch in node/scaled_dot_product_flash_attention.h, node/matmul_fp8.h):
//   scores = (Q8 K8ᵀ) · softmax_scale · descale_q · descale_k      (Q8 = the bytes' values)
//   S      = softmax(scores)                         cuDNN's S is the softmax output, FA's P
//   S8     = e4m3(S · scale_s)
//   O8     = e4m3((S8 V8) · descale_s · descale_v · scale_o),   amax_O = max |(S8 V8) · descale_s · descale_v|
// Our choices, all powers of two (so every product above and the widening below are exact):
//   descale_q, descale_k, descale_v   the harness's (AttentionArgs::q_descale, ...)
//   scale_s = 2^8, descale_s = 2^-8   S lies in [0, 1]; cuDNN's documented rule, 448 / amax rounded
//                                     down to a power of two, gives 256 for amax = 1; it is also
//                                     the harness's low-precision reference's P offset (kE4M3PScale)
//   scale_o = 1 / (2 · descale_v)     O is a convex combination of V's rows, so |O| <= max |V| <=
//                                     448 · descale_v; the factor 2 is headroom for S8's roundings
//                                     (each up to 2^-4 relative, so Σ_j S8_j · descale_s may exceed
//                                     1), so O8 stays below e4m3's 448. A binade lower costs nothing
//                                     but at O8's subnormals, |O| below 2^-6 · 2 · descale_v
inline constexpr float kCudnnFp8ScaleS = 256.0f;  // == kE4M3PScale (common/dtype.hpp)
inline constexpr float kCudnnFp8OHeadroom = 2.0f;

struct CudnnFp8Scales {
  float descale_q = 1.f, descale_k = 1.f, descale_v = 1.f;
  float descale_s = 1.f, scale_s = 1.f, scale_o = 1.f;
  // What a byte of cuDNN's O is multiplied by to give O's value: 1 / scale_o = 2 · descale_v.
  float o_descale() const { return 1.0f / scale_o; }
  bool operator==(const CudnnFp8Scales&) const = default;
};
// From the harness's descales (each a power of two, common/dtype.hpp's quantization). Throws
// std::invalid_argument for a descale that is not a positive, finite power of two (every product
// above would then round, and the row would measure our arithmetic, not cuDNN's).
CudnnFp8Scales cudnn_fp8_scales(float q_descale, float k_descale, float v_descale);
// O's value from one byte of cuDNN's e4m3 O: from_e4m3(byte) · o_descale(), exactly (a power of
// two times a 4-significant-bit value), and exactly a bf16. The widening kernel computes the same.
float cudnn_fp8_o_value(std::uint8_t byte, const CudnnFp8Scales& scales);

// ---- The row ------------------------------------------------------------------------------------
// The row's Variant::approximate: why its error exceeds the bf16 pass rule's tolerance.
inline constexpr const char* kCudnnFp8Approximate =
    "cuDNN on Hopper writes O in e4m3 (3 fraction bits), widened to bf16 exactly";

// The variant 99/cudnn_fp8 (defined in cudnn_fp8.cpp, with cuDNN and without), which
// cudnn_attention.cpp adds to step 99.
Variant cudnn_fp8_variant();

}  // namespace ladder::peers
