// Lab 14 — the FP8 V transpose. GIVEN (do not edit): the kernel that runs YOUR lane map in
// transpose_map.hpp with the real instructions. One CTA per V block, four warps, as step 45's
// producer has three transposing warps: the block is staged from global memory into shared memory
// in the 128-byte swizzle (as TMA would land it), each warp moves every fourth unit with one
// ldmatrix.x4.trans, four __byte_perm and one stmatrix.x4, and Vᵀ goes back to global memory
// row-major, where the checker compares it with V byte for byte.
//
// Not step 45's loop: that one batches four units' loads before their stores (latency), and is
// woven into a ring of barriers. This one keeps only what the map decides.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

// <>, not "": the build puts labs/L14_fp8_transpose/ (your map) or its solution/ first on the
// include path (labs/CMakeLists.txt), and the checker's model includes the same file.
#include <transpose_map.hpp>

#include "common/device/hopper/arch.cuh"
#include "labs/common/cuda_error.hpp"
#include "common/device/hopper/smem.cuh"
#include "common/device/ptx.cuh"
#include "labs/L14_fp8_transpose/lab14.hpp"

namespace {

namespace hopper = ladder::hopper;
namespace ptx = ladder::ptx;
using namespace lab14;

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * kLanes;

struct Storage {
  alignas(hopper::kSwizzleAlign) std::uint8_t v[kTileBytes];   // [keys][D], swizzled
  alignas(hopper::kSwizzleAlign) std::uint8_t vt[kTileBytes];  // [D][keys in P's order], swizzled
};
constexpr std::size_t kSmemBytes = hopper::smem_bytes_for<Storage>;

__device__ int g_refused;  // units a warp skipped: some lane's offset would leave its tile

#if LADDER_SM90A
constexpr unsigned kFullWarp = 0xFFFFFFFFu;
constexpr std::uint32_t kPoisonWord = 0x01010101u * kPoison;
constexpr int kVectors = kTileBytes / kChunkBytes;  // 16-byte pieces of a tile

// stmatrix.x4 (sm_90): the store half of the pair. Lanes 8i .. 8i + 7 name the rows of matrix i;
// register i of lane 4q + t is elements 2t, 2t + 1 of row q of matrix i.
__device__ __forceinline__ void stmatrix_x4(void* smem_row, const std::uint32_t (&r)[kMatrices]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(ptx::smem_addr(smem_row)),
               "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3])
               : "memory");
}

// An address ldmatrix or stmatrix may take: a whole 16-byte row inside the tile.
__device__ __forceinline__ bool row_inside(std::uint32_t off) {
  return off % kChunkBytes == 0 && off < std::uint32_t(kTileBytes);
}
#endif  // LADDER_SM90A

__global__ void __launch_bounds__(kThreads, 1) transpose_kernel(const std::uint8_t* __restrict__ v, std::uint8_t* __restrict__ vt) {
#if LADDER_SM90A
  extern __shared__ unsigned char smem_raw[];
  Storage& st = hopper::aligned_smem_shared<Storage>(smem_raw);
  const int tid = threadIdx.x, warp = tid / kLanes, lane = tid % kLanes;
  const std::size_t tile = std::size_t(blockIdx.x) * kTileBytes;

  // V in, swizzled as TMA lands it; Vᵀ poisoned, so a byte no store reaches comes back as 0xFF.
  const uint4 poison = make_uint4(kPoisonWord, kPoisonWord, kPoisonWord, kPoisonWord);
  for (int i = tid; i < kVectors; i += kThreads) {
    const int row = i / kChunksPerRow, byte = kChunkBytes * (i % kChunksPerRow);
    *reinterpret_cast<uint4*>(st.v + swizzled_offset(row, byte)) = reinterpret_cast<const uint4*>(v + tile)[i];
    reinterpret_cast<uint4*>(st.vt)[i] = poison;
  }
  __syncthreads();

  // The units, through your map. ldmatrix and stmatrix are .sync.aligned: the whole warp runs each
  // or none, so a unit where any lane's address would leave its tile is skipped by all 32 lanes.
  const std::uint32_t select0 = selector(0, lane), select1 = selector(1, lane);
  for (int unit = warp; unit < kUnits; unit += kWarps) {
    const std::uint32_t load = load_offset(unit, lane), store = store_offset(unit, lane);
    if (!__all_sync(kFullWarp, row_inside(load) && row_inside(store))) {
      if (lane == 0) atomicAdd(&g_refused, 1);
      continue;
    }
    std::uint32_t r[kMatrices];
    ptx::ldmatrix_x4_trans(r, st.v + load);
    const std::uint32_t w[kMatrices] = {__byte_perm(r[0], r[1], select0), __byte_perm(r[0], r[1], select1),
                                        __byte_perm(r[2], r[3], select0), __byte_perm(r[2], r[3], select1)};
    stmatrix_x4(st.vt + store, w);
  }
  __syncthreads();

  // Vᵀ out, un-swizzled: row d of the result is head dim d, slots 0 .. 127 in order.
  for (int i = tid; i < kVectors; i += kThreads) {
    const int row = i / kChunksPerRow, byte = kChunkBytes * (i % kChunksPerRow);
    reinterpret_cast<uint4*>(vt + tile)[i] = *reinterpret_cast<const uint4*>(st.vt + swizzled_offset(row, byte));
  }
#elif defined(__CUDA_ARCH__)
  __trap();  // built without sm_90a: the checker never launches it on such a GPU
#endif
}

using lab::cuda_error;

}  // namespace

namespace lab14 {

std::string run_tiles(const std::vector<std::uint8_t>& v, std::vector<std::uint8_t>& vt, int& refused_units) {
  const std::size_t bytes = v.size();
  const int tiles = int(bytes / kTileBytes);
  if (tiles == 0 || bytes % kTileBytes) return "run_tiles: the input is not a whole number of 16384-byte V blocks";
  std::uint8_t *dv = nullptr, *dvt = nullptr;
  cudaError_t e = cudaSuccess;
  auto step = [&](cudaError_t r) { if (e == cudaSuccess) e = r; return e == cudaSuccess; };
  std::string failed;
  if (!step(cudaMalloc(&dv, bytes)) || !step(cudaMalloc(&dvt, bytes))) failed = cuda_error("cudaMalloc", e);
  const int zero = 0;
  if (failed.empty() &&
      (!step(cudaMemcpy(dv, v.data(), bytes, cudaMemcpyHostToDevice)) || !step(cudaMemset(dvt, kPoison, bytes)) ||
       !step(cudaMemcpyToSymbol(g_refused, &zero, sizeof zero)) ||
       !step(cudaFuncSetAttribute(transpose_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSmemBytes)))))
    failed = cuda_error("setting up the run", e);
  if (failed.empty()) {
    transpose_kernel<<<tiles, kThreads, kSmemBytes>>>(dv, dvt);
    if (!step(cudaGetLastError()) || !step(cudaDeviceSynchronize())) failed = cuda_error("the kernel", e);
  }
  if (failed.empty()) {
    vt.assign(bytes, 0);
    if (!step(cudaMemcpy(vt.data(), dvt, bytes, cudaMemcpyDeviceToHost)) ||
        !step(cudaMemcpyFromSymbol(&refused_units, g_refused, sizeof refused_units)))
      failed = cuda_error("reading Vᵀ back", e);
  }
  // Freed whatever happened; an error from the frees matters only if all else went well.
  const cudaError_t free_v = cudaFree(dv), free_vt = cudaFree(dvt);
  if (failed.empty() && (!step(free_v) || !step(free_vt))) failed = cuda_error("cudaFree", e);
  return failed;
}

}  // namespace lab14
