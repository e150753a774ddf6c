// Lab 09: where did ptxas put the wait? (README.md)
//
// One iteration of FlashAttention-3's in-warpgroup overlap, in miniature: one CTA, one warpgroup,
// one block of 128 keys. It issues two wgmma groups back to back,
//   S = Q Kᵀ    (SS: both operands in shared memory)                   group 1
//   O = P V     (RS: P, the previous block's probabilities, from registers)  group 2
// waits for the first (`wgmma_wait<1>`), computes the exponentials of S and their row sums while
// O is meant to be still in the tensor cores, and waits for the second (`wgmma_wait<0>`) only
// before O is read. The source says "the exponentials run under P·V". The SASS decides.
//
// YOUR EDIT: only the lines between the two `==== L09` markers below. The checker compares every
// other line of this file with the reference and refuses a file that differs outside them. The
// kernel must keep computing exactly what lab09.hpp says (o = p·v, l = the row sums), with all 64
// exponentials of each thread; the checker counts them in the SASS.
#include <cuda_fp16.h>

#include <cstdint>

#include "common/device/hopper/arch.cuh"
#include "common/device/hopper/gemm.cuh"
#include "common/device/hopper/mbarrier.cuh"
#include "common/device/hopper/smem.cuh"
#include "common/device/hopper/wgmma.cuh"
#include "common/device/mma_fragments.cuh"
#include "common/device/ptx.cuh"
#include "labs/L09_wait_placement/lab09.hpp"

namespace lab09 {
namespace {

using namespace ladder;

inline constexpr int kChunkHalves = 8;  // one 16-byte chunk of a 128-byte swizzled row

// Tiles in the 128-byte swizzle wgmma reads (common/device/hopper/smem.cuh): 1024-byte aligned.
struct Storage {
  alignas(hopper::kSwizzleAlign) __half q[kRows * kHeadDim];
  alignas(hopper::kSwizzleAlign) __half k[kBlockN * kHeadDim];
  alignas(hopper::kSwizzleAlign) __half v[kBlockN * kHeadDim];  // [keys][D], read MN-major
};
static_assert(kHeadDim == 64, "one 128-byte swizzled column block per row");

// A row-major rows × 64 fp16 tile from global memory into the swizzle: chunk c of row r is stored
// at chunk c ^ (r % 8) (common/device/swizzle.cuh explains why).
__device__ void load_tile(__half* tile, const __half* src, int rows) {
  constexpr int kChunks = kHeadDim / kChunkHalves;
  for (int idx = threadIdx.x; idx < rows * kChunks; idx += kThreads) {
    const int r = idx / kChunks, c = idx % kChunks;
    reinterpret_cast<uint4*>(tile)[r * kChunks + (c ^ (r % 8))] = reinterpret_cast<const uint4*>(src)[idx];
  }
}

__global__ void __launch_bounds__(kThreads) overlap_kernel(const __half* q, const __half* k, const __half* v,
                                                           const __half* p, float scale_log2, float* o, float* l) {
#if LADDER_SM90A
  extern __shared__ unsigned char smem_raw[];
  Storage& st = hopper::aligned_smem<Storage>(smem_raw);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int g = lane / 4, t = lane % 4;
  const int row0 = 16 * warp + g;  // this thread's rows of S and O: row0 and row0 + 8

  load_tile(st.q, q, kRows);
  load_tile(st.k, k, kBlockN);
  load_tile(st.v, v, kBlockN);
  hopper::fence_proxy_async_smem();  // ordinary stores, read next by wgmma (the async proxy)
  __syncthreads();

  // P straight from global memory into the A fragments of the RS product (wgmma.cuh: register
  // a[kk][r] holds row row0 + 8·(r & 1), columns 16·kk + 8·(r >> 1) + 2t and + 1).
  std::uint32_t a[kBlockN / 16][4];
#pragma unroll
  for (int kk = 0; kk < kBlockN / 16; ++kk)
#pragma unroll
    for (int r = 0; r < 4; ++r)
      a[kk][r] = *reinterpret_cast<const std::uint32_t*>(p + (row0 + 8 * (r & 1)) * kBlockN + 16 * kk +
                                                         8 * (r >> 1) + 2 * t);

  float s[kBlockN / 2];       // S in the accumulator layout: s[4j + 2h + e] is row row0 + 8h
  float acc_o[kHeadDim / 2];  // O, the same layout over the head dimension
#pragma unroll
  for (int i = 0; i < kHeadDim / 2; ++i) acc_o[i] = 0.f;
  float row_sum[2] = {0.f, 0.f};  // this thread's part of the row sums of rows row0, row0 + 8

  hopper::wgmma_fence();  // acc_o and a were written by ordinary instructions
  hopper::issue_qk<kHeadDim, kRows, __half>(s, ptx::smem_addr(st.q), ptx::smem_addr(st.k));
  hopper::wgmma_commit();
  hopper::issue_pv<kBlockN, __half>(acc_o, a, ptx::smem_addr(st.v));
  hopper::wgmma_commit();
  hopper::wgmma_wait<1>();  // S is done; O = P·V may still be in the tensor cores
  hopper::fence_registers(s);

  // ==== L09: your edit begins (only the lines between the two markers) ====
  // The work that should run under P·V: 64 exponentials per thread, summed per row.
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int j = 0; j < kBlockN / 8; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) row_sum[h] += ptx::exp2_approx(s[4 * j + 2 * h + e] * scale_log2);
  // ptxas schedules the SASS after the compiler has finished, and an empty asm (the "memory"
  // clobber, fence_registers) leaves nothing in the PTX for it to respect. The wait has no data
  // dependence on the exponentials, so ptxas is free to hoist it above them, and with an RS
  // product in flight it does. What ptxas keeps in order with a wgmma.wait_group is memory
  // operations. So: one shared-memory store that reads BOTH row sums (every exponential feeds
  // one of them, so all 64 must be computed before it), placed here, before the wait. It must
  // never execute (it would write shared memory the kernel owns), and ptxas must not be able to
  // prove that, or it deletes the store and the pin with it: the predicate is laneid > 31, false
  // for every lane but read from a special register ptxas cannot fold. The address is 0, never
  // touched; "memory" keeps the compiler from moving it. Three SASS instructions: S2R of the lane
  // id, ISETP, and the predicated STS.
  asm volatile(
      "{\n"
      ".reg .pred never;\n"
      ".reg .u32 lane;\n"
      "mov.u32 lane, %%laneid;\n"
      "setp.gt.u32 never, lane, 31;\n"
      "@never st.shared.v2.f32 [%0], {%1, %2};\n"
      "}\n" ::"r"(0u), "f"(row_sum[0]), "f"(row_sum[1])
      : "memory");
  // ==== L09: your edit ends ====

  hopper::wgmma_wait<0>();  // O = P·V is done: O may be read, and a may be overwritten
  hopper::fence_registers(acc_o);
  hopper::fence_registers(a);

#pragma unroll
  for (int j = 0; j < kHeadDim / 8; ++j)
#pragma unroll
    for (int h = 0; h < 2; ++h)
      *reinterpret_cast<float2*>(o + (row0 + 8 * h) * kHeadDim + 8 * j + 2 * t) =
          make_float2(acc_o[4 * j + 2 * h], acc_o[4 * j + 2 * h + 1]);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float sum = frag::quad_sum(row_sum[h]);  // the four lanes of a quad share a row
    if (t == 0) l[row0 + 8 * h] = sum;
  }
#elif defined(__CUDA_ARCH__)
  __trap();  // built without sm_90a: never launched (the driver refuses), never silent
#endif  // LADDER_SM90A
}

}  // namespace

cudaError_t launch_overlap(const __half* q, const __half* k, const __half* v, const __half* p, float scale_log2,
                           float* o, float* l, cudaStream_t stream) {
  overlap_kernel<<<1, kThreads, hopper::smem_bytes_for<Storage>, stream>>>(q, k, v, p, scale_log2, o, l);
  return cudaGetLastError();
}

}  // namespace lab09
