// Step 06 — FlashAttention v2.2: the details that separate step 05 from FlashAttention-2.
//
// Step 05 already has FA2's algorithm and FA2's instructions. The seed's line-by-line comparison
// with FA2 v2.6.3 lists what is left; this step adds it one idea at a time. Every variant changes
// exactly one thing against the variant it is compared with (in brackets), so each row of the
// table measures one idea alone; where an idea exists at one head dimension only, the variant is
// the same kernel as its baseline at the other D and is not listed there (same_kernel_at).
//
//   reverse          (05/bc64) K/V blocks from last to first: the only blocks that need an
//                    element mask (the ragged end, the causal diagonal) come first and run in
//                    their own loop; the steady-state loop has no mask code at all, and warps
//                    whose rows are all above a diagonal block skip it. Step 05's tiles.
//   d128_s32         (reverse) D = 128 only: each 64-key block computed as two 32-key S tiles
//   d128_unroll2     (d128_s32) D = 128 only: Q Kᵀ's k16 loop unrolled by two, not fully
//   swizzle          (d128_unroll2) XOR-swizzled shared tiles instead of rows padded to D + 8
//   smem_epilogue    (swizzle) O staged through shared memory: 16-byte coalesced stores
//   lse              (smem_epilogue) the sum == 0 / NaN guard on 1/l, and the log-sum-exp
//   bc128            (lse) D = 64 only: FA2's 128 × 128 tile (Q moves back to shared memory)
//   bc128_s64        (lse) D = 64 only: 128-key pipeline blocks computed as two 64-key S tiles,
//                    Q stays in registers
//   h200             (bc128_s64) heaviest causal CTAs first — the step's main variant
//   d128_lean        (h200) D = 128 only: two register savings (K read with the A lane map, the
//                    cp.async offsets recomputed per block)
//   d128_s64_unroll2 (d128_lean) D = 128 only: one 64-key S tile per block (FA2's 128 × 64)
//   d128_s64         (d128_s64_unroll2) D = 128 only: Q Kᵀ's k16 loop not unrolled
//
// One kernel template serves all of them: a Config carries the tile and a set of feature bits,
// and every difference below is an `if constexpr` on one of them.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "common/check.hpp"
#include "common/device/mma_fragments.cuh"
#include "common/device/ptx.cuh"
#include "common/device/swizzle.cuh"
#include "common/dispatch.hpp"
#include "common/math.hpp"
#include "common/registry.hpp"
#include "common/strings.hpp"

namespace {

using ladder::AttentionArgs;
using ladder::ceil_div;
namespace ptx = ladder::ptx;
namespace frag = ladder::frag;

constexpr int kWarpSize = 32;
using ladder::kLog2e;
constexpr std::size_t kDefaultDynamicSmem = 48 * 1024;  // above this a kernel must opt in

// ---- Features (the ablation) and tiles --------------------------------------------------------
// Reverse iteration is not a bit: every variant of this step has it (step 05 is the version
// without). The tile is not a bit either (it is Config's first parameters).
enum Feature : unsigned {
  kSwizzle = 1u << 0,
  kSmemEpilogue = 1u << 1,
  kLse = 1u << 2,
  kHeavyFirst = 1u << 3,
  kLeanRegisters = 1u << 4,  // the two register savings of d128_lean (see its config)
  kQkOneStep = 1u << 5,      // Q Kᵀ's k16 loop not unrolled (d128_s64 vs d128_s64_unroll2)
  kQkFullUnroll = 1u << 6,   // Q Kᵀ's k16 loop fully unrolled, as step 05 has it (reverse, d128_s32)
};

// kBlockN is the key block of the pipeline (one cp.async stage, one barrier); kComputeN the
// keys of one S tile in registers. Step 05 has them equal; splitting them lets the pipeline
// take big steps while S stays small enough to fit next to the O accumulator.
template <int kHeadDim_, int kBlockN_, int kComputeN_, bool kQInRegisters_, int kMinBlocksPerSm_,
          unsigned kFeatures>
struct Config {
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kBlockN = kBlockN_;      // keys per loaded block (Bc)
  static constexpr int kComputeN = kComputeN_;  // keys per S tile
  static constexpr int kSubBlocks = kBlockN / kComputeN;
  static constexpr int kBlockM = 128;           // query rows per CTA (Br)
  static constexpr int kWarps = 4;
  static constexpr int kThreads = kWarps * kWarpSize;
  static constexpr int kRowsPerWarp = kBlockM / kWarps;
  static constexpr int kMTiles = kRowsPerWarp / 16;  // m16 tiles per warp
  static constexpr int kDSteps = kHeadDim / 16;      // k16 steps of S = Q Kᵀ (along D)
  static constexpr int kSTiles = kComputeN / 8;      // n8 tiles of S (along keys)
  static constexpr int kKeySteps = kComputeN / 16;   // k16 steps of O += P V (along keys)
  static constexpr int kOTiles = kHeadDim / 8;       // n8 tiles of O (along D)
  static constexpr bool kQInRegisters = kQInRegisters_;
  static constexpr int kMinBlocksPerSm = kMinBlocksPerSm_;

  static constexpr bool kSwizzled = (kFeatures & kSwizzle) != 0;
  static constexpr bool kSmemEpi = (kFeatures & kSmemEpilogue) != 0;
  static constexpr bool kWritesLse = (kFeatures & kLse) != 0;
  static constexpr bool kHeavy = (kFeatures & kHeavyFirst) != 0;
  static constexpr bool kLean = (kFeatures & kLeanRegisters) != 0;
  // k16 steps of S = Q Kᵀ unrolled together when Q is read from shared memory (see gemm_qk).
  static constexpr int kQkUnroll = (kFeatures & kQkOneStep) != 0      ? 1
                                   : (kFeatures & kQkFullUnroll) != 0 ? kDSteps
                                                                      : 2;

  // Padded rows (step 05) or dense swizzled rows; see common/device/swizzle.cuh for the bank
  // arithmetic of both.
  static constexpr int kStride = kSwizzled ? kHeadDim : kHeadDim + 8;
  static constexpr int kChunksPerRow = kHeadDim / 8;  // 16-byte cp.async chunks
  static constexpr int kStages = 2;                   // K/V double buffer
  static constexpr int kQElems = kBlockM * kStride;
  static constexpr int kKVElems = kBlockN * kStride;  // one K (or V) stage
  static constexpr std::size_t kSmemBytes = sizeof(__half) * (kQElems + 2 * kStages * kKVElems);

  // Column (halves) where logical column `col` of a row with row % 8 == row8 is stored.
  __device__ static int col(int c, int row8) {
    if constexpr (kSwizzled) return ladder::swizzle::xor_col(c, row8);
    else return c;
  }
  __device__ static int offset(int row, int c) { return row * kStride + col(c, row & 7); }

  static_assert(kHeadDim % 16 == 0 && kComputeN % 16 == 0 && kRowsPerWarp % 16 == 0);
  static_assert(kBlockN % kComputeN == 0);
  static_assert(kThreads % kChunksPerRow == 0 && kWarpSize % kChunksPerRow == 0);
  static_assert(kBlockM % kBlockN == 0, "the causal block count assumes Bc divides Br");
};

// Step 05's tiles (and its rules): Q in registers when Q, S and O fit in 160 registers,
// three CTAs per SM where that is reachable without spills (D = 64, Bc = 32).
template <int kHeadDim, int kBlockN, unsigned kFeatures>
using Step05Tiles = Config<kHeadDim, kBlockN, kBlockN,
                           2 * 4 * (kHeadDim / 16 + kHeadDim / 8 + kBlockN / 8) <= 160,
                           (kHeadDim == 64 && kBlockN == 32) ? 3 : 1, kFeatures>;

// ---- Global -> shared: one tile of rows, 16 bytes per cp.async --------------------------------
// As in step 05 (zero-filled rows past N take row 0 as their source address), plus two things. The destination follows the layout (padded or swizzled): a
// thread's chunk and its row modulo 8 never change between passes (kRowsPerPass is a multiple
// of 8), so the swizzled column is computed once. And the bounds check is a template
// parameter: iterating backwards, only the first block loaded (the prologue's) can be ragged.
template <class C, int kRows, bool kCheckBounds>
__device__ __forceinline__ void load_tile(__half* smem, const __half* tile, int rows_left, int tid) {
  constexpr int kRowsPerPass = C::kThreads / C::kChunksPerRow;
  static_assert(kRows % kRowsPerPass == 0 && kRowsPerPass % 8 == 0);
  const int chunk = tid % C::kChunksPerRow;
  const int first_row = tid / C::kChunksPerRow;
  __half* dst = smem + C::offset(first_row, chunk * 8);
  const __half* src = tile + first_row * C::kHeadDim + chunk * 8;
#pragma unroll
  for (int pass = 0; pass < kRows / kRowsPerPass; ++pass) {
    const int row = first_row + pass * kRowsPerPass;
    if constexpr (kCheckBounds) {
      const bool valid = row < rows_left;
      ptx::cp_async_16(dst + pass * kRowsPerPass * C::kStride,
                       valid ? src + pass * kRowsPerPass * C::kHeadDim : tile, valid ? 16 : 0);
    } else {
      ptx::cp_async_16(dst + pass * kRowsPerPass * C::kStride,
                       src + pass * kRowsPerPass * C::kHeadDim);
    }
  }
}

// ---- This lane's ldmatrix row -----------------------------------------------------------------
// Every fragment a lane addresses is 16·i rows below and 16·kk columns right of its first one,
// so its row % 8 never changes. `row` points at the tile row of the first fragment and `chunk`
// is the lane's 16-byte chunk there (0 or 1, from the fragment map), already XORed with
// row % 8 when the tile is swizzled. With padding, every address is then `row` plus a
// compile-time offset. With the swizzle, k16 step kk reads logical chunk 2kk + c, stored at
// (2kk + c) ^ (row % 8) = 2kk ^ chunk (c is bit 0 and 2kk is even): one XOR with a constant
// per step, and only four distinct values (2kk mod 8), whatever D is.
struct LdsmLane {
  const __half* row;
  int chunk;
};
template <class C>
__device__ __forceinline__ LdsmLane ldsm_lane(const __half* tile, int row, int col) {
  const int chunk = col >> 3;
  return {tile + row * C::kStride, C::kSwizzled ? chunk ^ (row & 7) : chunk};
}
template <class C>
__device__ __forceinline__ const __half* ldsm_at(const LdsmLane& l, int rows_down, int cols_right) {
  const int step_chunk = cols_right >> 3;  // even: cols_right is a multiple of 16
  const __half* row = l.row + rows_down * C::kStride;
  if constexpr (C::kSwizzled)
    return row + ((step_chunk & ~7) << 3) + (((step_chunk & 7) ^ l.chunk) << 3);
  else
    return row + ((step_chunk + l.chunk) << 3);
}

// ---- S = Q Kᵀ for the warp's 32 rows × kComputeN keys -----------------------------------------
template <class C>
__device__ __forceinline__ void gemm_qk(float (&s)[C::kMTiles][C::kSTiles][4],
                                        const std::uint32_t (&q_frag)[C::kMTiles][C::kDSteps][4],
                                        const LdsmLane& q_lane, const LdsmLane& k_lane) {
#pragma unroll
  for (int mi = 0; mi < C::kMTiles; ++mi)
#pragma unroll
    for (int ni = 0; ni < C::kSTiles; ++ni)
#pragma unroll
      for (int c = 0; c < 4; ++c) s[mi][ni][c] = 0.f;

  // With Q in shared memory the k16 loop is unrolled by two only: fully unrolled, ptxas hoists
  // the Q and K fragments of several steps ahead of their mma and runs out of registers
  // (bc128 spilled 36-120 bytes per thread); two steps in flight still hide the ldmatrix
  // latency behind 4·kSTiles mma. q_frag is indexed by kk only when Q is in registers, where
  // the loop is fully unrolled. kQkOneStep does not unroll it at all (see d128_s64), and
  // kQkFullUnroll unrolls it fully as step 05 does (reverse and d128_s32 at D = 128).
#pragma unroll(C::kQInRegisters ? C::kDSteps : C::kQkUnroll)
  for (int kk = 0; kk < C::kDSteps; ++kk) {
    std::uint32_t a[C::kMTiles][4];
#pragma unroll
    for (int mi = 0; mi < C::kMTiles; ++mi) {
      if constexpr (C::kQInRegisters) {
#pragma unroll
        for (int r = 0; r < 4; ++r) a[mi][r] = q_frag[mi][kk][r];
      } else {
        ptx::ldmatrix_x4(a[mi], ldsm_at<C>(q_lane, mi * 16, kk * 16));
      }
    }
#pragma unroll
    for (int np = 0; np < C::kSTiles / 2; ++np) {  // two n8 tiles of keys per ldmatrix.x4
      std::uint32_t b[4];
      ptx::ldmatrix_x4(b, ldsm_at<C>(k_lane, np * 16, kk * 16));
      // With the B map, registers {0, 1} are the n8 tile of keys 0-7 and {2, 3} keys 8-15. kLean
      // addresses K with the A map (see the kernel): matrices 0..3 are then (keys 0-7, dims
      // 0-7), (keys 8-15, dims 0-7), (keys 0-7, dims 8-15), (keys 8-15, dims 8-15), so keys 0-7
      // are registers {0, 2} and keys 8-15 registers {1, 3}.
      const std::uint32_t b_lo[2] = {b[0], C::kLean ? b[2] : b[1]};
      const std::uint32_t b_hi[2] = {C::kLean ? b[1] : b[2], b[3]};
#pragma unroll
      for (int mi = 0; mi < C::kMTiles; ++mi) {
        ptx::mma_m16n8k16_f32(s[mi][2 * np], a[mi], b_lo);
        ptx::mma_m16n8k16_f32(s[mi][2 * np + 1], a[mi], b_hi);
      }
    }
  }
}

// ---- Element mask: ragged last block and the causal diagonal (as in step 05) ------------------
template <class C, bool kCausal>
__device__ __forceinline__ void apply_mask(float (&s)[C::kMTiles][C::kSTiles][4], int warp_row0,
                                           int kv_start, int n, int g, int t) {
#pragma unroll
  for (int mi = 0; mi < C::kMTiles; ++mi)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = warp_row0 + mi * 16 + g + 8 * h;
      const int key_end = kCausal ? min(n, row + 1) : n;  // keys < key_end are visible
      const int visible = key_end - kv_start - 2 * t;
#pragma unroll
      for (int ni = 0; ni < C::kSTiles; ++ni)
#pragma unroll
        for (int e = 0; e < 2; ++e)
          if (8 * ni + e >= visible) s[mi][ni][2 * h + e] = -INFINITY;
    }
}

// ---- Online softmax on the S fragment, in place (as in step 05) -------------------------------
// Iterating backwards makes the −inf guard load-bearing: the first block a warp processes is a
// diagonal block, where rows above its first key have seen nothing yet and have max −inf.
template <class C>
__device__ __forceinline__ void online_softmax(float (&s)[C::kMTiles][C::kSTiles][4],
                                               float (&row_max)[C::kMTiles][2],
                                               float (&row_sum)[C::kMTiles][2],
                                               float (&acc_o)[C::kMTiles][C::kOTiles][4],
                                               float scale_log2) {
#pragma unroll
  for (int mi = 0; mi < C::kMTiles; ++mi)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float m = row_max[mi][h];
#pragma unroll
      for (int ni = 0; ni < C::kSTiles; ++ni)
        m = fmaxf(m, fmaxf(s[mi][ni][2 * h], s[mi][ni][2 * h + 1]));
      m = frag::quad_max(m);

      const float m_scaled = (m == -INFINITY) ? 0.f : m * scale_log2;
      const float rescale = ptx::exp2_approx(row_max[mi][h] * scale_log2 - m_scaled);
      row_max[mi][h] = m;
      row_sum[mi][h] *= rescale;
#pragma unroll
      for (int nd = 0; nd < C::kOTiles; ++nd) {
        acc_o[mi][nd][2 * h] *= rescale;
        acc_o[mi][nd][2 * h + 1] *= rescale;
      }
      float pair_sum[C::kSTiles];
#pragma unroll
      for (int ni = 0; ni < C::kSTiles; ++ni) {
        const float p0 = ptx::exp2_approx(fmaf(s[mi][ni][2 * h], scale_log2, -m_scaled));
        const float p1 = ptx::exp2_approx(fmaf(s[mi][ni][2 * h + 1], scale_log2, -m_scaled));
        s[mi][ni][2 * h] = p0;
        s[mi][ni][2 * h + 1] = p1;
        pair_sum[ni] = p0 + p1;
      }
#pragma unroll
      for (int stride = 1; stride < C::kSTiles; stride *= 2)
#pragma unroll
        for (int ni = 0; ni + stride < C::kSTiles; ni += 2 * stride)
          pair_sum[ni] += pair_sum[ni + stride];
      row_sum[mi][h] += pair_sum[0];
    }
}

// ---- O += P V (as in step 05) -----------------------------------------------------------------
template <class C>
__device__ __forceinline__ void gemm_pv(float (&acc_o)[C::kMTiles][C::kOTiles][4],
                                        const float (&p)[C::kMTiles][C::kSTiles][4],
                                        const LdsmLane& v_lane) {
#pragma unroll
  for (int kk = 0; kk < C::kKeySteps; ++kk) {
    std::uint32_t a[C::kMTiles][4];
#pragma unroll
    for (int mi = 0; mi < C::kMTiles; ++mi) {
      a[mi][0] = ptx::pack_half2(p[mi][2 * kk][0], p[mi][2 * kk][1]);
      a[mi][1] = ptx::pack_half2(p[mi][2 * kk][2], p[mi][2 * kk][3]);
      a[mi][2] = ptx::pack_half2(p[mi][2 * kk + 1][0], p[mi][2 * kk + 1][1]);
      a[mi][3] = ptx::pack_half2(p[mi][2 * kk + 1][2], p[mi][2 * kk + 1][3]);
    }
#pragma unroll
    for (int dp = 0; dp < C::kOTiles / 2; ++dp) {  // two n8 tiles of head dims per ldmatrix.x4
      std::uint32_t b[4];
      ptx::ldmatrix_x4_trans(b, ldsm_at<C>(v_lane, kk * 16, dp * 16));
      const std::uint32_t b_lo[2] = {b[0], b[1]}, b_hi[2] = {b[2], b[3]};
#pragma unroll
      for (int mi = 0; mi < C::kMTiles; ++mi) {
        ptx::mma_m16n8k16_f32(acc_o[mi][2 * dp], a[mi], b_lo);
        ptx::mma_m16n8k16_f32(acc_o[mi][2 * dp + 1], a[mi], b_hi);
      }
    }
  }
}

// ---- threadIdx.x, read again ------------------------------------------------------------------
// A value the compiler cannot merge with the kernel's first read of threadIdx.x (a volatile asm
// is never merged with another or hoisted out of the loop). kLean recomputes the cp.async
// offsets from it once per block instead of keeping them in a register for the whole loop: a few
// integer instructions per block, against a register that, at 255, ptxas can only find by
// spilling something.
__device__ __forceinline__ int reread_tid() {
  int tid;
  asm volatile("mov.u32 %0, %%tid.x;" : "=r"(tid));
  return tid;
}

// ---- The kernel -------------------------------------------------------------------------------
// grid (ceil(N / kBlockM), B·H), or with kHeavyFirst and causal (B·H, ceil(N / kBlockM)) with
// the query blocks numbered from the end: a causal CTA's work grows with its query block, the
// hardware starts CTAs roughly in launch order, and starting the longest ones first keeps the
// last wave from being a few long CTAs on an otherwise idle GPU.
template <class C, bool kCausal>
__global__ void __launch_bounds__(C::kThreads, C::kMinBlocksPerSm)
    fa_v2_2_kernel(const __half* __restrict__ q, const __half* __restrict__ k,
                   const __half* __restrict__ v, __half* __restrict__ o, float* __restrict__ lse,
                   int n, float scale_log2, float softmax_scale) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  __half* s_q = reinterpret_cast<__half*>(smem_raw);  // [kBlockM][kStride]
  __half* s_k = s_q + C::kQElems;                     // [kStages][kBlockN][kStride]
  __half* s_v = s_k + C::kStages * C::kKVElems;       // [kStages][kBlockN][kStride]

  const int tid = threadIdx.x;
  const int warp = tid / kWarpSize;
  const int lane = tid % kWarpSize;
  const int g = frag::group_of(lane);
  const int t = frag::thread_in_group(lane);

  constexpr bool kHeavyOrder = kCausal && C::kHeavy;
  const int m_block = kHeavyOrder ? int(gridDim.y - 1 - blockIdx.y) : int(blockIdx.x);
  const int bh = kHeavyOrder ? int(blockIdx.x) : int(blockIdx.y);
  const int q_start = m_block * C::kBlockM;
  const int warp_row0 = q_start + warp * C::kRowsPerWarp;
  const int warp_row_last = warp_row0 + C::kRowsPerWarp - 1;
  const std::int64_t head = std::int64_t(bh) * n * C::kHeadDim;

  const int kv_end = kCausal ? min(n, q_start + C::kBlockM) : n;
  const int n_blocks = ceil_div(kv_end, C::kBlockN);
  // Blocks [0, n_full) need no mask at all: they end at or before N and, when causal, at or
  // before the CTA's first row (Bc divides Br, so q_start / Bc is exact). The rest, the
  // n_masked highest blocks, are exactly the ones a backward loop meets first.
  const int n_full = kCausal ? min(n / C::kBlockN, q_start / C::kBlockN) : n / C::kBlockN;
  const int n_masked = n_blocks - n_full;

  // Prologue: Q, then the LAST K/V block (the only one that can be ragged, so the only checked
  // load of K and V).
  const int last = n_blocks - 1;
  const std::int64_t last_offset = head + std::int64_t(last) * C::kBlockN * C::kHeadDim;
  load_tile<C, C::kBlockM, true>(s_q, q + head + std::int64_t(q_start) * C::kHeadDim,
                                 n - q_start, tid);
  ptx::cp_async_commit();
  load_tile<C, C::kBlockN, true>(s_k + (last & 1) * C::kKVElems, k + last_offset,
                                 n - last * C::kBlockN, tid);
  load_tile<C, C::kBlockN, true>(s_v + (last & 1) * C::kKVElems, v + last_offset,
                                 n - last * C::kBlockN, tid);
  ptx::cp_async_commit();

  // This lane's ldmatrix rows: A map for Q and V, B map for K.
  const LdsmLane q_lane = ldsm_lane<C>(s_q, warp * C::kRowsPerWarp + frag::ldsm_a_row(lane),
                                       frag::ldsm_a_col(lane));
  // K and V: the same for every stage but for the stage's base address. kLean reads K with the
  // A map too (gemm_qk reorders the registers): the three operands then share one lane row and
  // one chunk, and K and V differ only by a constant, which saves the registers of a second map.
  const LdsmLane k_lane0 =
      C::kLean ? ldsm_lane<C>(s_k, frag::ldsm_a_row(lane), frag::ldsm_a_col(lane))
               : ldsm_lane<C>(s_k, frag::ldsm_b_row(lane), frag::ldsm_b_col(lane));
  const LdsmLane v_lane0 = ldsm_lane<C>(s_v, frag::ldsm_a_row(lane), frag::ldsm_a_col(lane));

  std::uint32_t q_frag[C::kMTiles][C::kDSteps][4];
  if constexpr (C::kQInRegisters) {
    ptx::cp_async_wait<1>();
    __syncthreads();
#pragma unroll
    for (int mi = 0; mi < C::kMTiles; ++mi)
#pragma unroll
      for (int kk = 0; kk < C::kDSteps; ++kk)
        ptx::ldmatrix_x4(q_frag[mi][kk], ldsm_at<C>(q_lane, mi * 16, kk * 16));
  }

  float acc_o[C::kMTiles][C::kOTiles][4];
  float row_max[C::kMTiles][2];
  float row_sum[C::kMTiles][2];
#pragma unroll
  for (int mi = 0; mi < C::kMTiles; ++mi) {
#pragma unroll
    for (int nd = 0; nd < C::kOTiles; ++nd)
#pragma unroll
      for (int c = 0; c < 4; ++c) acc_o[mi][nd][c] = 0.f;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      row_max[mi][h] = -INFINITY;
      row_sum[mi][h] = 0.f;
    }
  }

  // One K/V block. `masked` (std::true_type / std::false_type) selects at compile time whether
  // the body may contain mask code; the steady-state loop instantiates it without.
  auto process_block = [&](int block, auto masked) {
    const int stage = block & 1;
    const int kv_start = block * C::kBlockN;

    // Same pipeline as step 05, walking down: the next block is block − 1, never ragged.
    ptx::cp_async_wait<0>();
    __syncthreads();
    if (block > 0) {
      const std::int64_t next = head + std::int64_t(kv_start - C::kBlockN) * C::kHeadDim;
      const int load_tid = C::kLean ? reread_tid() : tid;
      load_tile<C, C::kBlockN, false>(s_k + (stage ^ 1) * C::kKVElems, k + next, C::kBlockN,
                                      load_tid);
      load_tile<C, C::kBlockN, false>(s_v + (stage ^ 1) * C::kKVElems, v + next, C::kBlockN,
                                      load_tid);
      ptx::cp_async_commit();
    }

    // The block's S tiles, upper keys first like the blocks themselves. Not unrolled: ptxas
    // would overlap one tile's Q Kᵀ with the previous tile's P V, which is exactly the register
    // pressure the split is there to avoid.
#pragma unroll 1
    for (int sub = C::kSubBlocks - 1; sub >= 0; --sub) {
      const int sub_start = kv_start + sub * C::kComputeN;
      if constexpr (decltype(masked)::value) {
        // Nothing to add: keys all past N (a ragged block's upper tiles), or, causal, a warp
        // whose last row is above the tile's first key. The barrier and the loads above are
        // collective and already done, so skipping is safe.
        if (sub_start >= n) continue;
        if (kCausal && sub_start > warp_row_last) continue;
      }
      const int tile_offset = stage * C::kKVElems + sub * C::kComputeN * C::kStride;
      const LdsmLane k_lane{k_lane0.row + tile_offset, k_lane0.chunk};
      const LdsmLane v_lane{v_lane0.row + tile_offset, v_lane0.chunk};
      float s[C::kMTiles][C::kSTiles][4];
      gemm_qk<C>(s, q_frag, q_lane, k_lane);
      if constexpr (decltype(masked)::value) {
        const bool ragged = sub_start + C::kComputeN > n;
        const bool diagonal = kCausal && sub_start + C::kComputeN - 1 > warp_row0;
        if (ragged || diagonal) apply_mask<C, kCausal>(s, warp_row0, sub_start, n, g, t);
      }
      online_softmax<C>(s, row_max, row_sum, acc_o, scale_log2);
      gemm_pv<C>(acc_o, s, v_lane);
    }
  };

  int block = n_blocks - 1;
  for (int i = 0; i < n_masked; ++i, --block) process_block(block, std::true_type{});
  for (; block >= 0; --block) process_block(block, std::false_type{});

  // ---- Epilogue ----
  // Finish the deferred row sums. Every stored row has l >= 1 here (key 0 is visible to every
  // row, causal or not, and the row's max element contributes exp2(0)), but FA2 guards anyway:
  // with the lse variant a row with l == 0 or NaN gets O = 0 and lse = +inf.
  float inv_sum[C::kMTiles][2];
#pragma unroll
  for (int mi = 0; mi < C::kMTiles; ++mi)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float l = frag::quad_sum(row_sum[mi][h]);
      if constexpr (C::kWritesLse) {
        const bool empty = !(l > 0.f);  // also true for NaN
        inv_sum[mi][h] = empty ? 0.f : 1.f / l;
        const int row = warp_row0 + mi * 16 + g + 8 * h;
        if (t == 0 && row < n)  // the four lanes of the quad hold the same l
          lse[std::int64_t(bh) * n + row] =
              empty ? INFINITY : row_max[mi][h] * softmax_scale + logf(l);
      } else {
        inv_sum[mi][h] = 1.f / l;
      }
    }

  __half* o_head = o + head;
  if constexpr (!C::kSmemEpi) {
    // Step 05's store: 4 bytes per lane straight from the accumulator.
#pragma unroll
    for (int mi = 0; mi < C::kMTiles; ++mi)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = warp_row0 + mi * 16 + g + 8 * h;
        if (row < n) {
          __half* dst = o_head + std::int64_t(row) * C::kHeadDim + 2 * t;
#pragma unroll
          for (int nd = 0; nd < C::kOTiles; ++nd)
            *reinterpret_cast<__half2*>(dst + nd * 8) =
                __floats2half2_rn(acc_o[mi][nd][2 * h] * inv_sum[mi][h],
                                  acc_o[mi][nd][2 * h + 1] * inv_sum[mi][h]);
        }
      }
  } else {
    // Stage the warp's 32 rows of O in the warp's own 32 rows of the Q tile: no other warp ever
    // reads them, so warp-level barriers are enough. The first orders every lane's last read of
    // Q (its last S = Q Kᵀ, through ldmatrix) before any lane's write: lanes of a warp are not
    // guaranteed to run in lockstep, and without it compute-sanitizer's racecheck reports the
    // write-after-read hazard (it did, on the H200). The fragment writes are conflict-free in
    // either layout: 8 rows (g) × 4 lanes (t) of 4 bytes at one logical chunk fall in 8
    // different bank groups.
    __syncwarp();
#pragma unroll
    for (int mi = 0; mi < C::kMTiles; ++mi)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = warp * C::kRowsPerWarp + mi * 16 + g + 8 * h;  // row % 8 == g
        __half* dst = s_q + row * C::kStride;
#pragma unroll
        for (int nd = 0; nd < C::kOTiles; ++nd)
          *reinterpret_cast<__half2*>(dst + C::col(nd * 8 + 2 * t, g)) =
              __floats2half2_rn(acc_o[mi][nd][2 * h] * inv_sum[mi][h],
                                acc_o[mi][nd][2 * h + 1] * inv_sum[mi][h]);
      }
    __syncwarp();
    // Read it back row-major: consecutive lanes take consecutive 16-byte chunks of a row, so a
    // warp store writes whole rows (4 rows of 128 bytes at D = 64, 2 of 256 at D = 128).
    constexpr int kRowsPerPass = kWarpSize / C::kChunksPerRow;
    const int chunk = lane % C::kChunksPerRow;
#pragma unroll
    for (int pass = 0; pass < C::kRowsPerWarp / kRowsPerPass; ++pass) {
      const int local = pass * kRowsPerPass + lane / C::kChunksPerRow;
      const int row = warp_row0 + local;
      const uint4 chunk_data = *reinterpret_cast<const uint4*>(
          s_q + C::offset(warp * C::kRowsPerWarp + local, chunk * 8));
      if (row < n)
        *reinterpret_cast<uint4*>(o_head + std::int64_t(row) * C::kHeadDim + chunk * 8) =
            chunk_data;
    }
  }
}

// ---- Host side --------------------------------------------------------------------------------
template <class C, bool kCausal>
void launch_config(const AttentionArgs& a, cudaStream_t stream) {
  const auto& sh = a.shape;
  auto* kernel = fa_v2_2_kernel<C, kCausal>;
  if constexpr (C::kSmemBytes > kDefaultDynamicSmem)
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    int(C::kSmemBytes)));
  const int m_blocks = ceil_div(sh.seqlen, C::kBlockM);
  const int bh = sh.batch * sh.heads;
  const dim3 grid = (kCausal && C::kHeavy) ? dim3(bh, m_blocks) : dim3(m_blocks, bh);
  kernel<<<grid, C::kThreads, C::kSmemBytes, stream>>>(a.q, a.k, a.v, a.o, a.lse, sh.seqlen,
                                                       a.softmax_scale * kLog2e, a.softmax_scale);
  CUDA_CHECK_LAUNCH("fa_v2_2_kernel");
}

template <class C64, class C128>
void launch(const AttentionArgs& a, cudaStream_t stream) {
  ladder::dispatch_head_dim<64, 128>(a.shape.head_dim, [&]<int kHeadDim>() {
    using C = std::conditional_t<kHeadDim == 64, C64, C128>;
    a.shape.causal ? launch_config<C, true>(a, stream) : launch_config<C, false>(a, stream);
  });
}

template <class C>
std::vector<ladder::KernelInfo> kernel_pair() {
  // The tile and the register-relevant bits (the feature bits are the variant's name).
  const auto unroll =
      C::kQInRegisters ? std::string(",Q in regs") : ladder::strprintf(",QK unroll %d", C::kQkUnroll);
  const auto name = ladder::strprintf("fa_v2_2_kernel<D=%d,Bc=%d/%d%s%s>", C::kHeadDim,
                                      C::kBlockN, C::kComputeN, unroll.c_str(),
                                      C::kLean ? ",lean" : "");
  return {ladder::kernel(name, fa_v2_2_kernel<C, false>, C::kThreads, C::kSmemBytes).when_causal(false),
          ladder::kernel(name + " causal", fa_v2_2_kernel<C, true>, C::kThreads, C::kSmemBytes).when_causal(true)};
}

template <class C64, class C128>
ladder::Variant make_variant(const char* name, const char* description) {
  static_assert(C64::kHeadDim == 64 && C128::kHeadDim == 128);
  auto v = ladder::attention_variant(name, description, launch<C64, C128>)
               .needs_sm(80)  // cp.async, ldmatrix, mma.sync.m16n8k16
               .for_head_dims({64, 128})
               // grid (query blocks, B·H); (B·H, query blocks) only in the causal heavy-first order
               .batch_heads_on_grid_yz()
               .with_kernels([](int head_dim) {
                 return head_dim == 128 ? kernel_pair<C128>() : kernel_pair<C64>();
               });
  if (C64::kWritesLse) v.with_lse();
  return v;
}

// ---- The ablation: one idea per variant, each against the variant it changes ------------------
// The step starts from step 05's best key block. Set to 32 if 05/bc32 measures faster than
// 05/bc64 on the target GPU (and change improves_on below).
constexpr int kBlockNFrom05 = 64;

constexpr unsigned kFeaturesSwizzle = kSwizzle;
constexpr unsigned kFeaturesSmemEpilogue = kFeaturesSwizzle | kSmemEpilogue;
constexpr unsigned kFeaturesLse = kFeaturesSmemEpilogue | kLse;
constexpr unsigned kFeaturesH200 = kFeaturesLse | kHeavyFirst;

// reverse: step 05's tiles exactly, at both head dimensions, Q Kᵀ's k16 loop fully unrolled as
// step 05 has it; the only change is the loop (and what it allows: one checked load, the mask
// in its own loop body). (With kBlockNFrom05 = 32, D = 64 keeps step 05's 3-CTA bound of 168
// registers, which the later features push into small spills: check ptxas.)
template <unsigned kFeatures>
using BaseD64 = Step05Tiles<64, kBlockNFrom05, kFeatures>;
using ReverseD128 = Step05Tiles<128, kBlockNFrom05, kQkFullUnroll>;

// d128_s32, d128_unroll2 — the price of the reverse loop at D = 128. Step 05's D = 128 kernel
// holds O (128 fp32) and a 64-key S tile (64 fp32) and fits 255 registers with no spill; with
// the reverse loop's second (masked) copy of the loop body it spills: 80-108 bytes per thread
// on sm_90a with CUDA 13.0, inside both loop bodies (`reverse` is measured as it compiles;
// docs/06 has the ptxas figures of every kernel). Two changes, one row each, lead from there
// to the tile every later D = 128 row uses:
//   d128_s32:     each 64-key block computed as two 32-key S tiles (32 fewer fp32 live; no
//                 spill, 235-239 registers);
//   d128_unroll2: Q Kᵀ's k16 loop unrolled by two instead of fully, as in every later
//                 variant with Q in shared memory (fewer fragments in flight, 230-236).
// Both keep the 64-key pipeline block; at D = 64 both are `reverse`'s kernel.
using S32D128 = Config<128, 64, 32, false, 1, kQkFullUnroll>;
template <unsigned kFeatures>
using BaseD128 = Config<128, 64, 32, false, 1, kFeatures>;

// bc128: FA2's tile at D = 64 is 128 × 128 with 4 warps. S grows to 2 × 16 × 4 = 128 fp32 per
// thread, so Q can no longer live in registers (32 + 64 + 128 > 160): it is re-read from shared
// memory at every k16 step, as FA2 does at this size. At D = 128 a 128-key S tile (128 fp32)
// next to the 128-fp32 O accumulator cannot fit in 255 registers at all, and a 128-key block of
// K and V (160 KB per CTA) leaves one CTA per SM: the idea is D = 64 only.
using Bc128D64 = Config<64, 128, 128, false, 1, kFeaturesLse>;

// bc128_s64 — the tile picked for the H200's register file. The H200 has 64K registers and
// 228 KB of shared memory per SM. At these tiles registers, not shared memory, decide how many
// warps share an SM: two CTAs of 4 warps at ~240 registers (three would need <= 168, which
// spills once S, O and the epilogue's staging are all in). With two CTAs per SM fixed, the knob
// left is how often a CTA stops at a barrier: FA2's 128-key pipeline block (half the barriers
// and cp.async rounds of Bc = 64), computed as two 64-key S tiles so that Q stays in registers
// (no per-step Q ldmatrix, unlike bc128). Against `lse` only the pipeline block changes (the S
// tile, Q in registers and the features are the same). 80 KB of shared memory: two CTAs fit
// with room to spare. D = 64 only, for bc128's reason.
using Bc128S64D64 = Config<64, 128, 64, true, 1, kFeaturesLse>;

// h200 — bc128_s64 plus heaviest causal CTAs first (see the kernel's grid comment): the
// configuration measured fastest on the H200 at every shape (docs/06), the step's main variant.
// Step 04 launched each head's query blocks last to first; step 05 dropped that, and this row
// brings it back in a stronger form (the heaviest block of every head before any lighter
// one). It changes causal grids only: the non-causal kernel is the same code as bc128_s64's
// (and reads "same" in a sound measurement). It is the last shared row, not the first, so
// that the main variant is a kernel of its own at both head dimensions (later steps compare
// with 06/h200 at D = 64 and 128) and the earlier rows are the kernels measured before.
using H200D64 = Config<64, 128, 64, true, 1, kFeaturesH200>;
using H200D128 = BaseD128<kFeaturesH200>;

// d128_lean, d128_s64_unroll2, d128_s64 — D = 128 non-causal is where h200 trails FA2
// (0.94-0.99× at N = 4096-16384); FA2 computes each 64-key block as ONE 64-key S tile.
// What that should move, per warp and 64-key block: Q is re-read from shared memory once per
// S tile, 16 instead of 32 ldmatrix.x4 for Q, 80 instead of 96 in all (Nsight: ldsm 25.17M ->
// ~21.0M, 05/bc64's count, -17%); the online softmax runs once per 64 keys instead of twice
// (half the 128-FMUL O rescales, half the quad shuffles). Expected: tensor pipe active 54% ->
// ~57%, +3-5% at D = 128 non-causal. Measured on the first round: ldmatrix fell as predicted,
// the kernel lost 5-6% (docs/06). The cost of the 64-key S tile is 32 more fp32 next to the
// 128-fp32 O; without help this config spills 52-72 bytes per thread. Three rows, one change
// each:
//   d128_lean (vs h200): two register savings on h200's own tile, so their cost is measured
//     alone: (1) K addressed with the A lane map, so Q, K and V share one lane row and chunk,
//     and (2) the cp.async offsets recomputed from threadIdx.x once per block (reread_tid)
//     instead of kept live through the loop. Expected: the same speed (a few integer
//     instructions per block), no spill either way.
//   d128_s64_unroll2 (vs d128_lean): one 64-key S tile per block. With (1) and (2) it fits 255
//     registers with no spill on sm_90a (CUDA 13.0's ptxas; sm_80's causal kernel spills 4
//     bytes). Expected: the +3-5% above, if the extra registers do not cost it back.
//   d128_s64 (vs d128_s64_unroll2): (3) Q Kᵀ's k16 loop not unrolled, so no second step's
//     fragments are in flight (the other CTA's warp on the scheduler hides the ldmatrix
//     latency instead); spill-free on sm_80 too. Expected: the same or up to 2% slower (more
//     "short scoreboard" stalls on ldmatrix).
// Without (1) or without (2), sm_90a spilled 4-72 bytes, unrolled or not. Risk: zero margin at
// 255 registers; another ptxas may spill a few bytes. At D = 64 all three are h200's kernel.
using LeanD128 = BaseD128<kFeaturesH200 | kLeanRegisters>;
using S64U2D128 = Config<128, 64, 64, false, 1, kFeaturesH200 | kLeanRegisters>;
using S64D128 = Config<128, 64, 64, false, 1, kFeaturesH200 | kLeanRegisters | kQkOneStep>;

// Each row names the row it changes; a row that is another's kernel at one D is left out there.
// (A comparison whose baseline is left out at a D is meant against the kernel it duplicates.)
LADDER_REGISTER_STEP(
    ladder::attention_step(6, "fa_v2_2",
                           "FlashAttention v2.2: reverse loop, swizzle, staged epilogue, LSE, FA2 tiles",
                           "05/bc64")
        .add(make_variant<BaseD64<0>, ReverseD128>("reverse", "05 + K/V blocks last to first, masked blocks in their own loop")
                 .compared_with("05/bc64"))
        .add(make_variant<BaseD64<0>, S32D128>("d128_s32", "reverse + D=128: each 64-key block as two 32-key S tiles")
                 .compared_with("06/reverse").same_kernel_at(64, "06/reverse"))
        .add(make_variant<BaseD64<0>, BaseD128<0>>("d128_unroll2", "d128_s32 + D=128: Q K^T's k16 loop unrolled by two, not fully")
                 .compared_with("06/d128_s32").same_kernel_at(64, "06/reverse"))
        .add(make_variant<BaseD64<kFeaturesSwizzle>, BaseD128<kFeaturesSwizzle>>("swizzle", "+ XOR-swizzled shared tiles instead of D+8 padding")
                 .compared_with("06/d128_unroll2"))
        .add(make_variant<BaseD64<kFeaturesSmemEpilogue>, BaseD128<kFeaturesSmemEpilogue>>("smem_epilogue", "+ O staged through shared memory, 16-byte coalesced stores")
                 .compared_with("06/swizzle"))
        .add(make_variant<BaseD64<kFeaturesLse>, BaseD128<kFeaturesLse>>("lse", "+ 1/l guard, log-sum-exp output")
                 .compared_with("06/smem_epilogue"))
        .add(make_variant<Bc128D64, BaseD128<kFeaturesLse>>("bc128", "lse + D=64: FA2's 128x128 tile (Q re-read from smem)")
                 .compared_with("06/lse").same_kernel_at(128, "06/lse"))
        .add(make_variant<Bc128S64D64, BaseD128<kFeaturesLse>>("bc128_s64", "lse + D=64: 128-key blocks as two 64-key S tiles, Q in registers")
                 .compared_with("06/lse").same_kernel_at(128, "06/lse"))
        .add(make_variant<H200D64, H200D128>("h200", "bc128_s64 + heaviest causal CTAs first (the H200 configuration)")
                 .compared_with("06/bc128_s64"))
        .add(make_variant<H200D64, LeanD128>("d128_lean", "h200 + D=128: K with the A lane map, cp.async offsets per block")
                 .compared_with("06/h200").same_kernel_at(64, "06/h200"))
        .add(make_variant<H200D64, S64U2D128>("d128_s64_unroll2", "d128_lean + D=128: one 64-key S tile per block (FA2's 128x64)")
                 .compared_with("06/d128_lean").same_kernel_at(64, "06/h200"))
        .add(make_variant<H200D64, S64D128>("d128_s64", "d128_s64_unroll2 + D=128: Q K^T's k16 loop not unrolled")
                 .compared_with("06/d128_s64_unroll2").same_kernel_at(64, "06/h200"))
        .main_is("h200"));  // the fastest measured on the H200 (docs/06_fa_v2_2.md)

}  // namespace
