// Lab 11 — the wgmma descriptor. GIVEN (do not edit): the kernel that runs YOUR answers in
// descriptor.hpp. One warpgroup (128 threads) stages A and B (64×64 fp16 each, row-major in
// global memory) into shared memory at the byte offsets your swizzled_offset gives, then computes
// D = A·Bᵀ with one chain of four wgmma.m64n64k16, both operands K-major in shared memory, read
// through your make_desc and k_step_advance. The checker compares D with a CPU product.
//
// The wgmma wrapper, the fences and the accumulator layout are Part IV's own
// (common/device/hopper/wgmma.cuh); the only decisions this file leaves open are yours.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

// <>, not "": the build puts labs/L11_wgmma_descriptor/ (your answers) or its solution/ first on
// the include path (labs/part4_labs.cmake), and the checker's model includes the same file.
#include <descriptor.hpp>

#include "common/device/hopper/arch.cuh"
#include "common/device/hopper/mbarrier.cuh"
#include "common/device/hopper/smem.cuh"
#include "common/device/hopper/wgmma.cuh"
#include "common/device/ptx.cuh"
#include "labs/common/cuda_error.hpp"
#include "labs/L11_wgmma_descriptor/lab11.hpp"

namespace {

namespace hopper = ladder::hopper;
namespace ptx = ladder::ptx;
using namespace lab11;

constexpr int kThreads = 128;  // one warpgroup
// The two tiles and 4 KiB of zeros after them: the region every descriptor must stay inside.
constexpr int kRegionBytes = 2 * kTileBytes + 4096;
constexpr std::size_t kSmemBytes = kRegionBytes + hopper::kSwizzleAlign;

__device__ int g_stray;       // elements whose offset fell outside the tile (not written)
__device__ int g_not_issued;  // 1: a descriptor reached outside the region, the chain was not issued

#if LADDER_SM90A
// Could the wgmma read outside [lo, hi) through this descriptor? It reads 8-row groups SBO apart,
// each within 1024 bytes of its start (plus LBO in the layouts that use it): a bound, not the
// exact footprint, so that a wrong descriptor is refused instead of reading memory the kernel does
// not own (or faulting).
__device__ bool stays_inside(std::uint64_t desc, std::uint32_t lo, std::uint32_t hi) {
  const std::uint32_t start = std::uint32_t(desc & 0x3FFF) << 4;
  const std::uint32_t lbo = std::uint32_t((desc >> 16) & 0x3FFF) << 4;
  const std::uint32_t sbo = std::uint32_t((desc >> 32) & 0x3FFF) << 4;
  return start >= lo && start + 7 * sbo + lbo + kAtomBytes <= hi;
}
#endif  // LADDER_SM90A

__global__ void __launch_bounds__(kThreads, 1)
    tile_kernel(const __half* __restrict__ a, const __half* __restrict__ b, float* __restrict__ d) {
#if LADDER_SM90A
  extern __shared__ unsigned char smem_raw[];
  unsigned char* s_a = hopper::aligned_smem_base<unsigned char>(smem_raw);  // 1024-byte aligned
  unsigned char* s_b = s_a + kTileBytes;                                    // so is this
  const int tid = threadIdx.x;

  // Zero the region first: a byte your layout leaves out then reads as 0, not as last run's data.
  for (int i = tid; i < kRegionBytes / 16; i += kThreads) reinterpret_cast<uint4*>(s_a)[i] = make_uint4(0, 0, 0, 0);
  __syncthreads();

  // Staging, one half at a time (slow, and clear): element (row, col) goes to swizzled_offset.
  for (int e = tid; e < kRows * kCols; e += kThreads) {
    const int row = e / kCols, col = e % kCols;
    const std::uint32_t off = wgdesc::swizzled_offset(row, col);
    if (off < std::uint32_t(kTileBytes) && off % kElementBytes == 0) {
      *reinterpret_cast<__half*>(s_a + off) = a[e];
      *reinterpret_cast<__half*>(s_b + off) = b[e];
    } else {
      atomicAdd(&g_stray, 1);
    }
  }
  // Ordinary stores, read next by the async proxy (wgmma): fence, then the barrier publishes them.
  hopper::fence_proxy_async_smem();
  __syncthreads();

  // D = A·Bᵀ over K = 64: four k16 steps, each one wgmma reading both tiles through descriptors.
  const std::uint64_t desc_a = wgdesc::make_desc(ptx::smem_addr(s_a));
  const std::uint64_t desc_b = wgdesc::make_desc(ptx::smem_addr(s_b));
  const std::uint32_t lo = ptx::smem_addr(s_a), hi = lo + kRegionBytes;
  bool inside = true;
  for (int kk = 0; kk < kKSteps; ++kk)
    inside = inside && stays_inside(desc_a + std::uint64_t(kk) * wgdesc::k_step_advance(), lo, hi) &&
             stays_inside(desc_b + std::uint64_t(kk) * wgdesc::k_step_advance(), lo, hi);
  if (!inside) {  // the same answer in every thread: the whole warpgroup skips the chain
    if (tid == 0) g_not_issued = 1;
    return;
  }
  float acc[32];
#pragma unroll
  for (int i = 0; i < 32; ++i) acc[i] = 0.f;
  hopper::wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < kKSteps; ++kk)
    hopper::Wgmma<64, __half>::ss(acc, desc_a + std::uint64_t(kk) * wgdesc::k_step_advance(),
                                  desc_b + std::uint64_t(kk) * wgdesc::k_step_advance(), kk > 0);
  hopper::wgmma_commit();
  hopper::wgmma_wait<0>();
  hopper::fence_registers(acc);

  // The accumulator layout (wgmma.cuh): warp w, lane 4g + t holds rows 16w + g and 16w + g + 8,
  // columns 8j + 2t and 8j + 2t + 1 of every n8 tile j.
  const int warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
#pragma unroll
  for (int j = 0; j < 8; ++j)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = 16 * warp + g + 8 * h;
      const int col = 8 * j + 2 * t;
      d[row * 64 + col] = acc[4 * j + 2 * h];
      d[row * 64 + col + 1] = acc[4 * j + 2 * h + 1];
    }
#elif defined(__CUDA_ARCH__)
  __trap();  // built without sm_90a: the checker never launches it on such a GPU
#endif
}

using lab::cuda_error;

}  // namespace

namespace lab11 {

std::string run_tile(const std::vector<__half>& a, const std::vector<__half>& b, std::vector<float>& d,
                     int& stray_writes, bool& issued) {
  const std::size_t n = std::size_t(kRows) * kCols;
  __half *da = nullptr, *db = nullptr;
  float* dd = nullptr;
  cudaError_t e = cudaSuccess;
  auto step = [&](cudaError_t r) { if (e == cudaSuccess) e = r; return e == cudaSuccess; };
  std::string failed;
  if (!step(cudaMalloc(&da, n * sizeof(__half))) || !step(cudaMalloc(&db, n * sizeof(__half))) ||
      !step(cudaMalloc(&dd, n * sizeof(float))))
    failed = cuda_error("cudaMalloc", e);
  if (failed.empty()) {
    std::vector<float> poison(n, NAN);  // a D element the kernel does not write stays NaN
    const int zero = 0;
    if (!step(cudaMemcpy(da, a.data(), n * sizeof(__half), cudaMemcpyHostToDevice)) ||
        !step(cudaMemcpy(db, b.data(), n * sizeof(__half), cudaMemcpyHostToDevice)) ||
        !step(cudaMemcpy(dd, poison.data(), n * sizeof(float), cudaMemcpyHostToDevice)) ||
        !step(cudaMemcpyToSymbol(g_stray, &zero, sizeof zero)) ||
        !step(cudaMemcpyToSymbol(g_not_issued, &zero, sizeof zero)) ||
        !step(cudaFuncSetAttribute(tile_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSmemBytes))))
      failed = cuda_error("setting up the run", e);
  }
  if (failed.empty()) {
    tile_kernel<<<1, kThreads, kSmemBytes>>>(da, db, dd);
    if (!step(cudaGetLastError()) || !step(cudaDeviceSynchronize()))
      failed = cuda_error("the kernel", e);
  }
  if (failed.empty()) {
    d.assign(n, 0.f);
    if (!step(cudaMemcpy(d.data(), dd, n * sizeof(float), cudaMemcpyDeviceToHost)) ||
        !step(cudaMemcpyFromSymbol(&stray_writes, g_stray, sizeof stray_writes)))
      failed = cuda_error("reading D back", e);
    int not_issued = 0;
    if (failed.empty() && !step(cudaMemcpyFromSymbol(&not_issued, g_not_issued, sizeof not_issued)))
      failed = cuda_error("reading D back", e);
    issued = not_issued == 0;
  }
  cudaFree(da);
  cudaFree(db);
  cudaFree(dd);
  return failed;
}

}  // namespace lab11
