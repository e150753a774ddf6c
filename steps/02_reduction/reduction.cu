// Step 02 — reduction: one sum, five ways, from contended atomics to a bandwidth-bound kernel.
//
//   out = x[0] + x[1] + … + x[n−1],   fp32, n up to 2^34
//
// A sum does one addition per 4 bytes it reads, so the only question is how close a kernel gets to
// streaming x at the speed of device memory. The ladder:
//   atomic        every thread adds its element to *out: n atomics on one address, serialized
//   smem_tree     a block adds its chunk through a tree in shared memory; the partials are summed
//                 by the same kernel again until one value is left (no atomics)
//   warp_shuffle  the same, with the tree in registers (__shfl_down_sync) instead of shared memory
//   two_level     a grid sized to the GPU: each thread first sums many elements with 16-byte loads,
//                 so one pass leaves a few hundred partials, and one final block sums those
//   cub           cub::DeviceReduce::Sum, the peer
// The same block-level pattern (a warp shuffle tree, then a few values across warps) is how every
// FlashAttention step reduces a row's maximum and sum.
#include <cub/device/device_reduce.cuh>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/check.hpp"
#include "common/registry.hpp"
#include "common/strings.hpp"

namespace {

using ladder::ceil_div;
using ladder::ReductionArgs;

constexpr int kThreads = 256;  // per block, in every kernel of this step
constexpr int kWarpSize = 32;
constexpr int kWarps = kThreads / kWarpSize;
constexpr unsigned kFullMask = 0xffffffffu;  // all 32 lanes take part in every shuffle
static_assert(kThreads % kWarpSize == 0, "shuffles need whole warps");
static_assert(kWarps <= kWarpSize, "the block level reduces one value per warp inside one warp");

// 64-bit global thread index: n goes to 2^34, past what 32 bits can count.
__device__ std::int64_t global_thread() {
  return std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
}

// ---- Kernel 1: one atomic per element -------------------------------------------------------
// Correct, and expected to be the slowest rung: every atomic targets the same 4 bytes, so the
// memory system applies them one after another however many threads issue them. *out must be
// zero before the launch (launch_atomic clears it).
__global__ void __launch_bounds__(kThreads)
    atomic_sum_kernel(const float* __restrict__ x, float* __restrict__ out, std::int64_t n) {
  const std::int64_t i = global_thread();
  if (i < n) atomicAdd(out, x[i]);
}

// ---- Kernel 2: a tree in shared memory ------------------------------------------------------
// Each block sums kThreads consecutive elements. At every level the first `stride` threads add
// the upper half of the live values onto the lower half ("sequential addressing"): the active
// threads stay packed at the front, so whole warps drop out together instead of every warp
// keeping a few busy lanes (what `tid % (2·stride) == 0` would do), and a warp's reads
// sdata[tid + stride] are consecutive words, free of bank conflicts.
//
// Out-of-range threads contribute 0 and still reach every barrier.
__global__ void __launch_bounds__(kThreads)
    tree_sum_kernel(const float* __restrict__ x, float* __restrict__ partials, std::int64_t n) {
  __shared__ float sdata[kThreads];
  const int tid = threadIdx.x;
  const std::int64_t i = global_thread();
  sdata[tid] = i < n ? x[i] : 0.f;
  __syncthreads();

  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (tid < stride) sdata[tid] += sdata[tid + stride];
    __syncthreads();  // a level is complete before the next reads it
  }
  if (tid == 0) partials[blockIdx.x] = sdata[0];
}

// ---- Kernel 3: the tree in registers ---------------------------------------------------------
// __shfl_down_sync(mask, v, offset) hands every lane the v of the lane `offset` above it, so five
// halving steps leave the warp's sum in lane 0: the same tree as kernel 2, without shared memory
// and without a barrier per level. The upper lanes end with partial garbage, which nobody reads.
__device__ float warp_reduce_sum(float v) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2)
    v += __shfl_down_sync(kFullMask, v, offset);
  return v;
}

// Two levels inside a block: warp shuffles, then the kWarps warp sums through shared memory and
// one more shuffle in warp 0. One barrier in all, where kernel 2 needs one per level (eight).
// The result is valid in thread 0 only.
__device__ float block_reduce_sum(float v) {
  __shared__ float warp_sums[kWarps];
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  v = warp_reduce_sum(v);
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();  // every warp's sum is stored before warp 0 reads them
  if (warp == 0) v = warp_reduce_sum(lane < kWarps ? warp_sums[lane] : 0.f);
  return v;
}

// Kernel 2 with its shared-memory tree replaced by block_reduce_sum, and nothing else changed:
// one element per thread, one partial per block, repeated on the partials (no atomics).
__global__ void __launch_bounds__(kThreads)
    warp_shuffle_sum_kernel(const float* __restrict__ x, float* __restrict__ partials,
                            std::int64_t n) {
  const std::int64_t i = global_thread();
  // The whole block shuffles, in range or not: a missing lane would break the full mask.
  const float v = block_reduce_sum(i < n ? x[i] : 0.f);
  if (threadIdx.x == 0) partials[blockIdx.x] = v;
}

// ---- Kernel 4: a grid sized to the GPU -------------------------------------------------------
// Each thread first sums many elements in a register, walking x with a stride of the whole grid
// (so a warp's loads are always consecutive), 16 bytes per load: a few blocks per SM are enough to
// keep device memory busy, and there are only as many partials as blocks. The partials are
// summed by this same kernel launched as a single block, in a fixed order: deterministic.
//
// float4 loads need a 16-byte aligned address. x is only guaranteed 4-byte aligned (a partials
// buffer, or a caller's sub-array), so up to 3 `head` elements are read one by one until the
// next 16-byte boundary, then whole float4s, then up to 3 `tail` elements after the last float4.
constexpr int kVector = 4;  // floats per 16-byte load

__global__ void __launch_bounds__(kThreads)
    two_level_sum_kernel(const float* __restrict__ x, float* __restrict__ partials,
                         std::int64_t n) {
  const std::int64_t tid = global_thread();
  const std::int64_t stride = std::int64_t(gridDim.x) * kThreads;

  const auto misalignment = reinterpret_cast<std::uintptr_t>(x) % sizeof(float4);
  const std::int64_t head =
      std::min<std::int64_t>(n, (sizeof(float4) - misalignment) % sizeof(float4) / sizeof(float));
  const std::int64_t vectors = (n - head) / kVector;
  const std::int64_t tail_start = head + vectors * kVector;

  float sum = 0.f;
  if (tid < head) sum += x[tid];
  if (tid < n - tail_start) sum += x[tail_start + tid];
  const auto* x4 = reinterpret_cast<const float4*>(x + head);
  // Unrolled so that each thread has several independent 16-byte loads in flight.
#pragma unroll 4
  for (std::int64_t v = tid; v < vectors; v += stride) {
    const float4 q = x4[v];
    sum += (q.x + q.y) + (q.z + q.w);
  }

  sum = block_reduce_sum(sum);
  if (threadIdx.x == 0) partials[blockIdx.x] = sum;
}

// ---- Host side ------------------------------------------------------------------------------
// Blocks of kThreads that cover `count` values, one value per thread: at most 2^34 / 2^8 = 2^26,
// well inside gridDim.x's limit of 2^31 − 1.
std::int64_t blocks_for(std::int64_t count) { return ceil_div(count, std::int64_t(kThreads)); }

void launch_atomic(const ReductionArgs& a, cudaStream_t stream) {
  const std::int64_t n = a.shape.count;
  CUDA_CHECK(cudaMemsetAsync(a.out, 0, sizeof(float), stream));  // 0.0f is all zero bits
  atomic_sum_kernel<<<unsigned(blocks_for(n)), kThreads, 0, stream>>>(a.x, a.out, n);
  CUDA_CHECK_LAUNCH("atomic_sum_kernel");
}

// Pass p turns ceil(n / kThreads^p) values into ceil(n / kThreads^(p+1)) partials. A pass cannot
// write the buffer it reads (block b writes partial b while another block may still be reading
// it), so the passes alternate between two buffers; the pass that is left with one block writes
// *out itself.
std::int64_t tree_first_buffer(std::int64_t n) { return blocks_for(n); }
std::size_t tree_workspace(std::int64_t n) {
  const std::int64_t first = tree_first_buffer(n);
  return std::size_t(first + blocks_for(first)) * sizeof(float);
}

using PartialsKernel = void (*)(const float*, float*, std::int64_t);

template <PartialsKernel kKernel>
void launch_passes(const ReductionArgs& a, cudaStream_t stream, const char* name) {
  auto* ping = static_cast<float*>(a.workspace);
  float* const buffers[2] = {ping, ping + tree_first_buffer(a.shape.count)};
  const float* in = a.x;
  std::int64_t count = a.shape.count;
  for (int pass = 0;; ++pass) {
    const std::int64_t blocks = blocks_for(count);
    float* dst = blocks == 1 ? a.out : buffers[pass % 2];
    kKernel<<<unsigned(blocks), kThreads, 0, stream>>>(in, dst, count);
    ladder::check_cuda(cudaGetLastError(), name, __FILE__, __LINE__);
    if (blocks == 1) return;
    in = dst;
    count = blocks;
  }
}

void launch_tree(const ReductionArgs& a, cudaStream_t stream) {
  launch_passes<tree_sum_kernel>(a, stream, "launch of tree_sum_kernel");
}

void launch_warp_shuffle(const ReductionArgs& a, cudaStream_t stream) {
  launch_passes<warp_shuffle_sum_kernel>(a, stream, "launch of warp_shuffle_sum_kernel");
}

// A few resident blocks per SM keep enough loads in flight; more only adds partials. The grid is
// also capped so that the workspace can be sized without asking the device (kMaxPartials floats),
// and shrunk for small n so that every thread gets at least one float4.
constexpr int kBlocksPerSm = 4;
constexpr int kMaxPartials = 2048;

std::int64_t two_level_max_blocks(std::int64_t n) {
  return std::min<std::int64_t>(kMaxPartials, ceil_div(n, std::int64_t(kThreads) * kVector));
}

void launch_two_level(const ReductionArgs& a, cudaStream_t stream) {
  // Queried on the first launch only: the launch is timed, and the GPU does not change. (A process
  // that switched devices between launches would keep the first device's count: harmless, since
  // the grid size affects only speed, never the result.)
  static const int multiprocessors = [] {
    int device = 0, count = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    CUDA_CHECK(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device));
    return count;
  }();

  const std::int64_t n = a.shape.count;
  const auto blocks = unsigned(std::min<std::int64_t>(
      two_level_max_blocks(n), std::max(1, multiprocessors * kBlocksPerSm)));
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

// CUB's two-phase protocol: called with a null temp pointer, DeviceReduce::Sum only writes the
// number of bytes it needs and launches nothing, so it can size the workspace before the run.
std::size_t cub_temp_bytes(std::int64_t n) {
  std::size_t bytes = 0;
  CUDA_CHECK(cub::DeviceReduce::Sum(nullptr, bytes, static_cast<const float*>(nullptr),
                                    static_cast<float*>(nullptr), n));
  return bytes;
}

void launch_cub(const ReductionArgs& a, cudaStream_t stream) {
  // A null temp pointer would turn the call below into a size query that silently sums nothing.
  if (a.workspace == nullptr)
    throw std::logic_error("the cub reduction was launched without its workspace");
  std::size_t bytes = cub_temp_bytes(a.shape.count);
  CUDA_CHECK(cub::DeviceReduce::Sum(a.workspace, bytes, a.x, a.out, a.shape.count, stream));
}

int tree_passes(std::int64_t n) {
  int passes = 1;
  for (std::int64_t count = n; blocks_for(count) > 1; count = blocks_for(count)) ++passes;
  return passes;
}

std::vector<std::string> ledger(const ladder::ReductionShape& s) {
  const double n = double(s.count);
  return {
      ladder::strprintf("bytes read: 4·n = %.4g GB (every variant reads x once and writes one "
                        "float; smem_tree's partials add under 1%%)",
                        4.0 * n / 1e9),
      ladder::strprintf("atomics on *out: atomic %s (one per element), the others none; launches: "
                        "smem_tree and warp_shuffle %d (one per level of partials), two_level %d",
                        ladder::grouped(n).c_str(), tree_passes(s.count), n > kThreads * kVector ? 2 : 1),
      "the ceiling: GB/s is compared with a device-to-device copy timed in the same run (the "
      "copy row)",
  };
}

std::size_t tree_workspace_for(const ladder::ReductionShape& s) { return tree_workspace(s.count); }

template <class Kernel>
ladder::KernelInfo info(const char* name, Kernel* func) {
  return ladder::kernel(name, func, kThreads);
}

LADDER_REGISTER_STEP(
    ladder::reduction_step(2, "reduction", "Reduction: atomics, a shared-memory tree, warp shuffles, two levels")
        .with_notes(ledger)
        // Float addition is not associative, and the order in which atomics reach *out changes
        // from run to run, so the last bits of the sum do too.
        .add(ladder::reduction_variant("atomic", "one atomicAdd per element into *out", launch_atomic)
                 .with_kernels({info("atomic_sum_kernel", atomic_sum_kernel)})
                 .nondeterministic())
        .add(ladder::reduction_variant("smem_tree", "shared-memory tree per block, repeated on the "
                                                    "partials, no atomics", launch_tree)
                 .with_kernels({info("tree_sum_kernel", tree_sum_kernel)})
                 .with_workspace(tree_workspace_for))
        .add(ladder::reduction_variant("warp_shuffle", "warp-shuffle tree per block (one barrier), "
                                                       "repeated on the partials", launch_warp_shuffle)
                 .with_kernels({info("warp_shuffle_sum_kernel", warp_shuffle_sum_kernel)})
                 .with_workspace(tree_workspace_for))
        .add(ladder::reduction_variant("two_level", "grid-stride float4 loads, warp + block "
                                                    "reduction, one final block", launch_two_level)
                 .with_kernels({info("two_level_sum_kernel", two_level_sum_kernel)})
                 .with_workspace([](const ladder::ReductionShape& s) {
                   return std::size_t(two_level_max_blocks(s.count)) * sizeof(float);
                 }))
        .add(ladder::reduction_variant("cub", "cub::DeviceReduce::Sum", launch_cub)
                 .as_peer()
                 .with_workspace([](const ladder::ReductionShape& s) { return cub_temp_bytes(s.count); }))
        .main_is("two_level"));  // cub is compared with it

}  // namespace
