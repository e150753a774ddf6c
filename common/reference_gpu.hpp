// The forward pass a backward problem starts from, in fp64 on the GPU.
//
// A backward kernel receives the forward's O (in the element type) and its log-sum-exp (fp32),
// and the fp64 reference of dK and dV needs the exact LSE_i and D_i of every query row: a full
// forward, B·H·N²·D multiply-adds, which on the CPU takes minutes at the benchmark sizes. This
// kernel is the CPU's attention_row_fp64 on the GPU, one warp per row and nothing clever, so that
// it is obviously right; the runner checks it against the CPU's fp64 forward on every sampled row
// of every problem (and a GPU test at small sizes on every row).
//
// Every layout of a backward problem (common/problem.hpp): dense, GQA (K/V head h / group) and
// packed variable-length (per sequence, causal aligned as the forward's).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "common/problem.hpp"

namespace ladder {

struct ForwardForBackwardDevice {
  std::uint16_t* o;  // Q's layout: O rounded to the element type (what a forward stores)
  float* lse;        // the LSE's layout (lse_index): rounded to fp32 (what a forward stores)
  double* lse64;     // shape.rows(), by query row (RowIndex::row): the exact LSE
  double* delta64;   // shape.rows(), by query row: D_i = Σ_d dO_id O_id with the exact O
};

// q, d_o in Q's layout and k, v in K's (common/problem.hpp), in shape.dtype (as bits);
// cu_seqlens_q and cu_seqlens_k the device prefix sums of a variable-length batch ([B + 1]; null
// when dense). A paged shape is refused (std::invalid_argument); so is a varlen one without the
// prefix sums. Checks the launch.
void forward_for_backward_gpu(const AttentionShape& shape, const std::uint16_t* q,
                              const std::uint16_t* k, const std::uint16_t* v,
                              const std::uint16_t* d_o, const ForwardForBackwardDevice& out,
                              cudaStream_t stream, const int* cu_seqlens_q = nullptr,
                              const int* cu_seqlens_k = nullptr);

}  // namespace ladder
