// Lab 08 — the split-KV combine. YOUR FILE: three answers. Fill in the TODOs, then
//   labs/check.sh L08
// The checker runs TODO 1 and 2 in a CPU combine first (no GPU needed), then the kernel
// (combine_kernel.cu, given) that calls your combine_row on the GPU.
// (README.md has the puzzle; solution/ has the answers, for after you tried.)
//
// What you receive for one query row (lab08.hpp has the layout): S splits, each with its own
// output o_s, already normalized by its own softmax sum, and its log-sum-exp lse_s = log Σ_{j in s}
// exp(x_j). A split with no key has lse_s = −inf and an o_s you must not read.
// What you return: the row's attention over all its keys and its log-sum-exp — exactly, not an
// approximation. Logits can be in the thousands: exp(lse_s) overflows fp32 past 88.7.
#pragma once

#include <cuda_runtime.h>  // __host__ __device__

#include <cmath>

#include "labs/L08_split_kv_combine/lab08.hpp"

namespace combine {

// TODO 1: log Σ_s exp(lse[s]) over `splits` values, computed so that it neither overflows nor
// underflows (|lse| up to thousands), and −inf (not NaN) when every lse[s] is −inf.
__host__ __device__ inline float merged_lse(const float* lse, int splits) {
  return 0.f;  // TODO
}

// TODO 2: the weight of split s in the merged output, from its lse_s and the merged `lse` of
// TODO 1: o = Σ_s weight_s · o_s. What is it for a split with no key, and for a row with none?
__host__ __device__ inline float split_weight(float lse_s, float lse) {
  return 0.f;  // TODO
}

#ifdef __CUDACC__
// TODO 3: one row, by one thread block of lab08::kThreads threads (every thread calls this).
//   o_part    [splits][head_dim]  this row's partial outputs (global memory)
//   lse_part  [splits]            their log-sum-exps
//   o         [head_dim]          write the merged output (0 for a row with no key)
//   lse_out   one float           write the merged log-sum-exp
//   s_weight  [lab08::kMaxSplits] shared memory, yours to use (splits <= kMaxSplits <= kThreads)
// Use your TODO 1 and 2. Never let an unread o_s reach the sum: 0 · NaN is NaN.
__device__ inline void combine_row(const float* o_part, const float* lse_part, int splits,
                                   int head_dim, float* o, float* lse_out, float* s_weight) {
  // TODO
}
#endif

}  // namespace combine
