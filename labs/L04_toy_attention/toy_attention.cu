// Lab 04 — toy attention: tiling + online softmax, no N×N matrix. YOUR FILE: the tiling is done;
// fill in the online softmax (TODO 1-4), then run
//   labs/check.sh L04
// (README.md has the questions; solution/ has a reference, for after you tried.)
//
//   O = softmax(Q Kᵀ · scale [+ causal mask]) V,   fp16 [B, H, N, D], fp32 arithmetic
//
// One block owns kBlockRows = 32 query rows of one head: 4 warps × 8 rows each. It walks the keys
// one tile of kBlockKeys = 32 at a time: the block loads the K and V tile into shared memory once,
// and every one of its 32 rows uses it. For each (row, tile) the owning warp
//   1. scores: lane j computes s_j = q·k_j · scale for key j of the tile (a whole dot product);
//   2. online softmax: the tile's max (a warp shuffle), the new running max, the rescale of the
//      history, p_j = e^(s_j − m_new), and the tile's Σ p_j (another shuffle);
//   3. O += P V: each lane owns D/32 output columns and adds p_j · v_j for the 32 keys.
// Nothing of size N×N ever exists: per row the state is (m, l) and D/32 floats per lane.
// This is step 03/04's algorithm on CUDA cores with the simplest possible thread mapping; it is a
// toy (slow: one warp does one row's dot products one key per lane) but its ledger is the real one.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <vector>

#include "common/check.hpp"
#include "common/dispatch.hpp"
#include "common/registry.hpp"
#include "common/strings.hpp"
#include "labs/L04_toy_attention/lab04.hpp"

namespace lab04 {
namespace {

constexpr int kWarpSize = 32;
constexpr int kWarps = 4;
constexpr int kThreads = kWarps * kWarpSize;
constexpr int kRowsPerWarp = 8;
constexpr int kBlockRows = kWarps * kRowsPerWarp;  // Br = 32
constexpr int kBlockKeys = kWarpSize;              // Bc = 32: lane j scores key j
constexpr unsigned kFullMask = 0xffffffffu;

// K rows are padded by one 4-byte word: lane j reads word j·(D/2 + 1) + c of the K tile, and
// D/2 + 1 is odd, so the 32 lanes hit 32 different banks (unpadded, all 32 would hit one bank).
template <int kHeadDim>
struct Smem {
  static constexpr int kKStride = kHeadDim + 2;  // halves
  __half q[kBlockRows][kHeadDim];
  __half k[kBlockKeys][kKStride];
  __half v[kBlockKeys][kHeadDim];
};

__device__ float warp_max(float x) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) x = fmaxf(x, __shfl_xor_sync(kFullMask, x, offset));
  return x;
}
__device__ float warp_sum(float x) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) x += __shfl_xor_sync(kFullMask, x, offset);
  return x;
}

// Rows [first, first + rows) of a [N, D] head into shared memory, 4 bytes per load; rows past N
// are zeros (they are masked or never stored).
template <int kHeadDim, int kStride>
__device__ void load_rows(__half (*dst)[kStride], const __half* src, int first, int rows, int n) {
  constexpr int kPairs = kHeadDim / 2;
  for (int i = threadIdx.x; i < rows * kPairs; i += kThreads) {
    const int r = i / kPairs, c = 2 * (i % kPairs);
    const int row = first + r;
    const __half2 x = row < n ? *reinterpret_cast<const __half2*>(src + std::int64_t(row) * kHeadDim + c)
                              : __floats2half2_rn(0.f, 0.f);
    *reinterpret_cast<__half2*>(&dst[r][c]) = x;
  }
}

template <int kHeadDim, bool kCausal>
__global__ void __launch_bounds__(kThreads)
    toy_attention_kernel(const __half* __restrict__ q, const __half* __restrict__ k,
                         const __half* __restrict__ v, __half* __restrict__ o, int n, float scale) {
  constexpr int kCols = kHeadDim / kWarpSize;  // output columns per lane: 2 or 4
  __shared__ Smem<kHeadDim> sm;
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int q0 = blockIdx.x * kBlockRows;
  const std::int64_t head = std::int64_t(blockIdx.y) * n * kHeadDim;

  load_rows<kHeadDim, kHeadDim>(sm.q, q + head, q0, kBlockRows, n);

  // The running state of this warp's rows: max, sum, and this lane's columns of O.
  float m[kRowsPerWarp], l[kRowsPerWarp], acc[kRowsPerWarp][kCols];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.f;
#pragma unroll
    for (int c = 0; c < kCols; ++c) acc[r][c] = 0.f;
  }

  // Causal: keys past the block's last row are never needed.
  const int kv_end = kCausal ? min(n, q0 + kBlockRows) : n;
  for (int kv0 = 0; kv0 < kv_end; kv0 += kBlockKeys) {
    __syncthreads();  // every warp is done with the previous tile before it is overwritten
    load_rows<kHeadDim, Smem<kHeadDim>::kKStride>(sm.k, k + head, kv0, kBlockKeys, n);
    load_rows<kHeadDim, kHeadDim>(sm.v, v + head, kv0, kBlockKeys, n);
    __syncthreads();  // the tile (and, the first time, Q) is complete

    const int key = kv0 + lane;
    // Unrolled: m, l and acc are indexed by r, and only compile-time indices keep them in registers.
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const int local = warp * kRowsPerWarp + r;
      const int row = q0 + local;

      // 1. this lane's score: key `key` against this row
      float s = 0.f;
      const __half2* qr = reinterpret_cast<const __half2*>(sm.q[local]);
      const __half2* kr = reinterpret_cast<const __half2*>(sm.k[lane]);
#pragma unroll 8
      for (int c = 0; c < kHeadDim / 2; ++c) {
        const float2 a = __half22float2(qr[c]), b = __half22float2(kr[c]);
        s = fmaf(a.x, b.x, fmaf(a.y, b.y, s));
      }
      const bool visible = key < n && (!kCausal || key <= row);
      s = visible ? s * scale : -INFINITY;

      // 2. online softmax. Every row sees key 0 in the first tile, so m_new is finite from the
      //    first tile on, and the rescale of an empty history is e^(−inf) = 0.
      // TODO(1): the new running max must cover the history too, not only this tile.
      const float m_new = warp_max(s);
      // TODO(2): the factor that moves l and acc from the old max m[r] to m_new.
      const float rescale = 1.f;
      const float p = __expf(s - m_new);  // 0 for a masked key
      // TODO(3): rescale the history l[r] before adding this tile's sum.
      l[r] = l[r] + warp_sum(p);
      m[r] = m_new;

      // 3. O = rescale·O + P V for this lane's columns 2·lane + 64·c2 (and +1)
#pragma unroll
      for (int c = 0; c < kCols; ++c) acc[r][c] *= rescale;
#pragma unroll 4
      for (int j = 0; j < kBlockKeys; ++j) {
        const float pj = __shfl_sync(kFullMask, p, j);
#pragma unroll
        for (int c2 = 0; c2 < kCols / 2; ++c2) {
          const float2 vj = __half22float2(*reinterpret_cast<const __half2*>(&sm.v[j][2 * lane + 64 * c2]));
          acc[r][2 * c2] = fmaf(pj, vj.x, acc[r][2 * c2]);
          acc[r][2 * c2 + 1] = fmaf(pj, vj.y, acc[r][2 * c2 + 1]);
        }
      }
    }
  }

  // Epilogue: the deferred normalization, O = acc / l, fp16.
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int row = q0 + warp * kRowsPerWarp + r;
    if (row >= n) continue;
    // TODO(4): the deferred normalization: every row's acc must be divided by its l.
    const float inv_l = 1.f;
    __half* dst = o + head + std::int64_t(row) * kHeadDim;
#pragma unroll
    for (int c2 = 0; c2 < kCols / 2; ++c2)
      *reinterpret_cast<__half2*>(dst + 2 * lane + 64 * c2) =
          __floats2half2_rn(acc[r][2 * c2] * inv_l, acc[r][2 * c2 + 1] * inv_l);
  }
}

void launch(const ladder::AttentionArgs& a, cudaStream_t stream) {
  const auto& sh = a.shape;
  ladder::dispatch_head_dim<64, 128>(sh.head_dim, [&]<int kHeadDim>() {
    const dim3 grid(ladder::ceil_div(sh.seqlen, kBlockRows), sh.batch * sh.heads);
    if (sh.causal)
      toy_attention_kernel<kHeadDim, true><<<grid, kThreads, 0, stream>>>(a.q, a.k, a.v, a.o, sh.seqlen, a.softmax_scale);
    else
      toy_attention_kernel<kHeadDim, false><<<grid, kThreads, 0, stream>>>(a.q, a.k, a.v, a.o, sh.seqlen, a.softmax_scale);
    CUDA_CHECK_LAUNCH("toy_attention_kernel");
  });
}

template <int kHeadDim>
std::vector<ladder::KernelInfo> kernels() {
  return {ladder::kernel(ladder::strprintf("toy_attention_kernel<D=%d>", kHeadDim), toy_attention_kernel<kHeadDim, false>, kThreads),
          ladder::kernel(ladder::strprintf("toy_attention_kernel<D=%d,causal>", kHeadDim), toy_attention_kernel<kHeadDim, true>, kThreads)};
}

LADDER_REGISTER_STEP(
    ladder::attention_step(kStep, "lab_toy_attention", "Lab 04: toy attention, tiling + online softmax", "00/naive")
        .add(ladder::attention_variant("toy", "Br=32 rows (4 warps × 8), Bc=32 keys (lane = key), CUDA cores", launch)
                 .for_head_dims({64, 128})
                 .with_kernels([](int d) { return d == 128 ? kernels<128>() : kernels<64>(); })));

}  // namespace

Tiles tiles(int head_dim) {
  const std::size_t smem = head_dim == 128 ? sizeof(Smem<128>) : sizeof(Smem<64>);
  return {kBlockRows, kBlockKeys, kThreads, smem};
}

}  // namespace lab04
