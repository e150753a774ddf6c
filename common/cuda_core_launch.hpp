// The host side of Part II's CUDA-core attention steps (03 and 04). Each instantiates its kernel
// for D = 64 and 128 and for the Br of each variant, and describes one instantiation as a class
// template:
//
//   template <int kHeadDim, int kBlockM>
//   struct Fa1 {
//     static void launch(const AttentionArgs& a, cudaStream_t stream);  // its grid and arguments
//     static KernelInfo info();  // name, function, threads and shared memory, for the report
//   };
//   ...attention_variant("br64", "...", cuda_core::launch<Fa1, 64>)
//          .with_kernels(cuda_core::kernels<Fa1, 64>)
//
// Included by .cu files only (it launches with <<< >>>).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <string>
#include <vector>

#include "common/check.hpp"
#include "common/device/cuda_core_attention.cuh"
#include "common/dispatch.hpp"
#include "common/registry.hpp"

namespace ladder::cuda_core {

// One launch of kThreads threads per block with `smem` bytes of dynamic shared memory. Above the
// 48 KB a kernel gets without asking it must opt in, so the limit is raised first.
template <class... Params, class... Args>
void launch_kernel(const char* name, void (*kernel)(Params...), dim3 grid, std::size_t smem,
                   cudaStream_t stream, Args... args) {
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  kernel<<<grid, kThreads, smem, stream>>>(args...);
  CUDA_CHECK_LAUNCH_OF(name);
}

// A variant's launch: the instantiation for the problem's head dimension.
template <template <int, int> class Kernel, int kBlockM>
void launch(const AttentionArgs& a, cudaStream_t stream) {
  dispatch_head_dim<64, 128>(a.shape.head_dim,
                             [&]<int kHeadDim>() { Kernel<kHeadDim, kBlockM>::launch(a, stream); });
}

// The kernel that launch runs at a head dimension, for the harness's resource report.
template <template <int, int> class Kernel, int kBlockM>
std::vector<KernelInfo> kernels(int head_dim) {
  return {head_dim == 128 ? Kernel<128, kBlockM>::info() : Kernel<64, kBlockM>::info()};
}

}  // namespace ladder::cuda_core
