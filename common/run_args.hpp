// The launch arguments of an attention or backward variant, built one way for both of their
// callers: the runner (common/run_attention.cpp, common/run_backward.cpp), on the buffers it owns,
// and the C interface (common/apps/capi.cpp), on the caller's tensors.
#pragma once

#include <cuda_fp16.h>

#include <cstddef>

#include "common/registry.hpp"

namespace ladder {

// The device a launch runs on, as a kernel sized to the GPU reads it (AttentionArgs::sm_count,
// l2_bytes): a persistent grid, an L2-sized schedule, a split-KV plan.
struct LaunchDevice {
  int sm_count = 0;
  std::size_t l2_bytes = 0;
};

// Part VI's device pointers (AttentionArgs says what each holds), null where the property is off.
struct ServingPointers {
  const int* cu_seqlens_q = nullptr;
  const int* cu_seqlens_k = nullptr;
  const int* block_table = nullptr;
};

// Q, K, V and O in the problem's element type: they travel as fp16 pointers whatever the dtype
// (AttentionArgs::as<Element>() reads them as the right one; an fp8 problem's as_fp8(): e4m3 bytes
// in, bf16 out). The fp8 descales stay 1 here: the runner, which quantized the inputs, sets them.
inline AttentionArgs attention_args(const AttentionShape& shape, const void* q, const void* k,
                                    const void* v, void* o, float* lse, void* workspace,
                                    LaunchDevice device, ServingPointers serving = {}) {
  AttentionArgs args{shape,
                     shape.softmax_scale(),
                     static_cast<const __half*>(q),
                     static_cast<const __half*>(k),
                     static_cast<const __half*>(v),
                     static_cast<__half*>(o),
                     lse,
                     workspace,
                     device.sm_count,
                     device.l2_bytes};
  args.cu_seqlens_q = serving.cu_seqlens_q;
  args.cu_seqlens_k = serving.cu_seqlens_k;
  args.block_table = serving.block_table;
  return args;
}

// The backward's inputs (Q, K, V, the forward's O and LSE, dO) and its gradients dQ, dK, dV; a
// variable-length batch's device prefix sums (BackwardArgs says what each holds), null when dense.
inline BackwardArgs backward_args(const AttentionShape& shape, const void* q, const void* k,
                                  const void* v, const void* o, const void* d_o, const float* lse,
                                  void* dq, void* dk, void* dv, void* workspace,
                                  LaunchDevice device, const int* cu_seqlens_q = nullptr,
                                  const int* cu_seqlens_k = nullptr) {
  BackwardArgs args{shape,
                    shape.softmax_scale(),
                    static_cast<const __half*>(q),
                    static_cast<const __half*>(k),
                    static_cast<const __half*>(v),
                    static_cast<const __half*>(o),
                    static_cast<const __half*>(d_o),
                    lse,
                    static_cast<__half*>(dq),
                    static_cast<__half*>(dk),
                    static_cast<__half*>(dv),
                    workspace,
                    device.sm_count,
                    device.l2_bytes};
  args.cu_seqlens_q = cu_seqlens_q;
  args.cu_seqlens_k = cu_seqlens_k;
  return args;
}

}  // namespace ladder
