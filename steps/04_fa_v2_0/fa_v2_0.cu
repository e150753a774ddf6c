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
// Bc drops from 64 to 32 to make room in shared memory (see kBlockN). Everything else (the thread
// layout, the register micro-tiles, P through shared memory (S stays in registers), the exp2 form of the softmax,
// the masks' arithmetic) is step 03's code, unchanged.
//
// Arithmetic is still scalar fp32 FFMA on the CUDA cores. P and the O accumulator live in
// shared memory, as in the seed's v2.0; step 05 moves both products onto the tensor cores and
// both matrices into registers.
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>

#include "common/check.hpp"
#include "common/device/ptx.cuh"
#include "common/dispatch.hpp"
#include "common/math.hpp"
#include "common/registry.hpp"
#include "common/strings.hpp"

namespace {

using ladder::AttentionArgs;
using ladder::ceil_div;

// ---- Thread layout and tiles ----------------------------------------------------------------
// 256 threads form a 16 × 16 grid: ty = tid / 16 picks a row group, tx = tid % 16 a lane in it.
// Thread (ty, tx) owns rows ty, ty + 16, ty + 32, ... of the Q block (kRows of them) and, in
// each of them, a few columns of S and of O. The 16 lanes of a row group are one half of a warp,
// so a row's maximum and sum are reduced with four xor-shuffles and no shared memory.
constexpr int kThreads = 256;
constexpr int kLanesPerRow = 16;
constexpr int kRowGroups = kThreads / kLanesPerRow;
constexpr int kWarpSize = 32;

// FA2: the K/V tile shrinks from step 03's 64 keys to 32. Shared memory now also holds the O
// accumulator of 128 rows and a second K/V stage, and with 32 keys two blocks (102 KB each) fit
// on an SM at D = 64; at D = 128 one block takes 182 KB. See Tile::kSmemBytes.
constexpr int kBlockN = 32;  // keys per K/V tile (Bc)
constexpr int kStages = 2;   // FA2: K/V tiles in flight (cp.async double buffering)

// Shared-memory row padding, 16 bytes each. For K and V (fp16) it keeps every row 16-byte
// aligned for the vector loads (and cp.async) while shifting consecutive rows by 4 banks, so the
// 16 lanes that read 16 different rows of K at the same column hit 8 different bank quads: two
// wavefronts, the minimum for 256 bytes. For Q and P (fp32) it puts the two rows that one warp
// reads at once into different banks.
constexpr int kHalfPad = 8;
constexpr int kFloatPad = 4;
constexpr int kChunk = 8;  // halves per 16-byte vector load

// exp(x) = 2^(x·log2 e). Q is multiplied by scale·log2(e) when it is staged, so S comes out
// already in base-2 units and every exponential is one ex2 (MUFU.EX2). m is kept in those units.
using ladder::kLog2e;

template <int kHeadDim, int kBlockM>
struct Tile {
  static_assert(kBlockM % kRowGroups == 0 && kBlockN % kLanesPerRow == 0 &&
                kHeadDim % kLanesPerRow == 0 && kHeadDim % kChunk == 0);
  static constexpr int kRows = kBlockM / kRowGroups;         // rows of a thread's micro-tiles
  static constexpr int kScoreCols = kBlockN / kLanesPerRow;  // its columns of S (tx + 16·j)
  static constexpr int kOutCols = kHeadDim / kLanesPerRow;   // its columns of O (contiguous)
  static_assert(kOutCols == 4 || kOutCols == 8, "a thread's O columns are one 8- or 16-byte load");

  static constexpr int kKvStride = kHeadDim + kHalfPad;  // halves
  static constexpr int kQStride = kHeadDim + kFloatPad;  // floats
  static constexpr int kPStride = kBlockN + kFloatPad;   // floats
  static constexpr int kOStride = kHeadDim;              // floats; rows are read whole, no conflict

  static constexpr std::size_t kQBytes = std::size_t(kBlockM) * kQStride * sizeof(float);
  static constexpr std::size_t kPBytes = std::size_t(kBlockM) * kPStride * sizeof(float);
  static constexpr std::size_t kOBytes = std::size_t(kBlockM) * kOStride * sizeof(float);
  static constexpr std::size_t kKvBytes = std::size_t(kBlockN) * kKvStride * sizeof(__half);
  // Q, P, O (fp32), then kStages × (K, V) (fp16). Every piece is a multiple of 16 bytes, so every
  // piece starts 16-byte aligned.
  static constexpr std::size_t kSmemBytes = kQBytes + kPBytes + kOBytes + kStages * 2 * kKvBytes;
  static_assert(kQBytes % 16 == 0 && kPBytes % 16 == 0 && kOBytes % 16 == 0 && kKvBytes % 16 == 0);
};

// Eight halves (one 16-byte load) or four (one 8-byte load) to floats.
template <int kCount>
__device__ __forceinline__ void load_halves(const __half* src, float (&dst)[kCount]) {
  static_assert(kCount == 4 || kCount == 8);
  if constexpr (kCount == 8) {
    const uint4 raw = *reinterpret_cast<const uint4*>(src);
    const __half2* h = reinterpret_cast<const __half2*>(&raw);
#pragma unroll
    for (int t = 0; t < 4; ++t) {
      const float2 f = __half22float2(h[t]);
      dst[2 * t] = f.x;
      dst[2 * t + 1] = f.y;
    }
  } else {
    const uint2 raw = *reinterpret_cast<const uint2*>(src);
    const __half2* h = reinterpret_cast<const __half2*>(&raw);
#pragma unroll
    for (int t = 0; t < 2; ++t) {
      const float2 f = __half22float2(h[t]);
      dst[2 * t] = f.x;
      dst[2 * t + 1] = f.y;
    }
  }
}

// ---- Loading K_j and V_j --------------------------------------------------------------------
// FA2: cp.async copies 16-byte chunks from global to shared memory without passing through
// registers, so the copy of tile j+1 runs while the threads compute on tile j. Keys past the end
// of the sequence are zero-filled (src_bytes = 0: nothing is read, and the source address is
// clamped to the head's first row so that it stays valid anyway); their scores are masked.
template <int kHeadDim, int kBlockM>
__device__ __forceinline__ void load_kv_tile(__half* k_tile, __half* v_tile, const __half* k_head,
                                             const __half* v_head, int kv_start, int n) {
  using T = Tile<kHeadDim, kBlockM>;
  constexpr int kChunksPerRow = kHeadDim / kChunk;
  constexpr int kChunksPerThread = kBlockN * kChunksPerRow / kThreads;
  static_assert(kBlockN * kChunksPerRow % kThreads == 0, "every thread copies whole chunks");
#pragma unroll
  for (int t = 0; t < kChunksPerThread; ++t) {
    const int c = int(threadIdx.x) + t * kThreads;
    const int row = c / kChunksPerRow;
    const int col = (c % kChunksPerRow) * kChunk;
    const bool valid = kv_start + row < n;
    const std::int64_t src = valid ? std::int64_t(kv_start + row) * kHeadDim + col : 0;
    const int bytes = valid ? 16 : 0;
    ladder::ptx::cp_async_16(k_tile + row * T::kKvStride + col, k_head + src, bytes);
    ladder::ptx::cp_async_16(v_tile + row * T::kKvStride + col, v_head + src, bytes);
  }
}

// ---- Loading Q_i ----------------------------------------------------------------------------
// Q_i is converted to fp32 and multiplied by scale·log2(e) once, as it is staged: the inner
// product then needs no conversion on the Q side and no scaling of S. Rows past the end of the
// sequence are zeros (their scores are finite, their outputs are never stored).
// FA2: this happens once per thread block; step 03 did it once per (K/V block, Q block) pair.
template <int kHeadDim, int kBlockM>
__device__ __forceinline__ void load_q_tile(float* q_tile, const __half* q_head, int q_start, int n,
                                            float scale_log2) {
  using T = Tile<kHeadDim, kBlockM>;
  constexpr int kChunksPerRow = kHeadDim / kChunk;
  for (int c = threadIdx.x; c < kBlockM * kChunksPerRow; c += kThreads) {
    const int row = c / kChunksPerRow;
    const int col = (c % kChunksPerRow) * kChunk;
    float x[kChunk] = {};
    if (q_start + row < n)
      load_halves<kChunk>(q_head + std::int64_t(q_start + row) * kHeadDim + col, x);
    float4* dst = reinterpret_cast<float4*>(q_tile + row * T::kQStride + col);
    dst[0] =
        make_float4(x[0] * scale_log2, x[1] * scale_log2, x[2] * scale_log2, x[3] * scale_log2);
    dst[1] =
        make_float4(x[4] * scale_log2, x[5] * scale_log2, x[6] * scale_log2, x[7] * scale_log2);
  }
}

// ---- S = Q_i K_jᵀ (scaled, base 2), in registers --------------------------------------------
// Thread (ty, tx) computes rows ty + 16·i and columns tx + 16·j of S: a kRows × kScoreCols
// micro-tile. Per 8-wide slice of the head dimension it loads 2·kRows float4 of Q (the two row
// groups of a warp read two rows: broadcasts) and kScoreCols 16-byte rows of K (16 lanes, 16 rows:
// two wavefronts thanks to the padding), converts the K halves once, and issues
// 8·kRows·kScoreCols FFMAs. Interleaving the columns (tx + 16·j rather than tx·kScoreCols + j)
// is what spreads a warp's K reads over 16 different rows.
template <int kHeadDim, int kBlockM>
__device__ __forceinline__ void compute_scores(
    float (&s)[Tile<kHeadDim, kBlockM>::kRows][Tile<kHeadDim, kBlockM>::kScoreCols],
    const float* q_tile, const __half* k_tile, int ty, int tx) {
  using T = Tile<kHeadDim, kBlockM>;
#pragma unroll
  for (int i = 0; i < T::kRows; ++i)
#pragma unroll
    for (int j = 0; j < T::kScoreCols; ++j) s[i][j] = 0.f;

#pragma unroll
  for (int k0 = 0; k0 < kHeadDim; k0 += kChunk) {
    float kf[T::kScoreCols][kChunk];
#pragma unroll
    for (int j = 0; j < T::kScoreCols; ++j)
      load_halves<kChunk>(k_tile + (tx + j * kLanesPerRow) * T::kKvStride + k0, kf[j]);
#pragma unroll
    for (int i = 0; i < T::kRows; ++i) {
      const float* q_row = q_tile + (ty + i * kRowGroups) * T::kQStride + k0;
      const float4 lo = *reinterpret_cast<const float4*>(q_row);
      const float4 hi = *reinterpret_cast<const float4*>(q_row + 4);
      const float qv[kChunk] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
#pragma unroll
      for (int j = 0; j < T::kScoreCols; ++j)
#pragma unroll
        for (int t = 0; t < kChunk; ++t) s[i][j] = fmaf(qv[t], kf[j][t], s[i][j]);
    }
  }
}

// ---- Masking --------------------------------------------------------------------------------
// Keys past the end of the sequence, and (causal) keys after the query, get −inf so that exp()
// makes them exactly 0. The caller runs this only on tiles that need it (see the kernel).
template <int kRows, int kCols>
__device__ __forceinline__ void mask_scores(float (&s)[kRows][kCols], int first_row, int first_key,
                                            int n, bool causal) {
#pragma unroll
  for (int i = 0; i < kRows; ++i)
#pragma unroll
    for (int j = 0; j < kCols; ++j) {
      const int row = first_row + i * kRowGroups;
      const int key = first_key + j * kLanesPerRow;
      if (key >= n || (causal && key > row)) s[i][j] = -INFINITY;
    }
}

// ---- Row reductions over the 16 lanes of a row group -----------------------------------------
// xor-shuffles with offsets 8, 4, 2, 1 stay inside each half of the warp, and every lane ends up
// with the result. All 32 lanes always execute them (no row is skipped), so the full mask is right.
__device__ __forceinline__ float row_max(float x) {
#pragma unroll
  for (int offset = kLanesPerRow / 2; offset > 0; offset /= 2)
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, offset));
  return x;
}
__device__ __forceinline__ float row_sum(float x) {
#pragma unroll
  for (int offset = kLanesPerRow / 2; offset > 0; offset /= 2)
    x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
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
    const float m_new = fmaxf(m[i], row_max(tile_max));
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

// ---- P to shared memory ---------------------------------------------------------------------
// The product P V_j needs, for each output element, a whole row of P, which is spread over the 16
// lanes of the row group. P goes through shared memory (step 05 keeps it in registers instead).
template <int kHeadDim, int kBlockM>
__device__ __forceinline__ void store_probs(
    float* p_tile,
    const float (&s)[Tile<kHeadDim, kBlockM>::kRows][Tile<kHeadDim, kBlockM>::kScoreCols], int ty,
    int tx) {
  using T = Tile<kHeadDim, kBlockM>;
#pragma unroll
  for (int i = 0; i < T::kRows; ++i)
#pragma unroll
    for (int j = 0; j < T::kScoreCols; ++j)
      p_tile[(ty + i * kRowGroups) * T::kPStride + tx + j * kLanesPerRow] = s[i][j];
}

// ---- P V_j, in registers --------------------------------------------------------------------
// Thread (ty, tx) computes the same rows as in S and the contiguous output columns
// tx·kOutCols .. tx·kOutCols + kOutCols − 1, so its V reads are one vector load per key and the 16
// lanes of a row group read one contiguous row of V. P is read four keys at a time (float4,
// broadcast across the row group).
template <int kHeadDim, int kBlockM>
__device__ __forceinline__ void multiply_pv(
    float (&acc)[Tile<kHeadDim, kBlockM>::kRows][Tile<kHeadDim, kBlockM>::kOutCols],
    const float* p_tile, const __half* v_tile, int ty, int tx) {
  using T = Tile<kHeadDim, kBlockM>;
  constexpr int kKeysPerLoad = 4;
#pragma unroll
  for (int i = 0; i < T::kRows; ++i)
#pragma unroll
    for (int d = 0; d < T::kOutCols; ++d) acc[i][d] = 0.f;

#pragma unroll
  for (int c0 = 0; c0 < kBlockN; c0 += kKeysPerLoad) {
    float p[T::kRows][kKeysPerLoad];
#pragma unroll
    for (int i = 0; i < T::kRows; ++i) {
      const float4 x =
          *reinterpret_cast<const float4*>(p_tile + (ty + i * kRowGroups) * T::kPStride + c0);
      p[i][0] = x.x;
      p[i][1] = x.y;
      p[i][2] = x.z;
      p[i][3] = x.w;
    }
#pragma unroll
    for (int c = 0; c < kKeysPerLoad; ++c) {
      float vf[T::kOutCols];
      load_halves<T::kOutCols>(v_tile + (c0 + c) * T::kKvStride + tx * T::kOutCols, vf);
#pragma unroll
      for (int i = 0; i < T::kRows; ++i)
#pragma unroll
        for (int d = 0; d < T::kOutCols; ++d) acc[i][d] = fmaf(p[i][c], vf[d], acc[i][d]);
    }
  }
}

// ---- O = alpha·O + P V_j, in shared memory --------------------------------------------------
// FA2: the accumulator is not normalized inside the loop, only rescaled; it stays on chip for
// the whole kernel (step 03 read it from and wrote it to global memory on every visit). Each
// thread only ever touches its own micro-tile of O, so no barrier guards it.
template <int kHeadDim, int kBlockM>
__device__ __forceinline__ void rescale_accumulator(
    float* o_tile, const float (&alpha)[Tile<kHeadDim, kBlockM>::kRows],
    const float (&acc)[Tile<kHeadDim, kBlockM>::kRows][Tile<kHeadDim, kBlockM>::kOutCols], int ty,
    int tx) {
  using T = Tile<kHeadDim, kBlockM>;
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

// ---- fp16 output --------------------------------------------------------------------------
// The 16 lanes of a row group write one contiguous row (8 or 16 bytes each). Rows past the end of
// the sequence are never written.
template <int kHeadDim, int kBlockM>
__device__ __forceinline__ void store_output(
    __half* o_head,
    const float (&out)[Tile<kHeadDim, kBlockM>::kRows][Tile<kHeadDim, kBlockM>::kOutCols],
    int q_start, int n, int ty, int tx) {
  using T = Tile<kHeadDim, kBlockM>;
#pragma unroll
  for (int i = 0; i < T::kRows; ++i) {
    const int row = q_start + ty + i * kRowGroups;
    if (row >= n) continue;
    std::uint32_t packed[T::kOutCols / 2];
#pragma unroll
    for (int d = 0; d < T::kOutCols; d += 2)
      packed[d / 2] = ladder::ptx::pack_half2(out[i][d], out[i][d + 1]);
    __half* dst = o_head + std::int64_t(row) * kHeadDim + tx * T::kOutCols;
    if constexpr (T::kOutCols == 8)
      *reinterpret_cast<uint4*>(dst) = make_uint4(packed[0], packed[1], packed[2], packed[3]);
    else
      *reinterpret_cast<uint2*>(dst) = make_uint2(packed[0], packed[1]);
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
  static_assert(kWarpSize % kLanesPerRow == 0, "a row group must not straddle two warps");

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
  load_kv_tile<kHeadDim, kBlockM>(kv_tiles, kv_tiles + kTileHalves, k + head, v + head, 0, n);
  ladder::ptx::cp_async_commit();
  load_q_tile<kHeadDim, kBlockM>(q_tile, q + head, q_start, n, scale_log2);

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
      load_kv_tile<kHeadDim, kBlockM>(next_k, next_k + kTileHalves, k + head, v + head,
                                      kv_start + kBlockN, n);
      ladder::ptx::cp_async_commit();
    }

    float s[T::kRows][T::kScoreCols];
    compute_scores<kHeadDim, kBlockM>(s, q_tile, k_tile, ty, tx);
    // FA2, causal level 2: only a tile that crosses the diagonal (its last key is after this
    // block's first row) or the end of the sequence needs the element mask.
    const bool crosses_diagonal = causal && kv_start + kBlockN - 1 > q_start;
    if (crosses_diagonal || kv_start + kBlockN > n)
      mask_scores(s, q_start + ty, kv_start + tx, n, causal);

    float alpha[T::kRows];
    softmax_update(s, m, l, alpha);
    store_probs<kHeadDim, kBlockM>(p_tile, s, ty, tx);
    __syncthreads();  // all of P is written before any row of it is read

    float acc[T::kRows][T::kOutCols];
    multiply_pv<kHeadDim, kBlockM>(acc, p_tile, v_tile, ty, tx);
    rescale_accumulator<kHeadDim, kBlockM>(o_tile, alpha, acc, ty, tx);
  }

  // FA2: the one division. Every real row has seen at least its own key (causal) or key 0, so
  // l > 0 for it; the guard keeps padded rows (never stored) finite anyway.
  float out[T::kRows][T::kOutCols];
#pragma unroll
  for (int i = 0; i < T::kRows; ++i) {
    const float total = row_sum(l[i]);
    const float inv_l = total > 0.f ? 1.f / total : 0.f;
    const float* row = o_tile + (ty + i * kRowGroups) * T::kOStride + tx * T::kOutCols;
#pragma unroll
    for (int d = 0; d < T::kOutCols; ++d) out[i][d] = row[d] * inv_l;
  }
  store_output<kHeadDim, kBlockM>(o + head, out, q_start, n, ty, tx);
}

// ---- Host side ------------------------------------------------------------------------------
constexpr int kBlockM128 = 128;  // Br: the seed's v2.0

template <int kHeadDim, int kBlockM>
void launch(const AttentionArgs& a, cudaStream_t stream) {
  const auto& sh = a.shape;
  constexpr std::size_t smem = Tile<kHeadDim, kBlockM>::kSmemBytes;
  auto kernel = fa_v2_0_kernel<kHeadDim, kBlockM>;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  // All of the unified L1 as shared memory: at D = 64 two blocks of 102 KB fit only then.
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                  int(cudaSharedmemCarveoutMaxShared)));
  const dim3 grid(ceil_div(sh.seqlen, kBlockM), sh.batch * sh.heads);
  kernel<<<grid, kThreads, smem, stream>>>(a.q, a.k, a.v, a.o, sh.seqlen, a.softmax_scale * kLog2e,
                                           sh.causal);
  CUDA_CHECK_LAUNCH("fa_v2_0_kernel");
}

template <int kBlockM>
void launch_block(const AttentionArgs& a, cudaStream_t stream) {
  ladder::dispatch_head_dim<64, 128>(a.shape.head_dim,
                                     [&]<int kHeadDim>() { launch<kHeadDim, kBlockM>(a, stream); });
}

template <int kHeadDim, int kBlockM>
ladder::KernelInfo kernel_of() {
  return ladder::kernel(ladder::strprintf("fa_v2_0_kernel<%d>", kHeadDim),
                        fa_v2_0_kernel<kHeadDim, kBlockM>, kThreads, Tile<kHeadDim, kBlockM>::kSmemBytes);
}

template <int kBlockM>
std::vector<ladder::KernelInfo> kernels(int head_dim) {
  return {head_dim == 128 ? kernel_of<128, kBlockM>() : kernel_of<64, kBlockM>()};
}

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
                                                "buffer, scalar FFMA", launch_block<kBlockM128>)
                 .needs_sm(80)  // cp.async
                 .batch_heads_on_grid_yz()  // grid (query blocks, B·H)
                 .for_head_dims({64, 128})
                 .with_kernels(kernels<kBlockM128>)));

}  // namespace
