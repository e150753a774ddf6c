// Step 00 — naive attention: the whole N×N score matrix goes through global memory.
//
//   S = Q Kᵀ · scale        (kernel 1, fp32, B·H·N² floats written to global memory)
//   P = softmax(S) per row   (kernel 2, in place)
//   O = P V                  (kernel 3, fp32 accumulation, fp16 output)
//
// This is the baseline every later step is measured against. Its cost is not arithmetic: for
// N = 4096 the score matrix of one head is 64 MiB, written once, read three times by the softmax,
// written again and read again by the product with V. The ledger printed under the table counts
// those bytes; FlashAttention's whole point is never to write them.
#include <cuda_fp16.h>

#include <cmath>

#include "common/check.hpp"
#include "common/registry.hpp"
#include "common/strings.hpp"

namespace {

using ladder::AttentionArgs;
using ladder::ceil_div;

// ---- Kernel 1: scores -----------------------------------------------------------------------
// One thread per score. A 16×16 block covers 16 query rows × 16 key rows of one (batch, head);
// every thread reads a full row of Q and a full row of K from global memory (no reuse through
// shared memory: that is step 01's lesson).
constexpr int kScoreTile = 16;

__global__ void scores_kernel(const __half* __restrict__ q, const __half* __restrict__ k,
                              float* __restrict__ s, int n, int d, float scale, bool causal) {
  const int col = blockIdx.x * kScoreTile + threadIdx.x;  // key index j
  const int row = blockIdx.y * kScoreTile + threadIdx.y;  // query index i
  const std::int64_t bh = blockIdx.z;
  if (row >= n || col >= n) return;

  const __half* q_row = q + (bh * n + row) * d;
  const __half* k_row = k + (bh * n + col) * d;
  float acc = 0.f;
  for (int t = 0; t < d; ++t) acc += __half2float(q_row[t]) * __half2float(k_row[t]);

  // A causal query i sees keys 0..i. Masked scores are −inf so that exp() makes them exactly 0;
  // every row keeps at least its diagonal, so no row is fully masked here.
  const bool masked = causal && col > row;
  s[(bh * n + row) * n + col] = masked ? -INFINITY : acc * scale;
}

// ---- Kernel 2: row softmax, in place --------------------------------------------------------
// One block per row. Three passes over the row: the maximum (subtracted so exp() cannot
// overflow), the sum of exponentials, and the normalized write. Each pass is a block reduction
// through shared memory.
constexpr int kSoftmaxThreads = 256;

template <typename Op>
__device__ float block_reduce(float value, float* scratch, Op op) {
  scratch[threadIdx.x] = value;
  __syncthreads();
  for (int stride = kSoftmaxThreads / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride)
      scratch[threadIdx.x] = op(scratch[threadIdx.x], scratch[threadIdx.x + stride]);
    __syncthreads();
  }
  const float result = scratch[0];
  __syncthreads();  // scratch is reused by the next reduction
  return result;
}

__global__ void softmax_kernel(float* __restrict__ s, int n) {
  __shared__ float scratch[kSoftmaxThreads];
  float* row = s + std::int64_t(blockIdx.x) * n;

  float local_max = -INFINITY;
  for (int j = threadIdx.x; j < n; j += kSoftmaxThreads) local_max = fmaxf(local_max, row[j]);
  const float row_max = block_reduce(local_max, scratch, [](float a, float b) { return fmaxf(a, b); });

  float local_sum = 0.f;
  for (int j = threadIdx.x; j < n; j += kSoftmaxThreads) local_sum += expf(row[j] - row_max);
  const float row_sum = block_reduce(local_sum, scratch, [](float a, float b) { return a + b; });

  const float inv_sum = 1.f / row_sum;
  for (int j = threadIdx.x; j < n; j += kSoftmaxThreads) row[j] = expf(row[j] - row_max) * inv_sum;
}

// ---- Kernel 3: O = P V ----------------------------------------------------------------------
// One thread per output element. Threads of a warp take consecutive columns of V, so V's rows
// are read coalesced; every thread walks a whole row of P.
constexpr int kOutCols = 64;
constexpr int kOutRows = 4;

__global__ void pv_kernel(const float* __restrict__ p, const __half* __restrict__ v,
                          __half* __restrict__ o, int n, int d) {
  const int col = blockIdx.x * kOutCols + threadIdx.x;
  const int row = blockIdx.y * kOutRows + threadIdx.y;
  const std::int64_t bh = blockIdx.z;
  if (row >= n || col >= d) return;

  const float* p_row = p + (bh * n + row) * n;
  const __half* v_head = v + bh * n * d;
  float acc = 0.f;
  for (int j = 0; j < n; ++j) acc += p_row[j] * __half2float(v_head[std::int64_t(j) * d + col]);
  o[(bh * n + row) * d + col] = __float2half(acc);
}

// ---- Host side ------------------------------------------------------------------------------
std::size_t score_bytes(const ladder::AttentionShape& s) {
  return std::size_t(s.batch) * s.heads * std::size_t(s.seqlen) * s.seqlen * sizeof(float);
}

void launch_naive(const AttentionArgs& a, cudaStream_t stream) {
  const auto& sh = a.shape;
  const int bh = sh.batch * sh.heads;
  auto* s = static_cast<float*>(a.workspace);

  dim3 score_grid(ceil_div(sh.seqlen, kScoreTile), ceil_div(sh.seqlen, kScoreTile), bh);
  scores_kernel<<<score_grid, dim3(kScoreTile, kScoreTile), 0, stream>>>(
      a.q, a.k, s, sh.seqlen, sh.head_dim, a.softmax_scale, sh.causal);
  CUDA_CHECK_LAUNCH("scores_kernel");

  softmax_kernel<<<unsigned(bh) * unsigned(sh.seqlen), kSoftmaxThreads, 0, stream>>>(s, sh.seqlen);
  CUDA_CHECK_LAUNCH("softmax_kernel");

  dim3 pv_grid(ceil_div(sh.head_dim, kOutCols), ceil_div(sh.seqlen, kOutRows), bh);
  pv_kernel<<<pv_grid, dim3(kOutCols, kOutRows), 0, stream>>>(s, a.v, a.o, sh.seqlen, sh.head_dim);
  CUDA_CHECK_LAUNCH("pv_kernel");
}

// The traffic of the N×N matrix alone, with Q, K and V assumed to come from cache: S written
// once; the softmax reads it three times and writes P; the product reads P once per 64 columns.
std::vector<std::string> ledger(const ladder::AttentionShape& s) {
  const double nn = double(score_bytes(s));
  const double passes = 1 + 3 + 1 + ceil_div(s.head_dim, kOutCols);
  const double bytes = nn * passes + ladder::min_bytes(s);
  return {
      ladder::strprintf("N×N score matrix: %.1f MiB per launch, moved %.0f times",
                        nn / (1 << 20), passes),
      ladder::strprintf("ledger: %.2f GB through global memory vs %.3f GB for Q, K, V and O alone",
                        bytes / 1e9, ladder::min_bytes(s) / 1e9),
      ladder::strprintf("arithmetic intensity: %.1f FLOP/byte (the H200 needs about 200 to be "
                        "compute-bound on its tensor cores)",
                        ladder::flops(s) / bytes),
  };
}

LADDER_REGISTER_STEP(
    ladder::attention_step(0, "naive_attention", "Naive attention: S, P and O through global memory")
        .with_notes(ledger)
        .add(ladder::attention_variant("naive", "three kernels, N×N fp32 scores in global memory",
                                       launch_naive)
                 .with_workspace(score_bytes)
                 .batch_heads_on_grid_yz()  // score_grid and pv_grid: B·H on z
                 .with_kernels({
                     ladder::kernel("scores_kernel", scores_kernel, kScoreTile * kScoreTile),
                     ladder::kernel("softmax_kernel", softmax_kernel, kSoftmaxThreads),
                     ladder::kernel("pv_kernel", pv_kernel, kOutCols * kOutRows),
                 })));

}  // namespace
