// The two kernels of cudnn_varlen.hpp. Neither is a lesson: they are the glue a caller of cuDNN
// 9.19 writes between FlashAttention's varlen interface and cuDNN's, and they run inside the cuDNN
// row's timed launch because a caller pays for them (cuDNN 9.24 takes cu_seqlens directly).
#include "common/peers/cudnn_varlen.hpp"

#include <algorithm>

#include "common/check.hpp"

namespace ladder::peers {

namespace {

constexpr int kThreads = 256;

// One thread per entry b of the [batch + 1] offsets (and of the [batch] lengths, b < batch).
__global__ void ragged_offsets_kernel(RaggedOffsets r) {
  const int b = blockIdx.x * blockDim.x + threadIdx.x;
  if (b > r.batch) return;
  const std::int64_t q_start = r.cu_seqlens_q[b], k_start = r.cu_seqlens_k[b];
  r.q_offset[b] = q_start * r.q_row;
  r.kv_offset[b] = k_start * r.kv_row;
  if (r.stats_offset) r.stats_offset[b] = q_start * r.stats_row;
  if (b < r.batch) {
    r.seq_len_q[b] = r.cu_seqlens_q[b + 1] - r.cu_seqlens_q[b];
    r.seq_len_kv[b] = r.cu_seqlens_k[b + 1] - r.cu_seqlens_k[b];
  }
}

// A grid-stride transpose of a [total_q, heads] float matrix; reads are coalesced, writes stride
// by total_q across a warp's heads. It moves 8·H·total_q bytes, small beside Q and O.
__global__ void lse_head_major_kernel(const float* __restrict__ stats, float* __restrict__ lse,
                                      std::int64_t total_q, int heads) {
  const std::int64_t n = total_q * heads;
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int64_t t = i / heads;
    const int h = int(i - t * heads);
    lse[h * total_q + t] = stats[i];
  }
}

}  // namespace

void launch_ragged_offsets(const RaggedOffsets& r, cudaStream_t stream) {
  const int entries = r.batch + 1;
  ragged_offsets_kernel<<<(entries + kThreads - 1) / kThreads, kThreads, 0, stream>>>(r);
  CUDA_CHECK_LAUNCH("ragged_offsets_kernel (cuDNN peer's varlen offsets)");
}

void launch_lse_head_major(const float* stats, float* lse, std::int64_t total_q, int heads,
                           cudaStream_t stream) {
  constexpr std::int64_t kMaxBlocks = 4096;  // grid-stride beyond this
  const std::int64_t n = total_q * heads;
  const int blocks = int(std::min<std::int64_t>(kMaxBlocks, (n + kThreads - 1) / kThreads));
  if (blocks == 0) return;
  lse_head_major_kernel<<<blocks, kThreads, 0, stream>>>(stats, lse, total_q, heads);
  CUDA_CHECK_LAUNCH("lse_head_major_kernel (cuDNN peer's varlen LSE)");
}

}  // namespace ladder::peers
