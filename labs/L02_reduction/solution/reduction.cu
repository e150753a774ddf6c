// Lab 02 — one sum, four ways. REFERENCE SOLUTION: try the starter (../reduction.cu) first.
//
//   out = x[0] + x[1] + … + x[n−1],   fp32
//
// A sum does one addition per 4 bytes read: every variant is judged by its GB/s beside a plain
// device-to-device copy of the same array (the checker's `copy` row).
//   atomic        (given) one atomicAdd per element, all on one address
//   smem_tree     a block sums its 256 elements through a tree in shared memory; repeated on the
//                 partials until one value is left
//   warp_shuffle  the same with the tree in registers (__shfl_down_sync), one barrier per block
//   two_level     a grid sized to the GPU: each thread first sums many elements in a register
//                 (grid-stride loop), then one block sums the few hundred partials
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "common/check.hpp"
#include "common/registry.hpp"

namespace {

constexpr int kLabStep = 52;
constexpr int kThreads = 256;
constexpr int kWarpSize = 32;
constexpr int kWarps = kThreads / kWarpSize;
constexpr unsigned kFullMask = 0xffffffffu;

__device__ std::int64_t global_thread() { return std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; }

// ---- Given: one atomic per element ------------------------------------------------------------
__global__ void __launch_bounds__(kThreads)
    atomic_sum_kernel(const float* __restrict__ x, float* __restrict__ out, std::int64_t n) {
  const std::int64_t i = global_thread();
  if (i < n) atomicAdd(out, x[i]);
}

// ---- 1. A tree in shared memory -------------------------------------------------------------
// Sequential addressing: at each level the first `stride` threads add the upper half onto the
// lower half, so the busy threads stay packed in whole warps and the reads are conflict-free.
__global__ void __launch_bounds__(kThreads)
    tree_sum_kernel(const float* __restrict__ x, float* __restrict__ partials, std::int64_t n) {
  __shared__ float sdata[kThreads];
  const int tid = threadIdx.x;
  const std::int64_t i = global_thread();
  sdata[tid] = i < n ? x[i] : 0.f;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (tid < stride) sdata[tid] += sdata[tid + stride];
    __syncthreads();  // a level is complete before the next one reads it
  }
  if (tid == 0) partials[blockIdx.x] = sdata[0];
}

// ---- 2. The tree in registers ----------------------------------------------------------------
// Five halving steps leave the warp's sum in lane 0.
__device__ float warp_reduce_sum(float v) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) v += __shfl_down_sync(kFullMask, v, offset);
  return v;
}

// Warps first, then the kWarps warp sums in warp 0. Valid in thread 0 only.
__device__ float block_reduce_sum(float v) {
  __shared__ float warp_sums[kWarps];
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  v = warp_reduce_sum(v);
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  if (warp == 0) v = warp_reduce_sum(lane < kWarps ? warp_sums[lane] : 0.f);
  return v;
}

__global__ void __launch_bounds__(kThreads)
    warp_shuffle_sum_kernel(const float* __restrict__ x, float* __restrict__ partials, std::int64_t n) {
  const std::int64_t i = global_thread();
  // Every lane takes part, in range or not: the full mask promises all 32.
  const float v = block_reduce_sum(i < n ? x[i] : 0.f);
  if (threadIdx.x == 0) partials[blockIdx.x] = v;
}

// ---- 3. Two levels: a grid sized to the GPU --------------------------------------------------
// A thread walks x with the stride of the whole grid, so a warp's loads stay consecutive, and
// sums in a register; only then does the block reduce. The same kernel, launched as one block,
// sums the partials.
__global__ void __launch_bounds__(kThreads)
    two_level_sum_kernel(const float* __restrict__ x, float* __restrict__ partials, std::int64_t n) {
  const std::int64_t stride = std::int64_t(gridDim.x) * kThreads;
  float sum = 0.f;
#pragma unroll 4
  for (std::int64_t i = global_thread(); i < n; i += stride) sum += x[i];
  sum = block_reduce_sum(sum);
  if (threadIdx.x == 0) partials[blockIdx.x] = sum;
}

// ---- Host side (given) --------------------------------------------------------------------------
std::int64_t blocks_for(std::int64_t count) { return (count + kThreads - 1) / kThreads; }

void launch_atomic(const ladder::ReductionArgs& a, cudaStream_t stream) {
  CUDA_CHECK(cudaMemsetAsync(a.out, 0, sizeof(float), stream));
  atomic_sum_kernel<<<unsigned(blocks_for(a.shape.count)), kThreads, 0, stream>>>(a.x, a.out, a.shape.count);
  CUDA_CHECK_LAUNCH("atomic_sum_kernel");
}

// One pass turns `count` values into ceil(count / 256) partials; the passes alternate between two
// buffers (a pass must not overwrite what another block still reads), the last writes *out.
std::size_t passes_workspace(const ladder::ReductionShape& s) {
  const std::int64_t first = blocks_for(s.count);
  return std::size_t(first + blocks_for(first)) * sizeof(float);
}

template <void (*kKernel)(const float*, float*, std::int64_t)>
void launch_passes(const ladder::ReductionArgs& a, cudaStream_t stream) {
  auto* ws = static_cast<float*>(a.workspace);
  float* const buffers[2] = {ws, ws + blocks_for(a.shape.count)};
  const float* in = a.x;
  std::int64_t count = a.shape.count;
  for (int pass = 0;; ++pass) {
    const std::int64_t blocks = blocks_for(count);
    float* dst = blocks == 1 ? a.out : buffers[pass % 2];
    kKernel<<<unsigned(blocks), kThreads, 0, stream>>>(in, dst, count);
    CUDA_CHECK_LAUNCH("reduction pass");
    if (blocks == 1) return;
    in = dst;
    count = blocks;
  }
}

constexpr int kBlocksPerSm = 4;
constexpr int kMaxPartials = 2048;

void launch_two_level(const ladder::ReductionArgs& a, cudaStream_t stream) {
  static const int sms = [] {
    int device = 0, count = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    CUDA_CHECK(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device));
    return count;
  }();
  const std::int64_t n = a.shape.count;
  const auto blocks = unsigned(std::clamp<std::int64_t>(blocks_for(n), 1, std::min(kMaxPartials, sms * kBlocksPerSm)));
  if (blocks == 1) {
    two_level_sum_kernel<<<1, kThreads, 0, stream>>>(a.x, a.out, n);
    CUDA_CHECK_LAUNCH("two_level_sum_kernel");
    return;
  }
  auto* partials = static_cast<float*>(a.workspace);
  two_level_sum_kernel<<<blocks, kThreads, 0, stream>>>(a.x, partials, n);
  CUDA_CHECK_LAUNCH("two_level_sum_kernel");
  two_level_sum_kernel<<<1, kThreads, 0, stream>>>(partials, a.out, blocks);
  CUDA_CHECK_LAUNCH("two_level_sum_kernel (final block)");
}

template <class Kernel>
ladder::KernelInfo info(const char* name, Kernel* func) { return ladder::kernel(name, func, kThreads); }

LADDER_REGISTER_STEP(
    ladder::reduction_step(kLabStep, "lab_reduction", "Lab 02: reduction three ways, then two levels")
        .add(ladder::reduction_variant("atomic", "given: one atomicAdd per element", launch_atomic)
                 .with_kernels({info("atomic_sum_kernel", atomic_sum_kernel)})
                 .nondeterministic())
        .add(ladder::reduction_variant("smem_tree", "yours: shared-memory tree per block, repeated",
                                       launch_passes<tree_sum_kernel>)
                 .with_kernels({info("tree_sum_kernel", tree_sum_kernel)})
                 .with_workspace(passes_workspace))
        .add(ladder::reduction_variant("warp_shuffle", "yours: warp-shuffle tree per block, repeated",
                                       launch_passes<warp_shuffle_sum_kernel>)
                 .with_kernels({info("warp_shuffle_sum_kernel", warp_shuffle_sum_kernel)})
                 .with_workspace(passes_workspace))
        .add(ladder::reduction_variant("two_level", "yours: grid-stride sums, then one block", launch_two_level)
                 .with_kernels({info("two_level_sum_kernel", two_level_sum_kernel)})
                 .with_workspace([](const ladder::ReductionShape&) { return std::size_t(kMaxPartials) * sizeof(float); }))
        .main_is("two_level"));

}  // namespace
