// What the cuDNN forward peer (cudnn_attention.cpp) must compute on the GPU to hand cuDNN 9.19 a
// variable-length batch: cuDNN takes per-sequence lengths and ragged offsets where the harness
// (like FlashAttention) gives cu_seqlens, and writes the log-sum-exp token-major where the
// harness keeps it head-major. Two small kernels, in cudnn_varlen.cu because the peer itself is
// host C++ compiled without nvcc; they need no cuDNN.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace ladder::peers {

// From cu_seqlens_q and cu_seqlens_k ([batch + 1], device) to what cuDNN's padding mask and
// ragged tensors read, all device arrays: seq_len_q[b] and seq_len_kv[b] ([batch], int32), and
// the ragged offsets in elements ([batch + 1], int64) of sequence b's first row in Q and O
// (cu_q[b]·q_row), in K and V (cu_k[b]·kv_row) and in the token-major stats (cu_q[b]·stats_row).
struct RaggedOffsets {
  const int* cu_seqlens_q = nullptr;
  const int* cu_seqlens_k = nullptr;
  int batch = 0;
  std::int64_t q_row = 0;      // elements of one token of Q (and O): H·D
  std::int64_t kv_row = 0;     // of one token of K (and V): Hkv·D
  std::int64_t stats_row = 0;  // of one token of the stats: H
  int* seq_len_q = nullptr;
  int* seq_len_kv = nullptr;
  std::int64_t* q_offset = nullptr;
  std::int64_t* kv_offset = nullptr;
  std::int64_t* stats_offset = nullptr;  // may be null (no stats)
};
void launch_ragged_offsets(const RaggedOffsets& r, cudaStream_t stream);

// lse[h · total_q + t] = stats[t · heads + h]: cuDNN's ragged stats ([total_q, H], the layout its
// own tests use) into the harness's varlen LSE ([H, total_q]).
void launch_lse_head_major(const float* stats, float* lse, std::int64_t total_q, int heads,
                           cudaStream_t stream);

}  // namespace ladder::peers
