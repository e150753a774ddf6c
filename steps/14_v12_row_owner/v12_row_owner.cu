// Step 14 — the B300 series, V12: one warp owns whole rows; the softmax moves into registers.
//
// The series' diagnosis after V11: with a row of logits split across two warps, S has to cross
// shared memory before the softmax and P after it, and every softmax step is a chain of shared
// loads and 5-step shuffles. The fix is the layout: give each warp whole rows.
//
//   * Br = 64 query rows, 256 threads (8 warps). Q Kᵀ: warps 0-3, warp w owns rows 16w .. 16w + 15
//     and all 64 keys of the block (8 n8 tiles, 32 fp32 of S per lane).
//   * The softmax runs on those registers: a row lives in one quad of lanes, so its max and sum
//     are a reduction in the lane's own registers plus 2 shuffles (xor 1, 2) — no shared-memory
//     round trip for S, no 5-step chains. The running max and sum stay in registers (the sum as
//     per-lane partials, reduced across the quad once, at the end).
//   * P crosses shared memory once (fp16, swizzled), because O += P V keeps step 13's 2-way split
//     of D over warps: 8 warps as 4 row groups × 2 halves of D. Warps 4-7 wait at the barrier
//     while warps 0-3 compute S and P (step 15 gives them work).
//   * The rescale factor of each row goes to shared memory for the P V warps (V6/V11's reuse),
//     the scale stays deferred into the exponent's FFMA, the Q Kᵀ addresses stay specialized.
//
// Removed with the old layout: the S staging buffer and its padding (v5), the softmax's rows per
// warp (v4, v7) and vec2 accesses (v8), the shared running max, the Q Kᵀ pipelining variants (V9's
// losers) and the first-block softmax (v11's loser). Kept: swizzled Q, K, V and P, the pipeline
// (one K and one V buffer, four barriers per block), the epilogue.
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
  kSwizzlePv = 1u << 0,      // v2: P and V swizzled
  kSwizzleQk = 1u << 1,      // v3: Q and K swizzled
  kQkSpecialized = 1u << 7,  // v9 qkspecialized: shift/add/xor addresses
};

template <int kHeadDim_, unsigned kFeatures>
struct Config {
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kBlockM = 64;  // Br: query rows per CTA
  static constexpr int kBlockN = 64;  // Bc: keys per block
  static constexpr int kWarps = 8;
  static constexpr int kThreads = kWarps * kWarpSize;

  // Q Kᵀ and the softmax: warps 0 .. kRowWarps − 1, warp w owns rows 16w .. 16w + 15, all keys.
  static constexpr int kRowWarps = kBlockM / 16;
  static constexpr int kQkTiles = kBlockN / 8;       // n8 tiles of S per warp
  static constexpr int kDSteps = kHeadDim / 16;      // k16 steps of Q Kᵀ
  // P V: all warps as a (kBlockM / 16) × 2 grid: warp w owns rows 16·(w / 2), head dims
  // (D / 2)·(w % 2).
  static constexpr int kWarpsN = 2;
  static constexpr int kPvCols = kHeadDim / kWarpsN;  // head dims of O per warp
  static constexpr int kPvTiles = kPvCols / 8;
  static constexpr int kKeySteps = kBlockN / 16;      // k16 steps of P V

  static constexpr bool kSwizzledQk = (kFeatures & kSwizzleQk) != 0;
  static constexpr bool kSpecialized = (kFeatures & kQkSpecialized) != 0;
  static constexpr bool kSwizzledPv = (kFeatures & kSwizzlePv) != 0;
  static constexpr int kPStride = kBlockN;  // fp16

  // Shared memory, in bytes: the fp16 tiles first (cp.async and ldmatrix want 16-byte rows),
  // then P and the row statistics.
  static constexpr int kQBytes = kBlockM * kHeadDim * 2;
  static constexpr int kKVBytes = kBlockN * kHeadDim * 2;
  static constexpr int kPBytes = kBlockM * kPStride * 2;
  static constexpr int kStatBytes = kBlockM * 4;  // one float per row
  static constexpr std::size_t kSmemBytes =
      std::size_t(kQBytes) + 2 * kKVBytes + kPBytes + 2 * kStatBytes;

  static_assert(kHeadDim % 64 == 0, "the swizzle needs rows of a multiple of 64 halves");
  static_assert(kSpecialized, "V12 keeps V9's specialized Q K^T addresses");
  static_assert(kRowWarps * kWarpsN == kWarps);
  static_assert(kThreads % (kHeadDim / 8) == 0);
};

// ---- S = Q Kᵀ for the warp's 16 rows × 64 keys, kept in registers -----------------------------
// The lane's ldmatrix row never changes, only the 16-byte chunk does: logical chunk 2·kk + c,
// stored at (2·kk + c) ^ (row % 8) (V9's specialized addresses).
template <class C>
__device__ __forceinline__ void gemm_qk(float (&acc)[C::kQkTiles][4], const __half* s_q,
                                        const __half* s_k, int warp, int lane) {
  const int row0 = 16 * warp;
#pragma unroll
  for (int j = 0; j < C::kQkTiles; ++j)
#pragma unroll
    for (int c = 0; c < 4; ++c) acc[j][c] = 0.f;

  constexpr int kKTiles = C::kQkTiles / 2;  // ldmatrix.x4 of K per step (two n8 tiles each)
  const int a_row = row0 + frag::ldsm_a_row(lane);
  const __half* a_base = s_q + a_row * C::kHeadDim;
  const int a_chunk = frag::ldsm_a_col(lane) >> 3;
  const int a_xor = C::kSwizzledQk ? (a_row & 7) : 0;
  const int b_row = frag::ldsm_b_row(lane);  // + 16·np: row % 8 unchanged
  const __half* b_base = s_k + b_row * C::kHeadDim;
  const int b_chunk = frag::ldsm_b_col(lane) >> 3;
  const int b_xor = C::kSwizzledQk ? (b_row & 7) : 0;
#pragma unroll
  for (int kk = 0; kk < C::kDSteps; ++kk) {
    std::uint32_t a[4];
    ptx::ldmatrix_x4(a, a_base + (((2 * kk + a_chunk) ^ a_xor) << 3));
#pragma unroll
    for (int np = 0; np < kKTiles; ++np) {
      std::uint32_t b[4];
      ptx::ldmatrix_x4(b, b_base + np * 16 * C::kHeadDim + (((2 * kk + b_chunk) ^ b_xor) << 3));
      const std::uint32_t b_lo[2] = {b[0], b[1]}, b_hi[2] = {b[2], b[3]};
      ptx::mma_m16n8k16_f32(acc[2 * np], a, b_lo);
      ptx::mma_m16n8k16_f32(acc[2 * np + 1], a, b_hi);
    }
  }
}

// ---- The online softmax in registers, P out to shared memory -----------------------------------
// Lane (g, t) holds, of every n8 tile j, the logits (g, 8j + 2t .. 8j + 2t + 1) and
// (g + 8, same keys): rows g and g + 8 of the warp's 16 (h = 0, 1). A row's max is a max over the
// lane's 16 values and then over its quad (2 shuffles). Logits of keys past N, and above the
// diagonal when causal, become −inf. Keys are visited first to last, so the first block gives
// every row a finite max (key 0 is visible to every row).
template <class C, bool kCausal>
__device__ __forceinline__ void softmax(float (&s)[C::kQkTiles][4], float (&row_max)[2],
                                        float (&row_sum)[2], __half* s_p, float* s_rescale,
                                        int warp, int lane, int q_start, int kv_start, int n,
                                        float scale_log2) {
  const int g = frag::group_of(lane), t = frag::thread_in_group(lane);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = 16 * warp + g + 8 * h;
    const int key_end = kCausal ? min(n, q_start + row + 1) : n;  // keys < key_end are visible
    float m_tile = -INFINITY;
#pragma unroll
    for (int j = 0; j < C::kQkTiles; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        if (kv_start + 8 * j + 2 * t + e >= key_end) s[j][2 * h + e] = -INFINITY;
        m_tile = fmaxf(m_tile, s[j][2 * h + e]);
      }
    m_tile = frag::quad_max(m_tile);

    const float m_new = fmaxf(row_max[h], m_tile);
    const float m_log2 = m_new * scale_log2;
    const float rescale = ptx::exp2_approx(fmaf(row_max[h], scale_log2, -m_log2));
    row_max[h] = m_new;
    float sum = 0.f;
#pragma unroll
    for (int j = 0; j < C::kQkTiles; ++j) {
      const float p0 = ptx::exp2_approx(fmaf(s[j][2 * h], scale_log2, -m_log2));
      const float p1 = ptx::exp2_approx(fmaf(s[j][2 * h + 1], scale_log2, -m_log2));
      sum += p0 + p1;
      // 8 rows (g) × 4 lanes (t) of 4 bytes at one logical chunk: 8 different bank groups once
      // swizzled, so the warp's store is conflict-free.
      *reinterpret_cast<__half2*>(s_p + tile_offset<C::kSwizzledPv, C::kPStride>(row, 8 * j + 2 * t)) =
          __floats2half2_rn(p0, p1);
    }
    row_sum[h] = fmaf(row_sum[h], rescale, sum);  // this lane's partial sum
    if (t == 0) s_rescale[row] = rescale;          // the quad agrees on it
  }
}

// ---- O = O · exp(m_prev − m) + P V for the warp's 16 rows × D/2 head dims ----------------------
template <class C>
__device__ __forceinline__ void gemm_pv(float (&acc_o)[C::kPvTiles][4], const __half* s_p,
                                        const __half* s_v, const float* s_rescale, int warp,
                                        int lane) {
  const int row0 = 16 * (warp / C::kWarpsN);
  const int dim0 = C::kPvCols * (warp % C::kWarpsN);
  const int g = frag::group_of(lane);
  // The rescale factor of its two rows, computed once by the softmax.
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = row0 + g + 8 * h;
    const float rescale = s_rescale[row];
#pragma unroll
    for (int nd = 0; nd < C::kPvTiles; ++nd) {
      acc_o[nd][2 * h] *= rescale;
      acc_o[nd][2 * h + 1] *= rescale;
    }
  }
  part3::pv_product<C>(acc_o, s_p, s_v, row0, dim0, lane);  // then the k16 steps of P V
}

// ---- The kernel: grid (ceil(N / 64), B·H), 256 threads ------------------------------------------
template <class C, bool kCausal>
__global__ void __launch_bounds__(C::kThreads)
    b300_kernel(const __half* __restrict__ q, const __half* __restrict__ k,
              const __half* __restrict__ v, __half* __restrict__ o, int n, float scale_log2) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  __half* s_q = reinterpret_cast<__half*>(smem_raw);
  __half* s_k = reinterpret_cast<__half*>(smem_raw + C::kQBytes);
  __half* s_v = reinterpret_cast<__half*>(smem_raw + C::kQBytes + C::kKVBytes);
  __half* s_p = reinterpret_cast<__half*>(smem_raw + C::kQBytes + 2 * C::kKVBytes);
  float* s_rescale = reinterpret_cast<float*>(smem_raw + C::kQBytes + 2 * C::kKVBytes + C::kPBytes);
  float* s_sum = s_rescale + C::kBlockM;

  const int tid = threadIdx.x;
  const int warp = tid / kWarpSize;
  const int lane = tid % kWarpSize;
  const int q_start = blockIdx.x * C::kBlockM;
  const std::int64_t head = std::int64_t(blockIdx.y) * n * C::kHeadDim;
  const int kv_end = kCausal ? min(n, q_start + C::kBlockM) : n;
  const int n_blocks = ceil_div(kv_end, C::kBlockN);

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
  // The running max and this lane's partial sum of rows g and g + 8 (Q Kᵀ warps only).
  float row_max[2] = {-INFINITY, -INFINITY};
  float row_sum[2] = {0.f, 0.f};

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
    if (warp < C::kRowWarps) {
      float s[C::kQkTiles][4];
      gemm_qk<C>(s, s_q, s_k, warp, lane);
      softmax<C, kCausal>(s, row_max, row_sum, s_p, s_rescale, warp, lane, q_start, kv_start, n,
                          scale_log2);
    }
    __syncthreads();  // P and the rescale factors written; K free
    if (has_next) load_tile<C, C::kBlockN, C::kSwizzledQk>(s_k, k + next, n - kv_start - C::kBlockN, tid);
    ptx::cp_async_commit();

    ptx::cp_async_wait<1>();
    __syncthreads();  // V visible
    gemm_pv<C>(acc_o, s_p, s_v, s_rescale, warp, lane);
    __syncthreads();  // V and P free
    if (has_next) load_tile<C, C::kBlockN, C::kSwizzledPv>(s_v, v + next, n - kv_start - C::kBlockN, tid);
    ptx::cp_async_commit();
  }

  // Epilogue: the Q Kᵀ warps reduce their partial sums across the quad and hand l to the P V
  // warps; then O / l, 4 bytes per lane straight from the accumulator (every stored row has
  // l >= 1: its max element contributes exp(0)).
  if (warp < C::kRowWarps) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float l = frag::quad_sum(row_sum[h]);
      if (frag::thread_in_group(lane) == 0) s_sum[16 * warp + frag::group_of(lane) + 8 * h] = l;
    }
  }
  __syncthreads();
  part3::store_o<C>(o, head, acc_o, s_sum, q_start, n, warp, lane);
}

// ---- Host side: common/part3_launch.hpp launches and registers the kernel ----------------------
struct B300 {
  template <int kHeadDim, unsigned kFeatures> using config = Config<kHeadDim, kFeatures>;
  template <class C, bool kCausal> static auto* kernel() { return b300_kernel<C, kCausal>; }
  static constexpr bool kScaleLog2 = true;  // the kernel's scale_log2 = softmax_scale · log2 e
};

constexpr unsigned kV12 = kSwizzlePv | kSwizzleQk | kQkSpecialized;

LADDER_REGISTER_STEP(
    ladder::attention_step(14, "v12_row_owner",
                           "B300 series V12: one warp owns whole rows, softmax in registers, P through smem once",
                           "13/v11_ablation")
        .add(part3::variant<B300, kV12>("v12", "Br=64, 8 warps: warps 0-3 Q K^T + softmax on whole rows in registers; all 8 P V"))
        .main_is("v12"));

}  // namespace
