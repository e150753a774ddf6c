// cuDNN's fused attention backward as the peer row of the backward track: the same Q, K, V, O,
// dO and log-sum-exp, the same poisoned dQ, dK, dV, the same fp64 check and the same timing as
// every backward lesson, in the same process.
//
// The peer registers itself as step 98 "backward_peers" (track backward, every variant a peer) from
// cudnn_attention_backward.cpp. When the build found cuDNN and the cuDNN frontend
// (common/peers/cudnn.cmake) its variant runs cuDNN's SDPA backward graph:
//
//   98/cudnn   dQ, dK, dV from Q, K, V, O, dO and the forward's stats (cuDNN's name for the
//              log-sum-exp: natural log of the scaled logits, [B, H, N, 1] fp32, which is the
//              harness's [B, H, N] layout). cuDNN's default (non-deterministic) algorithm, the one
//              PyTorch's cuDNN backend runs unless deterministic algorithms are asked for.
//
// Otherwise it registers one variant, 98/cudnn, that every problem refuses with
// cudnn_not_built_message(), like step 99.
//
// Everything in this header is plain C++ (no cuDNN), so the CPU tests use it in every build.
#pragma once

#include <compare>
#include <cstdint>
#include <string>

#include "common/peers/cudnn_attention.hpp"  // BuildOnceCache, LibraryRefusal, the "not built" note
#include "common/problem.hpp"

namespace ladder::peers {

// What a built backward graph bakes in: dims, strides, mask, scale, element type, and the device
// whose handle built it. Pointers are bound at each execution.
struct CudnnBackwardKey {
  int device = 0;
  int batch = 0, heads = 0, seqlen = 0, head_dim = 0;
  bool causal = false;
  DType dtype = DType::F16;       // of Q, K, V, O, dO and dQ, dK, dV
  std::uint32_t scale_bits = 0;   // the softmax scale's float bits (1/sqrt(D) in the harness)
  auto operator<=>(const CudnnBackwardKey&) const = default;
};
CudnnBackwardKey cudnn_backward_key(const AttentionShape& shape, float softmax_scale, int device);
// "backward B=4 H=8 N=4096 D=64 causal fp16, scale 0.125, device 0"
std::string to_string(const CudnnBackwardKey& key);

}  // namespace ladder::peers
