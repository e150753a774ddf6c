// Lab 12 — a TMA tensor map for a ragged tile. GIVEN (do not edit): the host code that encodes
// YOUR arguments (tensor_map.hpp) into a tensor map, and the kernel that loads every box of the
// tensor with it. One CTA per box: one thread announces your expect_tx bytes on the CTA's mbarrier
// and issues the 2-D copy of the box at {0, b · kBoxRows}; every thread waits, bounded, for the
// phase to complete, then copies the box out of shared memory (reading the 128-byte swizzle) for
// the checker to compare. A wait that does not complete in stall_ms() is recorded as a timeout
// and the CTA goes on: a wrong byte count never hangs the GPU.
#include <cuda.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/device/hopper/arch.cuh"
#include "common/device/hopper/mbarrier.cuh"
#include "common/device/hopper/smem.cuh"
#include "common/device/hopper/tma.cuh"
#include "common/device/ptx.cuh"
#include "labs/common/cuda_error.hpp"
#include "labs/L12_tma_ragged/lab12.hpp"

namespace {

namespace hopper = ladder::hopper;
namespace ptx = ladder::ptx;
using namespace lab12;

constexpr int kThreads = 128;
constexpr int kBufferBytes = 256 * kRowBytes;  // the largest box of 128-byte rows the driver allows
constexpr std::size_t kSmemBytes = kBufferBytes + hopper::kSwizzleAlign;

#if LADDER_SM90A
// hopper::mbarrier_wait with a deadline: false if the phase did not complete within `limit_ns`.
__device__ bool bounded_wait(std::uint64_t* bar, std::uint32_t parity, std::uint64_t limit_ns) {
  const std::uint64_t start = ptx::globaltimer_ns();
  while (!hopper::mbarrier_try_wait(bar, parity))
    if (ptx::globaltimer_ns() - start > limit_ns) return false;
  return true;
}

// The 2-D form of hopper::tma_load_tile (tma.cuh): the box at (column, row).
__device__ __forceinline__ void tma_load_2d(void* dst, const CUtensorMap* map, std::uint64_t* bar, int column, int row) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3}], [%4];\n" ::"r"(ptx::smem_addr(dst)),
      "l"(reinterpret_cast<std::uint64_t>(map)), "r"(column), "r"(row), "r"(ptx::smem_addr(bar))
      : "memory");
}
#endif  // LADDER_SM90A

// grid: one CTA per box. expect[b]: your bytes for box b; delivered: what the box brings (the
// product of your box dims × 2 bytes), used only to drain a phase that completed too early.
__global__ void __launch_bounds__(kThreads, 1)
    boxes_kernel(const __grid_constant__ CUtensorMap map, const std::uint32_t* __restrict__ expect,
                 std::uint32_t delivered, std::uint64_t limit_ns, int* __restrict__ status,
                 __half* __restrict__ out) {
#if LADDER_SM90A
  extern __shared__ unsigned char smem_raw[];
  unsigned char* tile = hopper::aligned_smem_base<unsigned char>(smem_raw);  // 1024-byte aligned
  __shared__ alignas(8) std::uint64_t bar;
  const int tid = threadIdx.x;
  const int b = blockIdx.x;

  // Poison the buffer: whatever still reads 0xFFFF afterwards, the copy did not write.
  for (int i = tid; i < kBufferBytes / 16; i += kThreads)
    reinterpret_cast<uint4*>(tile)[i] = make_uint4(0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu);
  if (tid == 0) {
    hopper::mbarrier_init(&bar, 1);
    hopper::mbarrier_init_fence();
  }
  hopper::fence_proxy_async_smem();  // the poison (generic stores) before the copy (async proxy)
  __syncthreads();

  if (tid == 0) {
    hopper::mbarrier_arrive_expect_tx(&bar, expect[b]);
    tma_load_2d(tile, &map, &bar, 0, b * kBoxRows);
  }
  const bool landed = bounded_wait(&bar, 0, limit_ns);
  if (tid == 0) status[b] = landed ? 1 : 2;

  // Copy out what the box holds, reading the 128-byte swizzle.
  for (int e = tid; e < kBoxRows * kD; e += kThreads) {
    const int r = e / kD, c = e % kD;
    out[(std::int64_t(b) * kBoxRows + r) * kD + c] = *reinterpret_cast<const __half*>(tile + swizzled_offset(r, c));
  }
  __syncthreads();

  // A phase told fewer bytes than the box brings completes early, and the rest of the bytes may
  // still be on their way: announce the difference on the next phase and wait for it, so that no
  // copy is still writing into shared memory when the CTA exits. (Told more, the phase never
  // completed; by the time the wait gave up, every byte had landed.)
  if (tid == 0 && landed && expect[b] < delivered) {
    hopper::mbarrier_arrive_expect_tx(&bar, delivered - expect[b]);
    bounded_wait(&bar, 1, limit_ns);
  }
#elif defined(__CUDA_ARCH__)
  __trap();  // built without sm_90a: the checker never launches it on such a GPU
#endif
}

using lab::cuda_error;

}  // namespace

namespace lab12 {

BoxRun run_boxes(const TensorMapArgs& args, int rows, const std::vector<__half>& tensor,
                 const std::vector<std::uint32_t>& expect) {
  BoxRun run;
  const int n_boxes = boxes(rows);
  run.status.assign(n_boxes, 0);
  PFN_cuTensorMapEncodeTiled_v12000 encode = nullptr;
  try {
    encode = hopper::tensor_map_encoder();  // the steps' lookup (tma.cuh)
  } catch (const std::runtime_error& e) {
    run.error = e.what();
    return run;
  }
  // The box must fit the kernel's buffer; the driver checks everything else.
  std::uint64_t box_bytes = kElementBytes;
  for (cuuint32_t i = 0; i < args.rank && i < 5; ++i) box_bytes *= args.box[i];
  if (args.rank != 2) {
    run.error = "not launched: the kernel makes 2-D copies, and this map is rank " + std::to_string(args.rank);
    return run;
  }
  if (box_bytes > std::uint64_t(kBufferBytes)) {
    run.error = "not launched: the kernel's buffer holds " + std::to_string(kBufferBytes) + " bytes (256 rows of 128), "
                "and this map's box is " + std::to_string(box_bytes);
    return run;
  }
  // An mbarrier's transaction count holds at most 2^20 - 1 bytes a phase.
  for (int b = 0; b < n_boxes; ++b)
    if (expect[b] >= (1u << 20)) {
      run.error = "not launched: expect_tx of " + std::to_string(expect[b]) + " bytes for box " + std::to_string(b) +
                  " is past what an mbarrier's transaction count holds (2^20 - 1)";
      return run;
    }

  __half* d_tensor = nullptr;
  __half* d_out = nullptr;
  std::uint32_t* d_expect = nullptr;
  int* d_status = nullptr;
  cudaError_t e = cudaSuccess;
  auto ok = [&](cudaError_t r) { if (e == cudaSuccess) e = r; return e == cudaSuccess; };
  const std::size_t out_elems = std::size_t(n_boxes) * kBoxRows * kD;
  if (!ok(cudaMalloc(&d_tensor, tensor.size() * sizeof(__half))) || !ok(cudaMalloc(&d_out, out_elems * sizeof(__half))) ||
      !ok(cudaMalloc(&d_expect, n_boxes * sizeof(std::uint32_t))) || !ok(cudaMalloc(&d_status, n_boxes * sizeof(int))) ||
      !ok(cudaMemcpy(d_tensor, tensor.data(), tensor.size() * sizeof(__half), cudaMemcpyHostToDevice)) ||
      !ok(cudaMemcpy(d_expect, expect.data(), n_boxes * sizeof(std::uint32_t), cudaMemcpyHostToDevice)) ||
      !ok(cudaMemset(d_out, 0xFF, out_elems * sizeof(__half))) || !ok(cudaMemset(d_status, 0, n_boxes * sizeof(int))) ||
      !ok(cudaFuncSetAttribute(boxes_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSmemBytes))))
    run.error = cuda_error("setting up the run", e);

  if (run.error.empty()) {
    CUtensorMap map{};
    cuuint64_t dims[5], strides[4];
    cuuint32_t box[5], element_strides[5];
    for (int i = 0; i < 5; ++i) dims[i] = args.dims[i], box[i] = args.box[i], element_strides[i] = args.element_strides[i];
    for (int i = 0; i < 4; ++i) strides[i] = args.strides[i];
    const CUresult r = encode(&map, args.type, args.rank, d_tensor, dims, strides, box, element_strides, args.interleave,
                              args.swizzle, args.l2_promotion, args.oob_fill);
    run.encode_result = int(r);
    if (r != CUDA_SUCCESS) {
      run.error = "cuTensorMapEncodeTiled refused the arguments: CUresult " + std::to_string(int(r)) +
                  (r == CUDA_ERROR_INVALID_VALUE ? " (CUDA_ERROR_INVALID_VALUE)" : "");
    } else {
      const std::uint64_t limit_ns = std::uint64_t(stall_ms()) * 1000000ull;
      boxes_kernel<<<n_boxes, kThreads, kSmemBytes>>>(map, d_expect, std::uint32_t(box_bytes), limit_ns,
                                                     d_status, d_out);
      if (!ok(cudaGetLastError()) || !ok(cudaDeviceSynchronize())) run.error = cuda_error("the kernel", e);
    }
  }
  if (run.error.empty()) {
    run.out.resize(out_elems);
    if (!ok(cudaMemcpy(run.out.data(), d_out, out_elems * sizeof(__half), cudaMemcpyDeviceToHost)) ||
        !ok(cudaMemcpy(run.status.data(), d_status, n_boxes * sizeof(int), cudaMemcpyDeviceToHost)))
      run.error = cuda_error("reading the boxes back", e);
  }
  cudaFree(d_tensor);
  cudaFree(d_out);
  cudaFree(d_expect);
  cudaFree(d_status);
  return run;
}

}  // namespace lab12
