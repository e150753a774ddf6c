// Step 01 — tiled matrix multiply: reuse every element loaded from global memory through shared
// memory.
//
//   C = A B,   A [M, K], B [K, N], C [M, N], fp32, row-major
//
// The naive kernel gives each thread one element of C and lets it read a whole row of A and a
// whole column of B from global memory: 2·K element reads per output, 2·M·N·K in all. A block of
// T×T threads computes a T×T tile of C, and all of its threads need the same T rows of A and T
// columns of B. Staging them through shared memory one T×T slab at a time means each element is
// read from global memory once per block instead of once per thread, and reused T times: the
// global reads fall to 2·M·N·K / T. The same idea, with tensor cores on the inner product, is how
// every FlashAttention step treats Q, K and V.
#include <cublas_v2.h>

#include <algorithm>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/check.hpp"
#include "common/registry.hpp"
#include "common/strings.hpp"

namespace {

using ladder::ceil_div;
using ladder::MatmulArgs;

// Threads of a block are laid out x = column of C, y = row of C in both kernels, so a warp takes
// consecutive columns: its reads of B (and its writes of C) are coalesced, and its reads of A
// hit one address per row, which the hardware broadcasts.

// ---- Kernel 1: naive, one thread per element of C -------------------------------------------
constexpr int kNaiveTile = 16;

__global__ void __launch_bounds__(kNaiveTile * kNaiveTile)
    naive_matmul_kernel(const float* __restrict__ a, const float* __restrict__ b,
                        float* __restrict__ c, int m, int n, int k) {
  const int col = blockIdx.x * kNaiveTile + threadIdx.x;
  const int row = blockIdx.y * kNaiveTile + threadIdx.y;
  if (row >= m || col >= n) return;

  const float* a_row = a + std::int64_t(row) * k;
  float acc = 0.f;
  for (int t = 0; t < k; ++t) acc += a_row[t] * b[std::int64_t(t) * n + col];
  c[std::int64_t(row) * n + col] = acc;
}

// ---- Kernel 2: shared-memory tiles ----------------------------------------------------------
// A kTile×kTile block walks the K dimension one slab at a time: every thread loads one element of
// the A slab and one of the B slab, the block waits, and every thread then reads a row of the A
// slab and a column of the B slab from shared memory. Reads of As[ty][t] are one address per
// row (a broadcast) and reads of Bs[t][tx] are consecutive words, so neither needs padding
// against bank conflicts.
//
// Ragged edges: slab elements past the end of A or B are loaded as zeros (they add nothing to the
// product), and threads outside C still load and still reach both barriers — an early return
// here would leave the rest of the block waiting at __syncthreads forever.
template <int kTile>
__global__ void __launch_bounds__(kTile * kTile)
    tiled_matmul_kernel(const float* __restrict__ a, const float* __restrict__ b,
                        float* __restrict__ c, int m, int n, int k) {
  __shared__ float as[kTile][kTile];  // as[r][t] = A[block row + r, slab + t]
  __shared__ float bs[kTile][kTile];  // bs[t][c] = B[slab + t, block col + c]

  const int tx = threadIdx.x;
  const int ty = threadIdx.y;
  const int col = blockIdx.x * kTile + tx;
  const int row = blockIdx.y * kTile + ty;

  float acc = 0.f;
  for (int slab = 0; slab < k; slab += kTile) {
    const int a_col = slab + tx;
    const int b_row = slab + ty;
    as[ty][tx] = (row < m && a_col < k) ? a[std::int64_t(row) * k + a_col] : 0.f;
    bs[ty][tx] = (b_row < k && col < n) ? b[std::int64_t(b_row) * n + col] : 0.f;
    __syncthreads();  // the slab is complete before anyone reads it

#pragma unroll
    for (int t = 0; t < kTile; ++t) acc += as[ty][t] * bs[t][tx];
    __syncthreads();  // everyone is done with the slab before the next one overwrites it
  }

  if (row < m && col < n) c[std::int64_t(row) * n + col] = acc;
}

// ---- cuBLAS, the peer -----------------------------------------------------------------------
// Any cuBLAS failure throws with the call, the place and cuBLAS's own words for the status.
void check_cublas(cublasStatus_t status, const char* call, const char* file, int line) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  throw std::runtime_error(ladder::strprintf("%s:%d: %s failed: %s (%s)", file, line, call,
                                             cublasGetStatusName(status),
                                             cublasGetStatusString(status)));
}
#define CUBLAS_CHECK(call) check_cublas((call), #call, __FILE__, __LINE__)

// One handle for the whole process, created by the first launch (the harness's warm-up run):
// cublasCreate costs milliseconds and allocates device memory, so it must not be paid per launch.
// It is destroyed at exit without a status check, because a destructor must not throw.
class CublasHandle {
 public:
  CublasHandle() {
    CUBLAS_CHECK(cublasCreate(&handle_));
    // Plain fp32 arithmetic: no TF32 tensor cores, so the peer does the same math as the lessons.
    CUBLAS_CHECK(cublasSetMathMode(handle_, CUBLAS_DEFAULT_MATH));
  }
  ~CublasHandle() { cublasDestroy(handle_); }
  CublasHandle(const CublasHandle&) = delete;
  CublasHandle& operator=(const CublasHandle&) = delete;
  cublasHandle_t get() const { return handle_; }

 private:
  cublasHandle_t handle_ = nullptr;
};

cublasHandle_t cublas_handle() {
  static CublasHandle handle;  // thread-safe lazy construction (C++11 magic statics)
  return handle.get();
}

// ---- Host side ------------------------------------------------------------------------------
// gridDim.y is limited to 65535 blocks, which a tall C (M > 65535·tile) would exceed. Such a C is
// computed as horizontal bands of rows, one launch per band; a band is an ordinary smaller
// problem whose A and C start `first_row` rows further on and whose B is the whole of B.
constexpr int kMaxGridY = 65535;

template <typename LaunchBand>
void for_each_row_band(const MatmulArgs& args, int tile, LaunchBand launch_band) {
  const auto& sh = args.shape;
  for (int first_row = 0; first_row < sh.m;) {
    const int rows = std::min(kMaxGridY * tile, sh.m - first_row);
    launch_band(args.a + std::int64_t(first_row) * sh.k, args.c + std::int64_t(first_row) * sh.n,
                rows);
    first_row += rows;
  }
}

dim3 tile_grid(int rows, int cols, int tile) {
  return dim3(unsigned(ceil_div(std::int64_t(cols), std::int64_t(tile))),
              unsigned(ceil_div(std::int64_t(rows), std::int64_t(tile))));
}

void launch_naive(const MatmulArgs& args, cudaStream_t stream) {
  const auto& sh = args.shape;
  for_each_row_band(args, kNaiveTile, [&](const float* a, float* c, int rows) {
    naive_matmul_kernel<<<tile_grid(rows, sh.n, kNaiveTile), dim3(kNaiveTile, kNaiveTile), 0,
                          stream>>>(a, args.b, c, rows, sh.n, sh.k);
    CUDA_CHECK_LAUNCH("naive_matmul_kernel");
  });
}

template <int kTile>
void launch_tiled(const MatmulArgs& args, cudaStream_t stream) {
  const auto& sh = args.shape;
  for_each_row_band(args, kTile, [&](const float* a, float* c, int rows) {
    tiled_matmul_kernel<kTile><<<tile_grid(rows, sh.n, kTile), dim3(kTile, kTile), 0, stream>>>(
        a, args.b, c, rows, sh.n, sh.k);
    CUDA_CHECK_LAUNCH("tiled_matmul_kernel");
  });
}

// cuBLAS is column-major. Row-major C [M, N] has the bytes of column-major Cᵀ [N, M], and
// likewise A is Aᵀ [K, M] and B is Bᵀ [N, K]; so C = A B is computed as Cᵀ = Bᵀ Aᵀ, with no
// transposes and B passed first.
void launch_cublas(const MatmulArgs& args, cudaStream_t stream) {
  const auto& sh = args.shape;
  const float alpha = 1.f;
  const float beta = 0.f;  // C is poisoned before the launch: beta = 0 ignores it entirely
  cublasHandle_t handle = cublas_handle();
  CUBLAS_CHECK(cublasSetStream(handle, stream));
  CUBLAS_CHECK(cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, sh.n, sh.m, sh.k, &alpha, args.b,
                           sh.n, args.a, sh.k, &beta, args.c, sh.n));
}

// The model count of element reads from global memory: what the kernels ask for, before any cache
// helps (in practice L1 and L2 absorb much of the naive kernel's re-reading, which is why its
// measured slowdown is smaller than this ledger says).
std::vector<std::string> ledger(const ladder::MatmulShape& s) {
  const double naive = 2.0 * s.m * double(s.n) * s.k;
  const double minimum = double(s.m) * s.k + double(s.k) * s.n;
  auto reads = [](double elements) {
    return ladder::strprintf("%s element reads (%.3g GB)", ladder::grouped(elements).c_str(),
                             elements * sizeof(float) / 1e9);
  };
  return {
      "global-read ledger (model count, ignoring caches; every variant writes C once):",
      "  naive    2·M·N·K    = " + reads(naive),
      "  tiled16  2·M·N·K/16 = " + reads(naive / 16),
      "  tiled32  2·M·N·K/32 = " + reads(naive / 32),
      "  A and B read once   = " + reads(minimum),
      "course puzzle, 64×64 matrices: about 524,288 element reads naive, 32,768 with 16×16 "
      "tiles, 16,384 with 32×32",
  };
}

template <int kTile>
ladder::Variant tiled_variant(const char* name, const char* description) {
  return ladder::matmul_variant(name, description, launch_tiled<kTile>)
      .with_kernels({ladder::kernel("tiled_matmul_kernel", tiled_matmul_kernel<kTile>, kTile * kTile)});
}

LADDER_REGISTER_STEP(
    ladder::matmul_step(1, "tiled_matmul", "Tiled matmul: reuse through shared memory")
        .with_notes(ledger)
        .add(ladder::matmul_variant("naive", "one thread per C element, A and B read straight from "
                                             "global memory", launch_naive)
                 .with_kernels({ladder::kernel("naive_matmul_kernel", naive_matmul_kernel,
                                               kNaiveTile * kNaiveTile)}))
        .add(tiled_variant<16>("tiled16", "16×16 shared-memory tiles: every loaded element reused 16 times"))
        .add(tiled_variant<32>("tiled32", "32×32 shared-memory tiles: every loaded element reused 32 times"))
        .add(ladder::matmul_variant("cublas", "cublasSgemm, fp32 (default math mode, no TF32)",
                                    launch_cublas)
                 .as_peer())
        .main_is("tiled32"));  // the best lesson; cuBLAS is compared with it

}  // namespace
