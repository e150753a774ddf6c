// The host side of Part III's kernels (steps 07-15, the B300 series): the launch of one
// instantiation, the dispatch over the head dimension and the mask, and a variant's registration
// with the kernels it launches. Every step of the part has the same host side; only the kernel
// and its Config differ, and a step hands them over as a struct:
//
//   struct B300 {
//     template <int kHeadDim, unsigned kFeatures> using config = Config<kHeadDim, kFeatures>;
//     template <class C, bool kCausal> static auto* kernel() { return b300_kernel<C, kCausal>; }
//     static constexpr bool kScaleLog2 = false;  // `scale` is softmax_scale (true: · log2 e)
//   };
//   LADDER_REGISTER_STEP(ladder::attention_step(...).add(ladder::part3::variant<B300, kV5>("v5", "...")));
//
// The kernel is b300_kernel<C, kCausal>(q, k, v, o, n, scale) on a grid of (ceil(N / C::kBlockM),
// B·H) CTAs of C::kThreads threads with C::kSmemBytes of dynamic shared memory, instantiated for
// D = 64 and 128 and both masks. Included by .cu files only (it launches with <<< >>>).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <stdexcept>
#include <vector>

#include "common/check.hpp"
#include "common/math.hpp"
#include "common/problem.hpp"
#include "common/registry.hpp"
#include "common/strings.hpp"

namespace ladder::part3 {

inline constexpr std::size_t kDefaultDynamicSmem = 48 * 1024;  // above this a kernel must opt in

template <class Kernel, class C, bool kCausal>
void launch_config(const AttentionArgs& a, cudaStream_t stream) {
  const auto& sh = a.shape;
  auto* kernel = Kernel::template kernel<C, kCausal>();
  if constexpr (C::kSmemBytes > kDefaultDynamicSmem)
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    int(C::kSmemBytes)));
  const dim3 grid(ceil_div(sh.seqlen, C::kBlockM), sh.batch * sh.heads);
  const float scale = Kernel::kScaleLog2 ? a.softmax_scale * kLog2e : a.softmax_scale;
  kernel<<<grid, C::kThreads, C::kSmemBytes, stream>>>(a.q, a.k, a.v, a.o, sh.seqlen, scale);
  CUDA_CHECK_LAUNCH("b300_kernel");
}

template <class Kernel, unsigned kFeatures>
void launch(const AttentionArgs& a, cudaStream_t stream) {
  const bool causal = a.shape.causal;
  switch (a.shape.head_dim) {
    case 64: {
      using C = typename Kernel::template config<64, kFeatures>;
      return causal ? launch_config<Kernel, C, true>(a, stream)
                    : launch_config<Kernel, C, false>(a, stream);
    }
    case 128: {
      using C = typename Kernel::template config<128, kFeatures>;
      return causal ? launch_config<Kernel, C, true>(a, stream)
                    : launch_config<Kernel, C, false>(a, stream);
    }
    default:
      throw std::invalid_argument(
          strprintf("b300 series: head_dim %d not instantiated", a.shape.head_dim));
  }
}

// The two kernels (non-causal, causal) of one Config, for the harness's resource table.
template <class Kernel, class C>
std::vector<KernelInfo> kernel_pair(const char* version) {
  const auto name = strprintf("%s<D=%d>", version, C::kHeadDim);
  return {ladder::kernel(name, Kernel::template kernel<C, false>(), C::kThreads, C::kSmemBytes)
              .when_causal(false),
          ladder::kernel(name + " causal", Kernel::template kernel<C, true>(), C::kThreads,
                         C::kSmemBytes)
              .when_causal(true)};
}

// One version of the series: the kernel at the feature bits kFeatures, for D = 64 and 128.
template <class Kernel, unsigned kFeatures>
Variant variant(const char* name, const char* description) {
  return attention_variant(name, description, launch<Kernel, kFeatures>)
      .needs_sm(80)  // cp.async, ldmatrix, mma.sync.m16n8k16
      .for_head_dims({64, 128})
      .batch_heads_on_grid_yz()  // grid (query blocks, B·H)
      .with_kernels([name](int head_dim) {
        return head_dim == 128
                   ? kernel_pair<Kernel, typename Kernel::template config<128, kFeatures>>(name)
                   : kernel_pair<Kernel, typename Kernel::template config<64, kFeatures>>(name);
      });
}

}  // namespace ladder::part3
