// Lab 08 — the split-KV combine: the reference answers (look after you tried).
#pragma once

#include <cuda_runtime.h>  // __host__ __device__

#include <cmath>

#include "labs/L08_split_kv_combine/lab08.hpp"

namespace combine {

// log Σ exp(lse_s) = m + log Σ exp(lse_s − m) with m = max lse_s: every term is <= 1 and the
// largest is exactly 1, so the sum is in [1, S] — no overflow, no underflow of the whole sum.
// All −inf: m = −inf and lse_s − m = −inf − (−inf) = NaN, so that case returns before it.
__host__ __device__ inline float merged_lse(const float* lse, int splits) {
  float m = -INFINITY;
  for (int s = 0; s < splits; ++s) m = fmaxf(m, lse[s]);
  if (m == -INFINITY) return -INFINITY;  // no split saw a key: log 0
  float sum = 0.f;
  for (int s = 0; s < splits; ++s) sum += expf(lse[s] - m);  // exp(−inf) = 0 for empty splits
  return m + logf(sum);
}

// o = Σ_j exp(x_j − lse) v_j = Σ_s exp(lse_s − lse) · o_s, since split s's normalized o_s is
// Σ_{j in s} exp(x_j − lse_s) v_j. An empty split (lse_s = −inf) weighs exp(−inf) = 0; a row with
// no key at all (lse = −inf too) would give exp(NaN): it weighs 0 as well.
__host__ __device__ inline float split_weight(float lse_s, float lse) {
  if (lse_s == -INFINITY) return 0.f;
  return expf(lse_s - lse);
}

#ifdef __CUDACC__
// Thread 0 merges the LSEs (at most 64 of them: one thread is enough, and every other thread
// needs the result), the first `splits` threads compute one weight each, then every thread sums
// its columns of o over the splits whose weight is not 0 — skipping the others, so that an
// unwritten (NaN) o_s is never multiplied by its zero weight.
__device__ inline void combine_row(const float* o_part, const float* lse_part, int splits,
                                   int head_dim, float* o, float* lse_out, float* s_weight) {
  __shared__ float s_lse;
  if (threadIdx.x == 0) {
    s_lse = merged_lse(lse_part, splits);
    *lse_out = s_lse;
  }
  __syncthreads();
  if (threadIdx.x < splits) s_weight[threadIdx.x] = split_weight(lse_part[threadIdx.x], s_lse);
  __syncthreads();
  for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
    float acc = 0.f;
    for (int s = 0; s < splits; ++s)
      if (s_weight[s] != 0.f) acc += s_weight[s] * o_part[s * head_dim + d];
    o[d] = acc;
  }
}
#endif

}  // namespace combine
