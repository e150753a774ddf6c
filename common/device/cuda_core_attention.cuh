// The CUDA-core attention tile of Part II's first two FlashAttention steps (03 and 04).
//
// Steps 03 (FlashAttention-1) and 04 (FlashAttention-2's loop order) differ in the loop order, in
// where the running state lives and in how K/V tiles arrive; everything inside one (Q block,
// K/V block) tile is the same code, and it lives here once: the thread layout, the staging of Q,
// the two products S = Q Kᵀ and P V on register micro-tiles (scalar fp32 FFMA, no tensor cores),
// the element mask, the row reductions, P through shared memory and the fp16 output. What each
// step keeps in its own file is its lesson: the K/V loader, the online-softmax update, the
// running state and the kernel's loops.
//
// Thread layout. 256 threads form a 16 × 16 grid: ty = tid / 16 picks a row group, tx = tid % 16
// a lane in it. Thread (ty, tx) owns rows ty, ty + 16, ty + 32, ... of the Q block (kRows of them)
// and, in each of them, a few columns of S and of O. The 16 lanes of a row group are one half of
// a warp, so a row's maximum and sum are reduced with four xor-shuffles and no shared memory.
//
// exp(x) = 2^(x·log2 e). Q is multiplied by scale·log2(e) when it is staged, so S comes out
// already in base-2 units and every exponential is one ex2 (MUFU.EX2). m is kept in those units.
#pragma once

#include <cuda_fp16.h>

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "common/device/ptx.cuh"

namespace ladder::cuda_core {

constexpr int kThreads = 256;
constexpr int kLanesPerRow = 16;
constexpr int kRowGroups = kThreads / kLanesPerRow;
constexpr int kWarpSize = 32;
static_assert(kWarpSize % kLanesPerRow == 0, "a row group must not straddle two warps");

// Shared-memory row padding, 16 bytes each. For K and V (fp16) it keeps every row 16-byte
// aligned for the vector loads (and cp.async) while shifting consecutive rows by 4 banks, so the
// 16 lanes that read 16 different rows of K at the same column hit 8 different bank quads: two
// wavefronts, the minimum for 256 bytes. For Q and P (fp32) it puts the two rows that one warp
// reads at once into different banks.
constexpr int kHalfPad = 8;
constexpr int kFloatPad = 4;
constexpr int kChunk = 8;  // halves per 16-byte vector load

// The micro-tiles and the shared-memory pieces every step has: Q (fp32, pre-scaled), P (fp32)
// and one K or V tile (fp16). A step's Tile derives from this and adds its own pieces and total.
template <int HeadDim, int BlockM, int BlockN>
struct TileLayout {
  static constexpr int kHeadDim = HeadDim;
  static constexpr int kBlockM = BlockM;  // query rows of a Q block (Br)
  static constexpr int kBlockN = BlockN;  // keys of a K/V tile (Bc)
  static_assert(kBlockM % kRowGroups == 0 && kBlockN % kLanesPerRow == 0 &&
                kHeadDim % kLanesPerRow == 0 && kHeadDim % kChunk == 0);
  static constexpr int kRows = kBlockM / kRowGroups;         // rows of a thread's micro-tiles
  static constexpr int kScoreCols = kBlockN / kLanesPerRow;  // its columns of S (tx + 16·j)
  static constexpr int kOutCols = kHeadDim / kLanesPerRow;   // its columns of O (contiguous)
  static_assert(kOutCols == 4 || kOutCols == 8, "a thread's O columns are one 8- or 16-byte load");

  static constexpr int kKvStride = kHeadDim + kHalfPad;  // halves
  static constexpr int kQStride = kHeadDim + kFloatPad;  // floats
  static constexpr int kPStride = kBlockN + kFloatPad;   // floats

  // Every piece is a multiple of 16 bytes, so pieces laid out one after the other all start
  // 16-byte aligned.
  static constexpr std::size_t kQBytes = std::size_t(kBlockM) * kQStride * sizeof(float);
  static constexpr std::size_t kPBytes = std::size_t(kBlockM) * kPStride * sizeof(float);
  static constexpr std::size_t kKvBytes = std::size_t(kBlockN) * kKvStride * sizeof(__half);
  static_assert(kQBytes % 16 == 0 && kPBytes % 16 == 0 && kKvBytes % 16 == 0);
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

// ---- Loading Q_i ----------------------------------------------------------------------------
// Q_i is converted to fp32 and multiplied by scale·log2(e) as it is staged: the inner product
// then needs no conversion on the Q side and no scaling of S. Rows past the end of the sequence
// are zeros (their scores are finite, their outputs are never stored).
template <class T>
__device__ __forceinline__ void load_q_tile(float* q_tile, const __half* q_head, int q_start, int n,
                                            float scale_log2) {
  constexpr int kChunksPerRow = T::kHeadDim / kChunk;
  for (int c = threadIdx.x; c < T::kBlockM * kChunksPerRow; c += kThreads) {
    const int row = c / kChunksPerRow;
    const int col = (c % kChunksPerRow) * kChunk;
    float x[kChunk] = {};
    if (q_start + row < n)
      load_halves<kChunk>(q_head + std::int64_t(q_start + row) * T::kHeadDim + col, x);
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
template <class T>
__device__ __forceinline__ void compute_scores(float (&s)[T::kRows][T::kScoreCols],
                                               const float* q_tile, const __half* k_tile, int ty,
                                               int tx) {
#pragma unroll
  for (int i = 0; i < T::kRows; ++i)
#pragma unroll
    for (int j = 0; j < T::kScoreCols; ++j) s[i][j] = 0.f;

#pragma unroll
  for (int k0 = 0; k0 < T::kHeadDim; k0 += kChunk) {
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
// makes them exactly 0. The caller runs this only on tiles that need it (see the kernels).
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

// ---- P to shared memory ---------------------------------------------------------------------
// The product P V_j needs, for each output element, a whole row of P, which is spread over the 16
// lanes of the row group. P goes through shared memory (step 05 keeps it in registers instead).
template <class T>
__device__ __forceinline__ void store_probs(float* p_tile,
                                            const float (&s)[T::kRows][T::kScoreCols], int ty,
                                            int tx) {
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
template <class T>
__device__ __forceinline__ void multiply_pv(float (&acc)[T::kRows][T::kOutCols],
                                            const float* p_tile, const __half* v_tile, int ty,
                                            int tx) {
  constexpr int kKeysPerLoad = 4;
#pragma unroll
  for (int i = 0; i < T::kRows; ++i)
#pragma unroll
    for (int d = 0; d < T::kOutCols; ++d) acc[i][d] = 0.f;

#pragma unroll
  for (int c0 = 0; c0 < T::kBlockN; c0 += kKeysPerLoad) {
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

// ---- fp16 output --------------------------------------------------------------------------
// The 16 lanes of a row group write one contiguous row (8 or 16 bytes each). Rows past the end of
// the sequence are never written.
template <class T>
__device__ __forceinline__ void store_output(__half* o_head,
                                             const float (&out)[T::kRows][T::kOutCols],
                                             int q_start, int n, int ty, int tx) {
#pragma unroll
  for (int i = 0; i < T::kRows; ++i) {
    const int row = q_start + ty + i * kRowGroups;
    if (row >= n) continue;
    std::uint32_t packed[T::kOutCols / 2];
#pragma unroll
    for (int d = 0; d < T::kOutCols; d += 2)
      packed[d / 2] = ladder::ptx::pack_half2(out[i][d], out[i][d + 1]);
    __half* dst = o_head + std::int64_t(row) * T::kHeadDim + tx * T::kOutCols;
    if constexpr (T::kOutCols == 8)
      *reinterpret_cast<uint4*>(dst) = make_uint4(packed[0], packed[1], packed[2], packed[3]);
    else
      *reinterpret_cast<uint2*>(dst) = make_uint2(packed[0], packed[1]);
  }
}

}  // namespace ladder::cuda_core
