// The forward pass a backward problem starts from, in fp64 on the GPU.
//
// A backward kernel receives the forward's O (in the element type) and its log-sum-exp (fp32),
// and the fp64 reference of dK and dV needs the exact LSE_i and D_i of every query row: a full
// forward, B·H·N²·D multiply-adds, which on the CPU takes minutes at the benchmark sizes. This
// kernel is the CPU's attention_row_fp64 on the GPU, one warp per row and nothing clever, so that
// it is obviously right; the runner checks it against the CPU's fp64 forward on every sampled row
// of every problem (and a GPU test at small sizes on every row).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "common/problem.hpp"

namespace ladder {

struct ForwardForBackwardDevice {
  std::uint16_t* o;  // [B, H, N, D]: O rounded to the element type (what a forward stores)
  float* lse;        // [B, H, N]: LSE rounded to fp32 (what a forward stores)
  double* lse64;     // [B, H, N]: the exact LSE
  double* delta64;   // [B, H, N]: D_i = Σ_d dO_id O_id with the exact O
};

// q, k, v, d_o: [B, H, N, D] in shape.dtype (as bits). Checks the launch.
void forward_for_backward_gpu(const AttentionShape& shape, const std::uint16_t* q,
                              const std::uint16_t* k, const std::uint16_t* v,
                              const std::uint16_t* d_o, const ForwardForBackwardDevice& out,
                              cudaStream_t stream);

}  // namespace ladder
