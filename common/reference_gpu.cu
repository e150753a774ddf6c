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

// What the kernel needs of the shape (an AttentionShape holds host vectors: not for a kernel).
struct Geometry {
  int batch, heads, group, hkv, seqlen, kv_seqlen, head_dim;
  bool causal;
  std::int64_t rows, total_q;
  const int* cu_q;  // varlen: the prefix sums ([batch + 1], device); null when dense
  const int* cu_k;
};

// Where query row `row` (RowIndex::row's numbering) and the keys it attends lie.
struct RowPlace {
  std::int64_t k_head;      // element offset of its K/V head's key 0
  std::int64_t key_stride;  // elements from key j to key j + 1
  std::int64_t lse;         // its index in the LSE (lse_index)
  int n_keys;               // the keys it sees
};
__device__ RowPlace place(const Geometry& g, std::int64_t row) {
  RowPlace p;
  int i, nq, nk;
  if (!g.cu_q) {  // [B, H, N, D] against [B, Hkv, Nk, D]
    const std::int64_t bh = row / g.seqlen;
    const int b = int(bh / g.heads), hk = int(bh % g.heads) / g.group;
    i = int(row % g.seqlen);
    nq = g.seqlen;
    nk = g.kv_seqlen;
    p.k_head = (std::int64_t(b) * g.hkv + hk) * nk * g.head_dim;
    p.key_stride = g.head_dim;
    p.lse = row;
  } else {  // [total_q, H, D] against [total_k, Hkv, D]: find the sequence of the token
    const std::int64_t token = row / g.heads;
    const int h = int(row % g.heads);
    int lo = 0, hi = g.batch;  // cu_q[lo] <= token < cu_q[hi]
    while (hi - lo > 1) {
      const int mid = (lo + hi) / 2;
      if (g.cu_q[mid] <= token) lo = mid;
      else hi = mid;
    }
    i = int(token - g.cu_q[lo]);
    nq = g.cu_q[lo + 1] - g.cu_q[lo];
    nk = g.cu_k[lo + 1] - g.cu_k[lo];
    p.k_head = (std::int64_t(g.cu_k[lo]) * g.hkv + h / g.group) * g.head_dim;
    p.key_stride = std::int64_t(g.hkv) * g.head_dim;
    p.lse = std::int64_t(h) * g.total_q + token;
  }
  p.n_keys = g.causal ? min(nk, nk - nq + i + 1) : nk;  // causal aligned to the end
  return p;
}

// The online softmax in fp64, key by key: the same result as two passes, to rounding in the
// last bits of a double, far below any fp16 or bf16 tolerance.
template <class Element>
__global__ void forward_fp64_kernel(Geometry g, const std::uint16_t* q, const std::uint16_t* k,
                                    const std::uint16_t* v, const std::uint16_t* d_o,
                                    ForwardForBackwardDevice out) {
  const int lane = threadIdx.x % kWarp;
  const std::int64_t row = std::int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
  if (row >= g.rows) return;
  const int d = g.head_dim;
  const RowPlace at = place(g, row);
  const double scale = 1.0 / sqrt(double(d));

  double q_reg[kMaxPerLane], o[kMaxPerLane];
  for (int c = 0; c < kMaxPerLane; ++c) {
    const int t = lane + kWarp * c;
    q_reg[c] = t < d ? widen<Element>(q[row * d + t]) : 0.0;
    o[c] = 0.0;
  }
  double m = -INFINITY, l = 0.0;
  for (int j = 0; j < at.n_keys; ++j) {
    const std::int64_t key = at.k_head + std::int64_t(j) * at.key_stride;
    double partial = 0.0;
    for (int c = 0; c < kMaxPerLane; ++c) {
      const int t = lane + kWarp * c;
      if (t < d) partial += q_reg[c] * widen<Element>(k[key + t]);
    }
    const double score = warp_sum(partial) * scale;
    const double m_new = fmax(m, score);
    const double correction = exp(m - m_new);  // exp(−inf) = 0 on the first key
    const double p = exp(score - m_new);
    l = l * correction + p;
    for (int c = 0; c < kMaxPerLane; ++c) {
      const int t = lane + kWarp * c;
      if (t < d) o[c] = o[c] * correction + p * widen<Element>(v[key + t]);
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
    out.lse[at.lse] = float(lse);
    out.delta64[row] = delta;
  }
}

}  // namespace

void forward_for_backward_gpu(const AttentionShape& s, const std::uint16_t* q, const std::uint16_t* k,
                              const std::uint16_t* v, const std::uint16_t* d_o,
                              const ForwardForBackwardDevice& out, cudaStream_t stream,
                              const int* cu_seqlens_q, const int* cu_seqlens_k) {
  if (s.head_dim > kMaxHeadDim)
    throw std::invalid_argument("the fp64 forward of the backward reference takes D <= 256");
  if (s.paged())
    throw std::invalid_argument("the fp64 forward of the backward reference takes a contiguous K/V, not pages");
  if (s.varlen() && (!cu_seqlens_q || !cu_seqlens_k))
    throw std::invalid_argument("the fp64 forward of a variable-length batch needs the device cu_seqlens_q and cu_seqlens_k");
  const Geometry g{s.batch, s.heads, s.group(), s.hkv(), s.seqlen, s.kv_len(0), s.head_dim, s.causal,
                   s.rows(), s.total_q(), s.varlen() ? cu_seqlens_q : nullptr,
                   s.varlen() ? cu_seqlens_k : nullptr};
  const dim3 grid(unsigned(ceil_div(s.rows(), std::int64_t(kRowsPerBlock))));
  const dim3 block(kRowsPerBlock * kWarp);
  if (s.dtype == DType::F16)
    forward_fp64_kernel<__half><<<grid, block, 0, stream>>>(g, q, k, v, d_o, out);
  else if (s.dtype == DType::BF16)
    forward_fp64_kernel<__nv_bfloat16><<<grid, block, 0, stream>>>(g, q, k, v, d_o, out);
  else
    throw std::invalid_argument("the fp64 forward of the backward reference reads 16-bit inputs; "
                                "FP8 is forward-only (Part VIII)");
  CUDA_CHECK_LAUNCH("forward_fp64_kernel");
}

}  // namespace ladder
