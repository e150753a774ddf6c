// Step 04 — FlashAttention-2 loop order on CUDA cores: Q blocks outer, K/V blocks inner.
//
// Step 03 (FlashAttention-1) put the K/V blocks in the outer loop. Every Q block's running
// output O_i and its row statistics m_i, l_i therefore made a round trip through global memory
// once per K/V block, and the whole head was one thread block, so the grid had only B·H blocks.
// FlashAttention-2 swaps the two loops:
//
//   grid = (ceil(N / Br), B·H): one thread block per Q block of one head
//   Q_i -> shared memory, once;  m = −inf, l = 0, O = 0 on chip
//   for each K/V block j that Q_i can see (K_j, V_j streamed through shared memory):
//     S = Q_i K_jᵀ · scale                                  (fp32, scalar FFMA)
//     m_new = max(m, rowmax(S));  P = exp(S − m_new)
//     l = e^(m − m_new) l + rowsum(P);  O = e^(m − m_new) O + P V_j;  m = m_new
//   O_i = O / l                                             (once: deferred normalization)
//
// The diff against step 03 is the chapter. Four things change, each marked "FA2:" below:
//   1. the loop order (and with it the grid): O, m and l never leave the chip, and there are
//      B·H·N/Br thread blocks instead of B·H;
//   2. the normalization is deferred: O and l are only rescaled by e^(m − m_new) inside the loop,
//      and divided once at the end (step 03 renormalized O by l_new on every visit);
//   3. the causal mask works at two levels: whole K/V blocks past the diagonal are never loaded,
//      and the element mask runs only on the blocks that cross it;
//   4. K/V tiles are double-buffered with cp.async: tile j+1 is in flight while tile j is used.
// Bc drops from 64 to 32 to make room in shared memory (see kBlockN). Everything else is step
// 03's code, unchanged, from common/device/cuda_core_attention.cuh: the thread layout, the
// register micro-tiles, P through shared memory (S stays in registers), the exp2 form of the
// softmax, the masks' arithmetic.
//
// Arithmetic is still scalar fp32 FFMA on the CUDA cores. P and the O accumulator live in
// shared memory, as in the seed's v2.0; step 05 moves both products onto the tensor cores and
// both matrices into registers.
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>

#include "common/check.hpp"
#include "common/cuda_core_launch.hpp"
#include "common/device/cuda_core_attention.cuh"
#include "common/device/ptx.cuh"
#include "common/math.hpp"
#include "common/registry.hpp"
#include "common/strings.hpp"

namespace {

using ladder::AttentionArgs;
using ladder::ceil_div;
namespace cuda_core = ladder::cuda_core;
using cuda_core::kChunk;
using cuda_core::kLanesPerRow;  // thread (ty, tx) = (tid / 16, tid % 16): see the header
using cuda_core::kRowGroups;
using cuda_core::kThreads;

// ---- Tiles ----------------------------------------------------------------------------------
// FA2: the K/V tile shrinks from step 03's 64 keys to 32. Shared memory now also holds the O
// accumulator of 128 rows and a second K/V stage, and with 32 keys two blocks (102 KB each) fit
// on an SM at D = 64; at D = 128 one block takes 182 KB. See Tile::kSmemBytes.
constexpr int kBlockN = 32;  // keys per K/V tile (Bc)
constexpr int kStages = 2;   // FA2: K/V tiles in flight (cp.async double buffering)

template <int kHeadDim, int kBlockM>
struct Tile : cuda_core::TileLayout<kHeadDim, kBlockM, kBlockN> {
  using Base = cuda_core::TileLayout<kHeadDim, kBlockM, kBlockN>;
  static constexpr int kOStride = kHeadDim;  // floats; rows are read whole, no conflict
  static constexpr std::size_t kOBytes = std::size_t(kBlockM) * kOStride * sizeof(float);
  static_assert(kOBytes % 16 == 0);
  // Q, P, O (fp32), then kStages × (K, V) (fp16).
  static constexpr std::size_t kSmemBytes =
      Base::kQBytes + Base::kPBytes + kOBytes + kStages * 2 * Base::kKvBytes;
};

// ---- Loading K_j and V_j --------------------------------------------------------------------
// FA2: cp.async copies 16-byte chunks from global to shared memory without passing through
// registers, so the copy of tile j+1 runs while the threads compute on tile j. Keys past the end
// of the sequence are zero-filled (src_bytes = 0: nothing is read, and the source address is
// clamped to the head's first row so that it stays valid anyway); their scores are masked.
template <class T>
__device__ __forceinline__ void load_kv_tile(__half* k_tile, __half* v_tile, const __half* k_head,
                                             const __half* v_head, int kv_start, int n) {
  constexpr int kChunksPerRow = T::kHeadDim / kChunk;
  constexpr int kChunksPerThread = kBlockN * kChunksPerRow / kThreads;
  static_assert(kBlockN * kChunksPerRow % kThreads == 0, "every thread copies whole chunks");
#pragma unroll
  for (int t = 0; t < kChunksPerThread; ++t) {
    const int c = int(threadIdx.x) + t * kThreads;
    const int row = c / kChunksPerRow;
    const int col = (c % kChunksPerRow) * kChunk;
    const bool valid = kv_start + row < n;
    const std::int64_t src = valid ? std::int64_t(kv_start + row) * T::kHeadDim + col : 0;
    const int bytes = valid ? 16 : 0;
    ladder::ptx::cp_async_16(k_tile + row * T::kKvStride + col, k_head + src, bytes);
    ladder::ptx::cp_async_16(v_tile + row * T::kKvStride + col, v_head + src, bytes);
  }
}

// ---- Online softmax, in registers -----------------------------------------------------------
// FA2: the running state (m, l) lives in registers for the whole kernel, and the tile's
// probabilities are taken against the NEW running maximum, P = exp(S − m_new), so that the
// output needs only the factor alpha = e^(m − m_new) on its history and no division:
//
//   m_new = max(m, rowmax(S));  P = exp(S − m_new);  l = alpha·l + rowsum(P)
//
// l is kept as a per-lane partial sum (alpha is the same on all 16 lanes of a row, so the
// partial sums rescale consistently); it is reduced across the lanes once, in the epilogue.
//
// −inf guard: a row whose keys so far are all masked has m_new = −inf, and −inf − (−inf) is NaN.
// The reference point is clamped to 0 for such a row, which makes its P and alpha exactly 0.
template <int kRows, int kCols>
__device__ __forceinline__ void softmax_update(float (&s)[kRows][kCols], float (&m)[kRows],
                                               float (&l)[kRows], float (&alpha)[kRows]) {
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    float tile_max = s[i][0];
#pragma unroll
    for (int j = 1; j < kCols; ++j) tile_max = fmaxf(tile_max, s[i][j]);
    const float m_new = fmaxf(m[i], cuda_core::row_max(tile_max));
    const float m_ref = m_new == -INFINITY ? 0.f : m_new;

    alpha[i] = ladder::ptx::exp2_approx(m[i] - m_ref);  // 0 on the first visit (m = −inf)
    float sum = 0.f;
#pragma unroll
    for (int j = 0; j < kCols; ++j) {
      s[i][j] = ladder::ptx::exp2_approx(s[i][j] - m_ref);
      sum += s[i][j];
    }
    l[i] = alpha[i] * l[i] + sum;
    m[i] = m_new;
  }
}

// ---- O = alpha·O + P V_j, in shared memory --------------------------------------------------
// FA2: the accumulator is not normalized inside the loop, only rescaled; it stays on chip for
// the whole kernel (step 03 read it from and wrote it to global memory on every visit). Each
// thread only ever touches its own micro-tile of O, so no barrier guards it.
template <class T>
__device__ __forceinline__ void rescale_accumulator(float* o_tile, const float (&alpha)[T::kRows],
                                                    const float (&acc)[T::kRows][T::kOutCols],
                                                    int ty, int tx) {
#pragma unroll
  for (int i = 0; i < T::kRows; ++i) {
    float4* row =
        reinterpret_cast<float4*>(o_tile + (ty + i * kRowGroups) * T::kOStride + tx * T::kOutCols);
#pragma unroll
    for (int d4 = 0; d4 < T::kOutCols / 4; ++d4) {
      float4 o = row[d4];
      o.x = fmaf(alpha[i], o.x, acc[i][4 * d4 + 0]);
      o.y = fmaf(alpha[i], o.y, acc[i][4 * d4 + 1]);
      o.z = fmaf(alpha[i], o.z, acc[i][4 * d4 + 2]);
      o.w = fmaf(alpha[i], o.w, acc[i][4 * d4 + 3]);
      row[d4] = o;
    }
  }
}

// ---- The kernel -----------------------------------------------------------------------------
// Two blocks per SM at D = 64 (102 KB of shared memory each, at most 128 registers per thread);
// one at D = 128 (182 KB).
template <int kHeadDim>
constexpr int kMinBlocksPerSm = kHeadDim == 64 ? 2 : 1;

template <int kHeadDim, int kBlockM>
__global__ void __launch_bounds__(kThreads, kMinBlocksPerSm<kHeadDim>)
    fa_v2_0_kernel(const __half* __restrict__ q, const __half* __restrict__ k,
                   const __half* __restrict__ v, __half* __restrict__ o, int n, float scale_log2,
                   bool causal) {
  using T = Tile<kHeadDim, kBlockM>;
  extern __shared__ __align__(16) unsigned char smem[];
  float* q_tile = reinterpret_cast<float*>(smem);
  float* p_tile = reinterpret_cast<float*>(smem + T::kQBytes);
  float* o_tile = reinterpret_cast<float*>(smem + T::kQBytes + T::kPBytes);
  __half* kv_tiles = reinterpret_cast<__half*>(smem + T::kQBytes + T::kPBytes + T::kOBytes);
  // Stage s holds K at kv_tiles + 2·s·tile and V right after it.
  constexpr int kTileHalves = kBlockN * T::kKvStride;

  const int ty = threadIdx.x / kLanesPerRow;
  const int tx = threadIdx.x % kLanesPerRow;

  // FA2: one thread block per Q block. Causal Q blocks near the end of the sequence see the most
  // K/V blocks; handing them out first (highest blockIdx.x first) keeps the long ones from being
  // the last to start.
  const int q_block = causal ? int(gridDim.x) - 1 - int(blockIdx.x) : int(blockIdx.x);
  const int q_start = q_block * kBlockM;
  const std::int64_t head = std::int64_t(blockIdx.y) * n * kHeadDim;

  // FA2, causal level 1: the last row of this Q block sees keys up to min(q_start + Br, N) − 1;
  // every K/V block after that is entirely above the diagonal and is never loaded.
  const int kv_end = causal ? min(q_start + kBlockM, n) : n;
  const int num_kv_blocks = ceil_div(kv_end, kBlockN);

  // Tile 0 starts its copy first, so that it overlaps the (synchronous) staging of Q.
  load_kv_tile<T>(kv_tiles, kv_tiles + kTileHalves, k + head, v + head, 0, n);
  ladder::ptx::cp_async_commit();
  // FA2: Q_i is staged once per thread block; step 03 did it once per (K/V block, Q block) pair.
  cuda_core::load_q_tile<T>(q_tile, q + head, q_start, n, scale_log2);

  // The running state: m and l in registers, O in shared memory (each thread zeroes its own
  // micro-tile, which only it will ever touch).
  float m[T::kRows], l[T::kRows];
#pragma unroll
  for (int i = 0; i < T::kRows; ++i) {
    m[i] = -INFINITY;
    l[i] = 0.f;
    float4* row =
        reinterpret_cast<float4*>(o_tile + (ty + i * kRowGroups) * T::kOStride + tx * T::kOutCols);
#pragma unroll
    for (int d4 = 0; d4 < T::kOutCols / 4; ++d4) row[d4] = make_float4(0.f, 0.f, 0.f, 0.f);
  }

  for (int j = 0; j < num_kv_blocks; ++j) {
    const int kv_start = j * kBlockN;
    const int stage = j % kStages;
    __half* k_tile = kv_tiles + 2 * stage * kTileHalves;
    __half* v_tile = k_tile + kTileHalves;

    // FA2: wait for tile j (the only group in flight), then one barrier that does two jobs: tile
    // j (and, on the first pass, Q) is visible to every thread, and every thread has finished
    // iteration j − 1, so the other stage and P may be overwritten.
    ladder::ptx::cp_async_wait<0>();
    __syncthreads();
    if (j + 1 < num_kv_blocks) {
      __half* next_k = kv_tiles + 2 * ((j + 1) % kStages) * kTileHalves;
      load_kv_tile<T>(next_k, next_k + kTileHalves, k + head, v + head, kv_start + kBlockN, n);
      ladder::ptx::cp_async_commit();
    }

    float s[T::kRows][T::kScoreCols];
    cuda_core::compute_scores<T>(s, q_tile, k_tile, ty, tx);
    // FA2, causal level 2: only a tile that crosses the diagonal (its last key is after this
    // block's first row) or the end of the sequence needs the element mask.
    const bool crosses_diagonal = causal && kv_start + kBlockN - 1 > q_start;
    if (crosses_diagonal || kv_start + kBlockN > n)
      cuda_core::mask_scores(s, q_start + ty, kv_start + tx, n, causal);

    float alpha[T::kRows];
    softmax_update(s, m, l, alpha);
    cuda_core::store_probs<T>(p_tile, s, ty, tx);
    __syncthreads();  // all of P is written before any row of it is read

    float acc[T::kRows][T::kOutCols];
    cuda_core::multiply_pv<T>(acc, p_tile, v_tile, ty, tx);
    rescale_accumulator<T>(o_tile, alpha, acc, ty, tx);
  }

  // FA2: the one division. Every real row has seen at least its own key (causal) or key 0, so
  // l > 0 for it; the guard keeps padded rows (never stored) finite anyway.
  float out[T::kRows][T::kOutCols];
#pragma unroll
  for (int i = 0; i < T::kRows; ++i) {
    const float total = cuda_core::row_sum(l[i]);
    const float inv_l = total > 0.f ? 1.f / total : 0.f;
    const float* row = o_tile + (ty + i * kRowGroups) * T::kOStride + tx * T::kOutCols;
#pragma unroll
    for (int d = 0; d < T::kOutCols; ++d) out[i][d] = row[d] * inv_l;
  }
  cuda_core::store_output<T>(o + head, out, q_start, n, ty, tx);
}

// ---- Host side ------------------------------------------------------------------------------
constexpr int kBlockM128 = 128;  // Br: the seed's v2.0

// One (D, Br) instantiation, as common/cuda_core_launch.hpp takes it.
template <int kHeadDim, int kBlockM>
struct Fa2 {
  static void launch(const AttentionArgs& a, cudaStream_t stream) {
    const auto& sh = a.shape;
    // All of the unified L1 as shared memory: at D = 64 two blocks of 102 KB fit only then.
    CUDA_CHECK(cudaFuncSetAttribute(fa_v2_0_kernel<kHeadDim, kBlockM>,
                                    cudaFuncAttributePreferredSharedMemoryCarveout,
                                    int(cudaSharedmemCarveoutMaxShared)));
    // FA2: one thread block per (Q block, batch · head).
    const dim3 grid(ceil_div(sh.seqlen, kBlockM), sh.batch * sh.heads);
    cuda_core::launch_kernel("fa_v2_0_kernel", fa_v2_0_kernel<kHeadDim, kBlockM>, grid,
                             Tile<kHeadDim, kBlockM>::kSmemBytes, stream, a.q, a.k, a.v, a.o,
                             sh.seqlen, a.softmax_scale * ladder::kLog2e, sh.causal);
  }
  static ladder::KernelInfo info() {
    return ladder::kernel(ladder::strprintf("fa_v2_0_kernel<%d>", kHeadDim),
                          fa_v2_0_kernel<kHeadDim, kBlockM>, kThreads,
                          Tile<kHeadDim, kBlockM>::kSmemBytes);
  }
};

// What moves through global memory: Q read once and O written once, K and V read once per Q
// block that sees them (mostly from L2), nothing else. Compare step 03's ledger.
std::vector<std::string> ledger(const ladder::AttentionShape& s) {
  const int n = s.seqlen;
  const double bh = double(s.batch) * s.heads;
  const double row_bytes = double(s.head_dim) * sizeof(__half);
  const int num_q = ceil_div(n, kBlockM128);
  double kv_rows = 0;  // K/V rows loaded, summed over the Q blocks of one head
  for (int i = 0; i < num_q; ++i) {
    const int kv_end = s.causal ? std::min((i + 1) * kBlockM128, n) : n;
    kv_rows += std::min(double(ceil_div(kv_end, kBlockN)) * kBlockN, double(n));
  }
  const double kv_bytes = bh * kv_rows * 2 * row_bytes;
  const double bytes = bh * 2 * n * row_bytes + kv_bytes;
  const std::size_t smem =
      s.head_dim == 128 ? Tile<128, kBlockM128>::kSmemBytes : Tile<64, kBlockM128>::kSmemBytes;
  return {
      ladder::strprintf("grid: %d Q blocks × %.0f heads = %.0f thread blocks of %d threads, %zu B "
                        "of shared memory each",
                        num_q, bh, num_q * bh, kThreads, smem),
      ladder::strprintf("K and V are requested once per Q block that sees them: %.2f GB (L2 "
                        "serves the repeats it can hold); Q and O once: %.3f GB; no running "
                        "state leaves the chip",
                        kv_bytes / 1e9, bh * 2 * n * row_bytes / 1e9),
      ladder::strprintf("ledger: %.2f GB requested from global memory, arithmetic intensity "
                        "%.0f FLOP/byte",
                        bytes / 1e9, ladder::flops(s) / bytes),
  };
}

LADDER_REGISTER_STEP(
    ladder::attention_step(4, "fa_v2_0",
                           "FlashAttention-2 loop order on CUDA cores: Q outer, deferred normalization",
                           "03/br64")
        .with_notes(ledger)
        .add(ladder::attention_variant("br128", "Q block outer (Br=128, Bc=32), cp.async K/V double "
                                                "buffer, scalar FFMA",
                                       cuda_core::launch<Fa2, kBlockM128>)
                 .needs_sm(80)  // cp.async
                 .batch_heads_on_grid_yz()  // grid (query blocks, B·H)
                 .for_head_dims({64, 128})
                 .with_kernels(cuda_core::kernels<Fa2, kBlockM128>)));

}  // namespace
