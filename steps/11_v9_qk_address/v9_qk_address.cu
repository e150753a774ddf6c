// Step 11 — the B300 series, V9: three ways at the Q Kᵀ side, once the stall moved there.
//
// After V8 the series' profile put the top stall in Q Kᵀ: the mma waiting on its ldmatrix
// operands, each ldmatrix waiting on an address computed from scratch (coordinates -> swizzle ->
// flatten) at every k16 step. Three variants of step 10's Q Kᵀ, each alone on top of step 10:
//
//   qkfragpipe     the Q and K fragments double-buffered: step kk + 1's ldmatrix are issued
//                  before step kk's mma, so the mma finds its operands already there — at the
//                  price of a second set of fragment registers (4 + 8 more per thread)
//   qkaprefetch    only Q's fragment (A) prefetched one step ahead: half the extra registers
//   qkspecialized  no extra registers; the generic address chain (≈ 20 integer instructions
//                  per step in the seed's SASS) replaced by a per-lane base pointer and, per step,
//                  (base chunk + 2·kk) ^ (row % 8): one add and one xor (the swizzle only touches
//                  a chunk index's low three bits, and row % 8 < 8, so the XOR of the whole index
//                  is the swizzle)
//
// The rest is step 10, unchanged.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "common/device/mma_fragments.cuh"
#include "common/device/part3_attention.cuh"
#include "common/device/ptx.cuh"
#include "common/part3_launch.hpp"
#include "common/registry.hpp"

namespace {

using ladder::ceil_div;
using ladder::part3::load_tile;    // cp.async of a tile, rows past N zero-filled
using ladder::part3::tile_offset;  // where element (row, col) of a tile lives, swizzled or not
namespace ptx = ladder::ptx;
namespace frag = ladder::frag;
namespace part3 = ladder::part3;  // common/device/part3_attention.cuh, common/part3_launch.hpp

constexpr int kWarpSize = 32;

// ---- The versions, as feature bits that accumulate ---------------------------------------------
enum Feature : unsigned {
  kSwizzlePv = 1u << 0,  // v2: P and V swizzled
  kSwizzleQk = 1u << 1,  // v3: Q and K swizzled
  kTwoRows = 1u << 2,    // v4: two softmax rows per warp at once
  kPaddedS = 1u << 3,    // v5: S rows padded to 72 elements
  kFourRows = 1u << 4,   // v7: four softmax rows per warp at once
  kQkFragPipe = 1u << 5,     // v9 qkfragpipe: Q and K fragments double-buffered
  kQkAPrefetch = 1u << 6,    // v9 qkaprefetch: Q's fragment prefetched one step ahead
  kQkSpecialized = 1u << 7,  // v9 qkspecialized: shift/add/xor addresses
};

template <int kHeadDim_, unsigned kFeatures>
struct Config {
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kBlockM = 32;  // Br: query rows per CTA
  static constexpr int kBlockN = 64;  // Bc: keys per block
  static constexpr int kWarps = 4;
  static constexpr int kThreads = kWarps * kWarpSize;

  // Both matrix products use the same 2 × 2 warp grid: warp w owns rows 16·(w / 2) and, of S,
  // keys 32·(w % 2) (4 n8 tiles), of O, head dims (D / 2)·(w % 2).
  static constexpr int kWarpsN = 2;
  static constexpr int kQkCols = kBlockN / kWarpsN;  // 32 keys of S per warp
  static constexpr int kQkTiles = kQkCols / 8;
  static constexpr int kDSteps = kHeadDim / 16;      // k16 steps of Q Kᵀ
  static constexpr int kPvCols = kHeadDim / kWarpsN;  // head dims of O per warp
  static constexpr int kPvTiles = kPvCols / 8;
  static constexpr int kKeySteps = kBlockN / 16;      // k16 steps of P V

  // The softmax: warp w owns rows 8w .. 8w + 7 and walks them kRowsAtOnce at a time; each lane
  // holds kColsPerLane logits of the row.
  static constexpr int kSoftmaxRows = kBlockM / kWarps;
  static constexpr int kRowsAtOnce = (kFeatures & kFourRows) ? 4 : (kFeatures & kTwoRows) ? 2 : 1;
  static constexpr int kColsPerLane = kBlockN / kWarpSize;

  static constexpr bool kSwizzledQk = (kFeatures & kSwizzleQk) != 0;
  static constexpr bool kPipeA = (kFeatures & (kQkFragPipe | kQkAPrefetch)) != 0;
  static constexpr bool kPipeB = (kFeatures & kQkFragPipe) != 0;
  static constexpr bool kSpecialized = (kFeatures & kQkSpecialized) != 0;
  static constexpr bool kSwizzledPv = (kFeatures & kSwizzlePv) != 0;
  static constexpr int kSStride = (kFeatures & kPaddedS) ? kBlockN + 8 : kBlockN;  // fp32
  static constexpr int kPStride = kBlockN;                                          // fp16

  // Shared memory, in bytes: the fp16 tiles first (cp.async and ldmatrix want 16-byte rows),
  // then P, S and the row statistics.
  static constexpr int kQBytes = kBlockM * kHeadDim * 2;
  static constexpr int kKVBytes = kBlockN * kHeadDim * 2;
  static constexpr int kPBytes = kBlockM * kPStride * 2;
  static constexpr int kSBytes = kBlockM * kSStride * 4;
  static constexpr int kStatBytes = kBlockM * 4;  // one float per row
  static constexpr std::size_t kSmemBytes =
      std::size_t(kQBytes) + 2 * kKVBytes + kPBytes + kSBytes + 3 * kStatBytes;

  static_assert(kHeadDim % 64 == 0, "the swizzle needs rows of a multiple of 64 halves");
  static_assert(kColsPerLane == 2 && kSoftmaxRows % kRowsAtOnce == 0);
  static_assert(kThreads % (kHeadDim / 8) == 0);
};

// ---- S = Q Kᵀ for the warp's 16 rows × 32 keys, staged in shared memory -------------------------
template <class C>
__device__ __forceinline__ void gemm_qk(float* s_s, const __half* s_q, const __half* s_k, int warp,
                                        int lane) {
  const int row0 = 16 * (warp / C::kWarpsN);
  const int key0 = C::kQkCols * (warp % C::kWarpsN);
  float acc[C::kQkTiles][4];
#pragma unroll
  for (int j = 0; j < C::kQkTiles; ++j)
#pragma unroll
    for (int c = 0; c < 4; ++c) acc[j][c] = 0.f;

  // The lane's ldmatrix row never changes, only the 16-byte chunk does: logical chunk 2·kk + c,
  // stored at (2·kk + c) ^ (row % 8) when swizzled (qkspecialized), or the generic chain.
  constexpr int kKTiles = C::kQkTiles / 2;  // ldmatrix.x4 of K per step (two n8 tiles each)
  const int a_row = row0 + frag::ldsm_a_row(lane);
  const __half* a_base = s_q + a_row * C::kHeadDim;
  const int a_chunk = frag::ldsm_a_col(lane) >> 3;
  const int a_xor = C::kSwizzledQk ? (a_row & 7) : 0;
  const int b_row = key0 + frag::ldsm_b_row(lane);  // + 16·np: row % 8 unchanged
  const __half* b_base = s_k + b_row * C::kHeadDim;
  const int b_chunk = frag::ldsm_b_col(lane) >> 3;
  const int b_xor = C::kSwizzledQk ? (b_row & 7) : 0;
  auto load_a = [&](std::uint32_t (&a)[4], int kk) {
    if constexpr (C::kSpecialized)
      ptx::ldmatrix_x4(a, a_base + (((2 * kk + a_chunk) ^ a_xor) << 3));
    else
      ptx::ldmatrix_x4(a, s_q + tile_offset<C::kSwizzledQk, C::kHeadDim>(
                                    row0 + frag::ldsm_a_row(lane), kk * 16 + frag::ldsm_a_col(lane)));
  };
  auto load_b = [&](std::uint32_t (&b)[kKTiles][4], int kk) {
#pragma unroll
    for (int np = 0; np < kKTiles; ++np) {
      if constexpr (C::kSpecialized)
        ptx::ldmatrix_x4(b[np], b_base + np * 16 * C::kHeadDim + (((2 * kk + b_chunk) ^ b_xor) << 3));
      else
        ptx::ldmatrix_x4(b[np], s_k + tile_offset<C::kSwizzledQk, C::kHeadDim>(
                                          key0 + np * 16 + frag::ldsm_b_row(lane),
                                          kk * 16 + frag::ldsm_b_col(lane)));
    }
  };

  // Buffers: index kk % 2 of a pipelined operand, always 0 otherwise.
  std::uint32_t a[C::kPipeA ? 2 : 1][4];
  std::uint32_t b[C::kPipeB ? 2 : 1][kKTiles][4];
  if constexpr (C::kPipeA) load_a(a[0], 0);
  if constexpr (C::kPipeB) load_b(b[0], 0);
#pragma unroll
  for (int kk = 0; kk < C::kDSteps; ++kk) {
    const int ia = C::kPipeA ? kk % 2 : 0;
    const int ib = C::kPipeB ? kk % 2 : 0;
    if constexpr (C::kPipeA) {
      if (kk + 1 < C::kDSteps) load_a(a[ia ^ 1], kk + 1);
    } else {
      load_a(a[0], kk);
    }
    if constexpr (C::kPipeB) {
      if (kk + 1 < C::kDSteps) load_b(b[ib ^ 1], kk + 1);
    } else {
      load_b(b[0], kk);
    }
#pragma unroll
    for (int np = 0; np < kKTiles; ++np) {
      const std::uint32_t b_lo[2] = {b[ib][np][0], b[ib][np][1]};
      const std::uint32_t b_hi[2] = {b[ib][np][2], b[ib][np][3]};
      ptx::mma_m16n8k16_f32(acc[2 * np], a[ia], b_lo);
      ptx::mma_m16n8k16_f32(acc[2 * np + 1], a[ia], b_hi);
    }
  }

  // The staging store: each lane holds the pairs (g, 2t..2t+1) and (g + 8, 2t..2t+1) of every n8
  // tile, 8 bytes each. A half-warp (the unit of an 8-byte store) covers 4 rows × 32 bytes at
  // the same column: with 64-float rows (256 bytes) the 4 rows fall on the same 8 banks (4
  // wavefronts instead of 1); with 72-float rows row r starts 32·r bytes further round the 32
  // banks and the 4 rows tile them exactly.
  const int g = frag::group_of(lane), t = frag::thread_in_group(lane);
#pragma unroll
  for (int j = 0; j < C::kQkTiles; ++j)
#pragma unroll
    for (int h = 0; h < 2; ++h)
      *reinterpret_cast<float2*>(s_s + (row0 + g + 8 * h) * C::kSStride + key0 + 8 * j + 2 * t) =
          make_float2(acc[j][2 * h], acc[j][2 * h + 1]);
}

// ---- The online softmax over the staged logits -------------------------------------------------
// Warp w walks rows 8w .. 8w + 7, kRowsAtOnce rows per pass; lane l holds columns 2l and 2l + 1.
// Per row the dependent chain is: load -> 5 shuffles (max) -> exponentials -> 5 shuffles (sum)
// -> stores. A warp with one row in flight has nothing else to issue while a shuffle or the
// special-function unit answers; a second row gives it the other chain's instructions.
// Logits of keys past N, and above the diagonal when causal, become −inf here. Keys are visited
// first to last, so the first block already gives every row a finite max (key 0 is visible to
// every row): −inf − m never meets −inf − (−inf).
template <class C, bool kCausal>
__device__ __forceinline__ void softmax(const float* s_s, __half* s_p, float* s_max,
                                        float* s_max_prev, float* s_sum, int warp, int lane,
                                        int q_start, int kv_start, int n, float scale) {
  constexpr int R = C::kRowsAtOnce;
#pragma unroll 1
  for (int r0 = 0; r0 < C::kSoftmaxRows; r0 += R) {
    float x[R][2], m_tile[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int row = warp * C::kSoftmaxRows + r0 + r;
      const int key_end = kCausal ? min(n, q_start + row + 1) : n;  // keys < key_end are visible
      const int col = 2 * lane;
      const float2 pair = *reinterpret_cast<const float2*>(s_s + row * C::kSStride + col);
      x[r][0] = kv_start + col >= key_end ? -INFINITY : pair.x * scale;
      x[r][1] = kv_start + col + 1 >= key_end ? -INFINITY : pair.y * scale;
      m_tile[r] = fmaxf(x[r][0], x[r][1]);
    }
#pragma unroll
    for (int offset = kWarpSize / 2; offset > 0; offset /= 2)
#pragma unroll
      for (int r = 0; r < R; ++r)
        m_tile[r] = fmaxf(m_tile[r], __shfl_xor_sync(frag::kFullMask, m_tile[r], offset));

    float m_old[R], m_new[R], p[R][2], sum[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int row = warp * C::kSoftmaxRows + r0 + r;
      m_old[r] = s_max[row];
      m_new[r] = fmaxf(m_old[r], m_tile[r]);
      p[r][0] = __expf(x[r][0] - m_new[r]);
      p[r][1] = __expf(x[r][1] - m_new[r]);
      sum[r] = p[r][0] + p[r][1];
    }
#pragma unroll
    for (int offset = kWarpSize / 2; offset > 0; offset /= 2)
#pragma unroll
      for (int r = 0; r < R; ++r) sum[r] += __shfl_xor_sync(frag::kFullMask, sum[r], offset);

    // The pair is adjacent, so it stays inside one 16-byte chunk of P, swizzled or not.
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int row = warp * C::kSoftmaxRows + r0 + r;
      *reinterpret_cast<__half2*>(s_p + tile_offset<C::kSwizzledPv, C::kPStride>(row, 2 * lane)) =
          __floats2half2_rn(p[r][0], p[r][1]);
    }
    // Every lane has read the row's old max before lane 0 replaces it.
    __syncwarp();
    if (lane == 0) {
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const int row = warp * C::kSoftmaxRows + r0 + r;
        s_max_prev[row] = m_old[r];
        s_max[row] = m_new[r];
        s_sum[row] = s_sum[row] * __expf(m_old[r] - m_new[r]) + sum[r];
      }
    }
  }
}

// ---- O = O · exp(m_prev − m) + P V for the warp's 16 rows × D/2 head dims ----------------------
template <class C>
__device__ __forceinline__ void gemm_pv(float (&acc_o)[C::kPvTiles][4], const __half* s_p,
                                        const __half* s_v, const float* s_max,
                                        const float* s_max_prev, int warp, int lane) {
  const int row0 = 16 * (warp / C::kWarpsN);
  const int dim0 = C::kPvCols * (warp % C::kWarpsN);
  const int g = frag::group_of(lane);
  // Every lane computes the rescale factor of its two rows (the series' scale2()).
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = row0 + g + 8 * h;
    const float rescale = __expf(s_max_prev[row] - s_max[row]);
#pragma unroll
    for (int nd = 0; nd < C::kPvTiles; ++nd) {
      acc_o[nd][2 * h] *= rescale;
      acc_o[nd][2 * h + 1] *= rescale;
    }
  }
  part3::pv_product<C>(acc_o, s_p, s_v, row0, dim0, lane);  // then the k16 steps of P V
}

// ---- The kernel: grid (ceil(N / 32), B·H), 128 threads ------------------------------------------
template <class C, bool kCausal>
__global__ void __launch_bounds__(C::kThreads)
    b300_kernel(const __half* __restrict__ q, const __half* __restrict__ k,
              const __half* __restrict__ v, __half* __restrict__ o, int n, float scale) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  __half* s_q = reinterpret_cast<__half*>(smem_raw);
  __half* s_k = reinterpret_cast<__half*>(smem_raw + C::kQBytes);
  __half* s_v = reinterpret_cast<__half*>(smem_raw + C::kQBytes + C::kKVBytes);
  __half* s_p = reinterpret_cast<__half*>(smem_raw + C::kQBytes + 2 * C::kKVBytes);
  float* s_s = reinterpret_cast<float*>(smem_raw + C::kQBytes + 2 * C::kKVBytes + C::kPBytes);
  float* s_max = s_s + C::kBlockM * C::kSStride;
  float* s_max_prev = s_max + C::kBlockM;
  float* s_sum = s_max_prev + C::kBlockM;

  const int tid = threadIdx.x;
  const int warp = tid / kWarpSize;
  const int lane = tid % kWarpSize;
  const int q_start = blockIdx.x * C::kBlockM;
  const std::int64_t head = std::int64_t(blockIdx.y) * n * C::kHeadDim;
  const int kv_end = kCausal ? min(n, q_start + C::kBlockM) : n;
  const int n_blocks = ceil_div(kv_end, C::kBlockN);

  if (tid < C::kBlockM) {
    s_max[tid] = -INFINITY;
    s_sum[tid] = 0.f;
  }
  // Prologue: Q and the first K (one group), the first V (a second group).
  load_tile<C, C::kBlockM, C::kSwizzledQk>(s_q, q + head + std::int64_t(q_start) * C::kHeadDim,
                                           n - q_start, tid);
  load_tile<C, C::kBlockN, C::kSwizzledQk>(s_k, k + head, n, tid);
  ptx::cp_async_commit();
  load_tile<C, C::kBlockN, C::kSwizzledPv>(s_v, v + head, n, tid);
  ptx::cp_async_commit();

  float acc_o[C::kPvTiles][4];
#pragma unroll
  for (int nd = 0; nd < C::kPvTiles; ++nd)
#pragma unroll
    for (int c = 0; c < 4; ++c) acc_o[nd][c] = 0.f;

  // Commit groups, oldest first: {Q, K0}, {V0}, then per block {K of the next block} and {V of
  // the next block} (empty groups at the end keep the count uniform). So "wait until at most one
  // group is pending" is, before Q Kᵀ, "K has landed", and before P V, "V has landed".
#pragma unroll 1
  for (int block = 0; block < n_blocks; ++block) {
    const int kv_start = block * C::kBlockN;
    const bool has_next = block + 1 < n_blocks;
    const std::int64_t next = head + std::int64_t(kv_start + C::kBlockN) * C::kHeadDim;

    ptx::cp_async_wait<1>();
    __syncthreads();  // K visible to every warp; the previous P V is done with P and the stats
    gemm_qk<C>(s_s, s_q, s_k, warp, lane);
    __syncthreads();  // S complete; K free
    if (has_next) load_tile<C, C::kBlockN, C::kSwizzledQk>(s_k, k + next, n - kv_start - C::kBlockN, tid);
    ptx::cp_async_commit();

    softmax<C, kCausal>(s_s, s_p, s_max, s_max_prev, s_sum, warp, lane, q_start, kv_start, n,
                        scale);
    ptx::cp_async_wait<1>();
    __syncthreads();  // P and the stats written; V visible
    gemm_pv<C>(acc_o, s_p, s_v, s_max, s_max_prev, warp, lane);
    __syncthreads();  // V and P free
    if (has_next) load_tile<C, C::kBlockN, C::kSwizzledPv>(s_v, v + next, n - kv_start - C::kBlockN, tid);
    ptx::cp_async_commit();
  }

  // Epilogue: O / l, 4 bytes per lane straight from the accumulator (every stored row has l >= 1:
  // its max element contributes exp(0)).
  part3::store_o<C>(o, head, acc_o, s_sum, q_start, n, warp, lane);
}

// ---- Host side: common/part3_launch.hpp launches and registers the kernel ----------------------
struct B300 {
  template <int kHeadDim, unsigned kFeatures> using config = Config<kHeadDim, kFeatures>;
  template <class C, bool kCausal> static auto* kernel() { return b300_kernel<C, kCausal>; }
  static constexpr bool kScaleLog2 = false;  // the kernel's scale is softmax_scale itself
};

constexpr unsigned kV1 = 0;
constexpr unsigned kV2 = kV1 | kSwizzlePv;
constexpr unsigned kV3 = kV2 | kSwizzleQk;
constexpr unsigned kV4 = kV3 | kTwoRows;
constexpr unsigned kV5 = kV4 | kPaddedS;
constexpr unsigned kV7 = kV5 | kFourRows;
constexpr unsigned kV8 = kV7;  // vec2 is not a bit: every kernel of this file has it

LADDER_REGISTER_STEP(
    ladder::attention_step(11, "v9_qk_address",
                           "B300 series V9: Q K^T fragments double-buffered, A prefetched, or addresses specialized",
                           "10/v8")
        .add(part3::variant<B300, kV8 | kQkFragPipe>("qkfragpipe", "10/v8 + Q and K fragments double-buffered (one k16 step ahead)"))
        .add(part3::variant<B300, kV8 | kQkAPrefetch>("qkaprefetch", "10/v8 + Q's fragment prefetched one k16 step ahead").compared_with("10/v8"))
        .add(part3::variant<B300, kV8 | kQkSpecialized>("qkspecialized", "10/v8 + per-lane base pointer, (chunk + 2kk) ^ (row % 8) per step").compared_with("10/v8"))
        .main_is("qkspecialized"));

}  // namespace
