// The host side of Part II's mma.sync steps (05, 06, 30): the launch of one instantiation, the
// dispatch over the head dimension and the mask, the kernel list for the harness's resource table,
// and the registration every variant of these steps shares. The kernels run fp16 only, for
// D = 64 and 128. A step's kernels differ in their parameters, grids and names, so a step hands
// them over as a struct with two static members:
//
//   struct Step {
//     template <class C, bool kCausal> static void launch(const AttentionArgs&, cudaStream_t);
//     template <class C> static std::vector<KernelInfo> kernels(const char* variant_name);
//   };
//   ladder::mma::variant<Step, Config64, Config128>("name", "description")
//
// where launch() calls launch_kernel<C>(my_kernel<C, kCausal>, grid, ...) and kernels() returns
// kernel_pair<C>(...). Included by .cu files only (it launches with <<< >>>).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <string>
#include <type_traits>
#include <vector>

#include "common/check.hpp"
#include "common/dispatch.hpp"
#include "common/math.hpp"
#include "common/registry.hpp"

namespace ladder::mma {

inline constexpr std::size_t kDefaultDynamicSmem = 48 * 1024;  // above this a kernel must opt in

// grid (ceil(N / kBlockM), B·H): blockIdx.x is the fastest-moving index, so the CTAs that run
// together share one head's K and V through L2.
template <class C>
dim3 query_block_grid(const AttentionShape& sh) {
  return dim3(ceil_div(sh.seqlen, C::kBlockM), sh.batch * sh.heads);
}

// One launch of `kernel` with C's threads and dynamic shared memory (opting in above 48 KB),
// checked: a failure names `kernel_name`.
template <class C, class... Params, class... Args>
void launch_kernel(void (*kernel)(Params...), dim3 grid, cudaStream_t stream,
                   const char* kernel_name, Args... args) {
  if constexpr (C::kSmemBytes > kDefaultDynamicSmem)
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    int(C::kSmemBytes)));
  kernel<<<grid, C::kThreads, C::kSmemBytes, stream>>>(args...);
  CUDA_CHECK_LAUNCH_OF(kernel_name);
}

// The non-causal and the causal kernel of one Config, for the resource table.
template <class C, class... Params>
std::vector<KernelInfo> kernel_pair(const std::string& name, const std::string& causal_name,
                                    void (*plain)(Params...), void (*causal)(Params...)) {
  return {ladder::kernel(name, plain, C::kThreads, C::kSmemBytes).when_causal(false),
          ladder::kernel(causal_name, causal, C::kThreads, C::kSmemBytes).when_causal(true)};
}

// The problem's head dimension picks C64 or C128, its mask the kernel's kCausal.
template <class Step, class C64, class C128>
void launch(const AttentionArgs& a, cudaStream_t stream) {
  ladder::dispatch_head_dim<64, 128>(a.shape.head_dim, [&]<int kHeadDim>() {
    using C = std::conditional_t<kHeadDim == 64, C64, C128>;
    a.shape.causal ? Step::template launch<C, true>(a, stream)
                   : Step::template launch<C, false>(a, stream);
  });
}

// A variant: the kernels of C64 at D = 64 and of C128 at D = 128, B·H on the grid's y.
template <class Step, class C64, class C128>
Variant variant(const char* name, const char* description) {
  static_assert(C64::kHeadDim == 64 && C128::kHeadDim == 128);
  return attention_variant(name, description, launch<Step, C64, C128>)
      .needs_sm(80)  // cp.async, ldmatrix, mma.sync.m16n8k16
      .for_head_dims({64, 128})
      .batch_heads_on_grid_yz()
      .with_kernels([name](int head_dim) {
        return head_dim == 128 ? Step::template kernels<C128>(name)
                               : Step::template kernels<C64>(name);
      });
}

}  // namespace ladder::mma
