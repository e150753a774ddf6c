// Lab 01 — tiled matrix product. REFERENCE SOLUTION: try the starter (../tiled_matmul.cu) first.
//
//   C = A B,   A [M, K], B [K, N], C [M, N], fp32, row-major
//
// The naive kernel (given) lets each thread read a row of A and a column of B from global memory:
// 2·K reads per output, 2·M·N·K in all. A block of kTile×kTile threads computes a kTile×kTile tile
// of C; all its threads need the same kTile rows of A and kTile columns of B, so the block stages
// them through shared memory one kTile×kTile slab at a time and each element is read from global
// memory once per block instead of once per thread: 2·M·N·K / kTile reads.
#include <cuda_runtime.h>

#include "common/check.hpp"
#include "common/registry.hpp"
#include "labs/L01_tiled_matmul/ledger.cuh"

namespace lab01 {
namespace {

constexpr int kTile = 16;

// ---- Given: one thread per element of C, everything from global memory ----------------------
__global__ void __launch_bounds__(kTile * kTile)
    naive_kernel(GlobalMatrix a, GlobalMatrix b, float* __restrict__ c) {
  const int col = blockIdx.x * kTile + threadIdx.x;
  const int row = blockIdx.y * kTile + threadIdx.y;
  if (row >= a.rows || col >= b.cols) return;
  float acc = 0.f;
  for (int t = 0; t < a.cols; ++t) acc += a(row, t) * b(t, col);
  c[std::int64_t(row) * b.cols + col] = acc;
}

// ---- The lab: shared-memory tiles ------------------------------------------------------------
// Threads outside C must still load (zeros) and reach both barriers: returning early would leave
// the rest of the block waiting at __syncthreads forever.
__global__ void __launch_bounds__(kTile * kTile)
    tiled_kernel(GlobalMatrix a, GlobalMatrix b, float* __restrict__ c) {
  __shared__ float as[kTile][kTile];  // as[r][t] = A[block row + r, slab + t]
  __shared__ float bs[kTile][kTile];  // bs[t][c] = B[slab + t, block col + c]
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int col = blockIdx.x * kTile + tx;
  const int row = blockIdx.y * kTile + ty;

  float acc = 0.f;
  for (int slab = 0; slab < a.cols; slab += kTile) {
    as[ty][tx] = a(row, slab + tx);  // one element of A per thread per slab
    bs[ty][tx] = b(slab + ty, col);  // one element of B per thread per slab
    __syncthreads();                 // the slab is complete before anyone reads it
#pragma unroll
    for (int t = 0; t < kTile; ++t) acc += as[ty][t] * bs[t][tx];
    __syncthreads();                 // everyone is done before the next slab overwrites it
  }
  if (row < a.rows && col < b.cols) c[std::int64_t(row) * b.cols + col] = acc;
}

dim3 grid_of(const ladder::MatmulShape& s) {
  return dim3(unsigned(ladder::ceil_div(s.n, kTile)), unsigned(ladder::ceil_div(s.m, kTile)));
}

}  // namespace

// gridDim.y allows 65535 blocks: C up to 1,048,560 rows, far more than the lab's problems.
void launch_naive(const ladder::MatmulArgs& x, unsigned long long* reads, cudaStream_t stream) {
  const auto& s = x.shape;
  naive_kernel<<<grid_of(s), dim3(kTile, kTile), 0, stream>>>(
      GlobalMatrix{x.a, s.m, s.k, reads}, GlobalMatrix{x.b, s.k, s.n, reads}, x.c);
  CUDA_CHECK_LAUNCH("naive_kernel");
}

void launch_tiled(const ladder::MatmulArgs& x, unsigned long long* reads, cudaStream_t stream) {
  const auto& s = x.shape;
  tiled_kernel<<<grid_of(s), dim3(kTile, kTile), 0, stream>>>(
      GlobalMatrix{x.a, s.m, s.k, reads}, GlobalMatrix{x.b, s.k, s.n, reads}, x.c);
  CUDA_CHECK_LAUNCH("tiled_kernel");
}

namespace {
LADDER_REGISTER_STEP(
    ladder::matmul_step(kStep, "lab_tiled_matmul", "Lab 01: tiled matrix product")
        .add(ladder::matmul_variant("naive", "given: one thread per C element, all reads global",
                                    [](const ladder::MatmulArgs& x, cudaStream_t s) { launch_naive(x, nullptr, s); })
                 .with_kernels({ladder::kernel("naive_kernel", naive_kernel, kTile * kTile)}))
        .add(ladder::matmul_variant("tiled16", "yours: 16×16 shared-memory tiles",
                                    [](const ladder::MatmulArgs& x, cudaStream_t s) { launch_tiled(x, nullptr, s); })
                 .with_kernels({ladder::kernel("tiled_kernel", tiled_kernel, kTile * kTile)}))
        .main_is("tiled16"));
}  // namespace

}  // namespace lab01
