#include "common/reference_gpu.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <stdexcept>
#include <type_traits>

#include "common/check.hpp"

namespace ladder {
namespace {

constexpr int kWarp = 32;
constexpr int kRowsPerBlock = 4;                // one warp per query row
constexpr int kMaxHeadDim = 256;
constexpr int kMaxPerLane = kMaxHeadDim / kWarp;  // columns t = lane + 32·c

template <class Element>
__device__ double widen(std::uint16_t bits) {
  if constexpr (std::is_same_v<Element, __half>)
    return double(__half2float(__ushort_as_half(bits)));
  else
    return double(__bfloat162float(__ushort_as_bfloat16(bits)));
}
template <class Element>
__device__ std::uint16_t narrow(double x) {
  if constexpr (std::is_same_v<Element, __half>)
    return __half_as_ushort(__double2half(x));
  else
    return __bfloat16_as_ushort(__double2bfloat16(x));
}

__device__ double warp_sum(double x) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

// The online softmax in fp64, key by key: the same result as two passes, to rounding in the
// last bits of a double, far below any fp16 or bf16 tolerance.
template <class Element>
__global__ void forward_fp64_kernel(AttentionShape s, const std::uint16_t* q, const std::uint16_t* k,
                                    const std::uint16_t* v, const std::uint16_t* d_o,
                                    ForwardForBackwardDevice out) {
  const int lane = threadIdx.x % kWarp;
  const std::int64_t row = std::int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
  if (row >= std::int64_t(s.batch) * s.heads * s.seqlen) return;
  const int d = s.head_dim;
  const int i = int(row % s.seqlen);
  const std::int64_t head = (row / s.seqlen) * s.seqlen * d;
  const double scale = 1.0 / sqrt(double(d));

  double q_reg[kMaxPerLane], o[kMaxPerLane];
  for (int c = 0; c < kMaxPerLane; ++c) {
    const int t = lane + kWarp * c;
    q_reg[c] = t < d ? widen<Element>(q[row * d + t]) : 0.0;
    o[c] = 0.0;
  }
  double m = -INFINITY, l = 0.0;
  const int n_keys = s.causal ? i + 1 : s.seqlen;
  for (int j = 0; j < n_keys; ++j) {
    double partial = 0.0;
    for (int c = 0; c < kMaxPerLane; ++c) {
      const int t = lane + kWarp * c;
      if (t < d) partial += q_reg[c] * widen<Element>(k[head + std::int64_t(j) * d + t]);
    }
    const double score = warp_sum(partial) * scale;
    const double m_new = fmax(m, score);
    const double correction = exp(m - m_new);  // exp(−inf) = 0 on the first key
    const double p = exp(score - m_new);
    l = l * correction + p;
    for (int c = 0; c < kMaxPerLane; ++c) {
      const int t = lane + kWarp * c;
      if (t < d) o[c] = o[c] * correction + p * widen<Element>(v[head + std::int64_t(j) * d + t]);
    }
    m = m_new;
  }
  double delta = 0.0;
  for (int c = 0; c < kMaxPerLane; ++c) {
    const int t = lane + kWarp * c;
    if (t < d) {
      o[c] /= l;
      out.o[row * d + t] = narrow<Element>(o[c]);
      delta += widen<Element>(d_o[row * d + t]) * o[c];
    }
  }
  delta = warp_sum(delta);
  if (lane == 0) {
    const double lse = m + log(l);
    out.lse64[row] = lse;
    out.lse[row] = float(lse);
    out.delta64[row] = delta;
  }
}

}  // namespace

void forward_for_backward_gpu(const AttentionShape& s, const std::uint16_t* q, const std::uint16_t* k,
                              const std::uint16_t* v, const std::uint16_t* d_o,
                              const ForwardForBackwardDevice& out, cudaStream_t stream) {
  if (s.head_dim > kMaxHeadDim)
    throw std::invalid_argument("the fp64 forward of the backward reference takes D <= 256");
  const dim3 grid(unsigned(ceil_div(s.rows(), std::int64_t(kRowsPerBlock))));
  const dim3 block(kRowsPerBlock * kWarp);
  if (s.dtype == DType::F16)
    forward_fp64_kernel<__half><<<grid, block, 0, stream>>>(s, q, k, v, d_o, out);
  else
    forward_fp64_kernel<__nv_bfloat16><<<grid, block, 0, stream>>>(s, q, k, v, d_o, out);
  CUDA_CHECK_LAUNCH("forward_fp64_kernel");
}

}  // namespace ladder
