// Step 05 — FlashAttention v2.1: both matrix products on tensor cores.
//
// The algorithm is step 04's: one CTA per block of kBlockM = 128 query rows, the key/value blocks
// streamed through shared memory by a cp.async double buffer, an online softmax with deferred
// normalization, a two-level causal mask (blocks past the diagonal are never loaded; blocks on it
// mask element by element). What changes is where the arithmetic happens and where the matrices
// live:
//
//   S = Q Kᵀ and O += P V are mma.sync.m16n8k16 (fp16 in, fp32 accumulate), fed by ldmatrix;
//   S never leaves registers: it is the mma accumulator, the softmax runs on it in place, and
//     its fp16 repack is already the A operand of P V (same lanes, same rows);
//   O is the accumulator of the second mma, in registers for the whole loop;
//   shared memory only stages Q, K and V.
//
// Four warps own 32 query rows each (two m16 tiles) and never talk to each other inside the loop:
// a row of S lives in the four lanes of one quad, so the row max is two shuffles.
// common/device/mma_fragments.cuh has the fragment maps this file relies on.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "common/check.hpp"
#include "common/device/mma_fragments.cuh"
#include "common/device/ptx.cuh"
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

// ---- Tiles, per head dimension and key block --------------------------------------------------
// Registers decide the tiles. Per thread, with 32 query rows per warp:
//   O accumulator   2 m16 × D/8 n8 × 4 fp32   =  64 (D = 64)   128 (D = 128)
//   S = Q Kᵀ        2 m16 × Bc/8 n8 × 4 fp32  =  32 (Bc = 32)   64 (Bc = 64)
//   Q fragments     2 m16 × D/16 k16 × 4 b32  =  32 (D = 64)    64 (D = 128)
// D = 64 holds all three (≤ 160) with room for the K/V fragments of one k16 step and the
// addresses: Q is read from shared memory once, before the loop. At D = 128 the three need
// 224 or 256 registers before a single temporary, so Q stays in shared memory and each k16 step of
// Q Kᵀ reloads its two A fragments (two more ldmatrix.x4 per step, against 2·Bc/8 mma): the
// alternative, 16 rows per warp (kBlockM = 64), would halve the reuse of every K and V
// fragment and of every K/V tile brought into the CTA. Even so, D = 128 with Bc = 64 uses all
// 255 registers (no spill, but no margin: step 06 has to shrink its S tile).
template <int kHeadDim_, int kBlockN_>
struct Tile {
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kBlockN = kBlockN_;      // keys per block (Bc)
  static constexpr int kBlockM = 128;           // query rows per CTA (Br)
  static constexpr int kWarps = 4;
  static constexpr int kThreads = kWarps * kWarpSize;
  static constexpr int kRowsPerWarp = kBlockM / kWarps;
  static constexpr int kMTiles = kRowsPerWarp / 16;  // m16 tiles per warp
  static constexpr int kDSteps = kHeadDim / 16;      // k16 steps of S = Q Kᵀ (along D)
  static constexpr int kSTiles = kBlockN / 8;        // n8 tiles of S (along keys)
  static constexpr int kKeySteps = kBlockN / 16;     // k16 steps of O += P V (along keys)
  static constexpr int kOTiles = kHeadDim / 8;       // n8 tiles of O (along D)
  static constexpr bool kQInRegisters = kMTiles * 4 * (kDSteps + kOTiles + kSTiles) <= 160;
  // 65536 registers per SM: three CTAs of 128 threads need <= 168 registers per thread. Only
  // D = 64, Bc = 32 gets there; asking it of the others would spill.
  static constexpr int kMinBlocksPerSm = (kHeadDim == 64 && kBlockN == 32) ? 3 : 1;

  // Shared rows padded from D to D + 8 halves (144 or 272 bytes). ldmatrix reads 8 rows of 16
  // bytes at the same column per phase; with a 128- or 256-byte stride those would all start in
  // the same four banks (8-way conflict). A stride of 16 bytes more than a multiple of 128 puts
  // row r at bank offset 16·r mod 128: the 8 rows cover all 32 banks once.
  static constexpr int kStride = kHeadDim + 8;
  static constexpr int kChunksPerRow = kHeadDim / 8;  // 16-byte cp.async chunks
  static constexpr int kStages = 2;                   // K/V double buffer
  static constexpr int kQElems = kBlockM * kStride;
  static constexpr int kKVElems = kBlockN * kStride;  // one K (or V) stage
  static constexpr std::size_t kSmemBytes = sizeof(__half) * (kQElems + 2 * kStages * kKVElems);

  static_assert(kHeadDim % 16 == 0 && kBlockN % 16 == 0 && kRowsPerWarp % 16 == 0);
  static_assert(kThreads % kChunksPerRow == 0);
};

// ---- Global -> shared: one tile of rows, 16 bytes per cp.async --------------------------------
// `tile` points at the tile's first row in global memory and `rows_left` rows from there exist
// (at least one). The rest are zero-filled (src_bytes = 0 reads nothing) and take row 0 as their
// source address, so no address past the tensor is ever formed. Consecutive threads take
// consecutive 16-byte chunks of a row: each warp reads whole 128-byte lines.
template <class T, int kRows>
__device__ __forceinline__ void load_tile(__half* smem, const __half* tile, int rows_left, int tid) {
  constexpr int kRowsPerPass = T::kThreads / T::kChunksPerRow;
  static_assert(kRows % kRowsPerPass == 0);
  const int chunk = tid % T::kChunksPerRow;
  const int first_row = tid / T::kChunksPerRow;
#pragma unroll
  for (int pass = 0; pass < kRows / kRowsPerPass; ++pass) {
    const int row = first_row + pass * kRowsPerPass;
    const bool valid = row < rows_left;
    const __half* src = tile + (valid ? row * T::kHeadDim : 0) + chunk * 8;
    ptx::cp_async_16(smem + row * T::kStride + chunk * 8, src, valid ? 16 : 0);
  }
}

// ---- S = Q Kᵀ for the warp's 32 rows × kBlockN keys -------------------------------------------
// `q_lane` / `k_lane` are this lane's ldmatrix row addresses for the first k16 step (A map for
// Q, B map for K); every other fragment is a compile-time offset from them.
template <class T>
__device__ __forceinline__ void gemm_qk(float (&s)[T::kMTiles][T::kSTiles][4],
                                        const std::uint32_t (&q_frag)[T::kMTiles][T::kDSteps][4],
                                        const __half* q_lane, const __half* k_lane) {
#pragma unroll
  for (int mi = 0; mi < T::kMTiles; ++mi)
#pragma unroll
    for (int ni = 0; ni < T::kSTiles; ++ni)
#pragma unroll
      for (int c = 0; c < 4; ++c) s[mi][ni][c] = 0.f;

#pragma unroll
  for (int kk = 0; kk < T::kDSteps; ++kk) {
    std::uint32_t a[T::kMTiles][4];
#pragma unroll
    for (int mi = 0; mi < T::kMTiles; ++mi) {
      if constexpr (T::kQInRegisters) {
#pragma unroll
        for (int r = 0; r < 4; ++r) a[mi][r] = q_frag[mi][kk][r];
      } else {
        ptx::ldmatrix_x4(a[mi], q_lane + mi * 16 * T::kStride + kk * 16);
      }
    }
#pragma unroll
    for (int np = 0; np < T::kSTiles / 2; ++np) {  // two n8 tiles of keys per ldmatrix.x4
      std::uint32_t b[4];
      ptx::ldmatrix_x4(b, k_lane + np * 16 * T::kStride + kk * 16);
      const std::uint32_t b_lo[2] = {b[0], b[1]}, b_hi[2] = {b[2], b[3]};
#pragma unroll
      for (int mi = 0; mi < T::kMTiles; ++mi) {
        ptx::mma_m16n8k16_f32(s[mi][2 * np], a[mi], b_lo);
        ptx::mma_m16n8k16_f32(s[mi][2 * np + 1], a[mi], b_hi);
      }
    }
  }
}

// ---- Element mask: ragged last block and the causal diagonal ----------------------------------
// Element c of S tile ni sits at key kv_start + 8·ni + 2t + (c & 1) and query row
// warp_row0 + 16·mi + g + 8·(c >> 1). A key is visible to row r if key < n and, when causal,
// key <= r. Subtracting the lane's own key offset once per row leaves one compare against a
// compile-time constant per element.
template <class T, bool kCausal>
__device__ __forceinline__ void apply_mask(float (&s)[T::kMTiles][T::kSTiles][4], int warp_row0,
                                           int kv_start, int n, int g, int t) {
#pragma unroll
  for (int mi = 0; mi < T::kMTiles; ++mi)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = warp_row0 + mi * 16 + g + 8 * h;
      const int key_end = kCausal ? min(n, row + 1) : n;  // keys < key_end are visible
      const int visible = key_end - kv_start - 2 * t;
#pragma unroll
      for (int ni = 0; ni < T::kSTiles; ++ni)
#pragma unroll
        for (int e = 0; e < 2; ++e)
          if (8 * ni + e >= visible) s[mi][ni][2 * h + e] = -INFINITY;
    }
}

// ---- Online softmax on the S fragment, in place -----------------------------------------------
// Each lane holds 4 rows (2 m16 tiles × rows g and g + 8); row_max is kept in raw logit units,
// the exponent is exp2(s·scale·log2e − m·scale·log2e): one FFMA and one MUFU.EX2 per element.
// A row whose keys in this block and before were all masked has max −inf; subtracting it would
// give −inf − (−inf) = NaN, so the subtracted max is clamped to 0 (every p is then exp2(−inf) = 0).
// The history, row_sum AND acc_o, is rescaled by exp2(m_old − m_new) before this block is added:
// forgetting row_sum here is the classic bug (the output is then off by a per-row factor).
// row_sum stays a per-lane partial sum: the quad reduction waits for the epilogue.
template <class T>
__device__ __forceinline__ void online_softmax(float (&s)[T::kMTiles][T::kSTiles][4],
                                               float (&row_max)[T::kMTiles][2],
                                               float (&row_sum)[T::kMTiles][2],
                                               float (&acc_o)[T::kMTiles][T::kOTiles][4],
                                               float scale_log2) {
#pragma unroll
  for (int mi = 0; mi < T::kMTiles; ++mi)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float m = row_max[mi][h];
#pragma unroll
      for (int ni = 0; ni < T::kSTiles; ++ni)
        m = fmaxf(m, fmaxf(s[mi][ni][2 * h], s[mi][ni][2 * h + 1]));
      m = frag::quad_max(m);

      const float m_scaled = (m == -INFINITY) ? 0.f : m * scale_log2;
      const float rescale = ptx::exp2_approx(row_max[mi][h] * scale_log2 - m_scaled);
      row_max[mi][h] = m;
      row_sum[mi][h] *= rescale;
#pragma unroll
      for (int nd = 0; nd < T::kOTiles; ++nd) {
        acc_o[mi][nd][2 * h] *= rescale;
        acc_o[mi][nd][2 * h + 1] *= rescale;
      }
      float pair_sum[T::kSTiles];
#pragma unroll
      for (int ni = 0; ni < T::kSTiles; ++ni) {
        const float p0 = ptx::exp2_approx(fmaf(s[mi][ni][2 * h], scale_log2, -m_scaled));
        const float p1 = ptx::exp2_approx(fmaf(s[mi][ni][2 * h + 1], scale_log2, -m_scaled));
        s[mi][ni][2 * h] = p0;
        s[mi][ni][2 * h + 1] = p1;
        pair_sum[ni] = p0 + p1;
      }
      // A tree instead of one running sum: a chain of 2·kSTiles dependent FADDs is scheduled
      // after the P V mma and keeps every fp32 p alive next to its fp16 copy (at D = 128 that
      // alone pushed the kernel into spills).
#pragma unroll
      for (int stride = 1; stride < T::kSTiles; stride *= 2)
#pragma unroll
        for (int ni = 0; ni + stride < T::kSTiles; ni += 2 * stride)
          pair_sum[ni] += pair_sum[ni + stride];
      row_sum[mi][h] += pair_sum[0];
    }
}

// ---- O += P V ---------------------------------------------------------------------------------
// The C fragments of S tiles 2kk and 2kk+1 (keys 16kk..16kk+15) are, pair by pair, the A
// fragment of key step kk: a0 = row g keys 2t,2t+1 = tile 2kk (c0, c1); a1 = row g+8 = tile 2kk
// (c2, c3); a2, a3 = the same from tile 2kk+1. Packing to half2 is the only work. V is row-major
// [key][d], so its B fragments come from ldmatrix.trans with the A-operand address map.
template <class T>
__device__ __forceinline__ void gemm_pv(float (&acc_o)[T::kMTiles][T::kOTiles][4],
                                        const float (&p)[T::kMTiles][T::kSTiles][4],
                                        const __half* v_lane) {
#pragma unroll
  for (int kk = 0; kk < T::kKeySteps; ++kk) {
    std::uint32_t a[T::kMTiles][4];
#pragma unroll
    for (int mi = 0; mi < T::kMTiles; ++mi) {
      a[mi][0] = ptx::pack_half2(p[mi][2 * kk][0], p[mi][2 * kk][1]);
      a[mi][1] = ptx::pack_half2(p[mi][2 * kk][2], p[mi][2 * kk][3]);
      a[mi][2] = ptx::pack_half2(p[mi][2 * kk + 1][0], p[mi][2 * kk + 1][1]);
      a[mi][3] = ptx::pack_half2(p[mi][2 * kk + 1][2], p[mi][2 * kk + 1][3]);
    }
#pragma unroll
    for (int dp = 0; dp < T::kOTiles / 2; ++dp) {  // two n8 tiles of head dims per ldmatrix.x4
      std::uint32_t b[4];
      ptx::ldmatrix_x4_trans(b, v_lane + kk * 16 * T::kStride + dp * 16);
      const std::uint32_t b_lo[2] = {b[0], b[1]}, b_hi[2] = {b[2], b[3]};
#pragma unroll
      for (int mi = 0; mi < T::kMTiles; ++mi) {
        ptx::mma_m16n8k16_f32(acc_o[mi][2 * dp], a[mi], b_lo);
        ptx::mma_m16n8k16_f32(acc_o[mi][2 * dp + 1], a[mi], b_hi);
      }
    }
  }
}

// ---- The kernel -------------------------------------------------------------------------------
// grid (ceil(N / kBlockM), B·H): blockIdx.x is the fastest-moving index, so the CTAs that run
// together share one head's K and V through L2.
template <class T, bool kCausal>
__global__ void __launch_bounds__(T::kThreads, T::kMinBlocksPerSm)
    fa_v2_1_kernel(const __half* __restrict__ q, const __half* __restrict__ k,
                   const __half* __restrict__ v, __half* __restrict__ o, int n, float scale_log2) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __half* s_q = reinterpret_cast<__half*>(smem_raw);  // [kBlockM][kStride]
  __half* s_k = s_q + T::kQElems;                     // [kStages][kBlockN][kStride]
  __half* s_v = s_k + T::kStages * T::kKVElems;       // [kStages][kBlockN][kStride]

  const int tid = threadIdx.x;
  const int warp = tid / kWarpSize;
  const int lane = tid % kWarpSize;
  const int g = frag::group_of(lane);
  const int t = frag::thread_in_group(lane);

  const int q_start = blockIdx.x * T::kBlockM;
  const int warp_row0 = q_start + warp * T::kRowsPerWarp;
  const std::int64_t head = std::int64_t(blockIdx.y) * n * T::kHeadDim;
  const __half* k_head = k + head;
  const __half* v_head = v + head;

  // Block-level causal skip: the CTA's last row is q_start + kBlockM − 1, so no key past it is
  // ever needed and those blocks are never loaded.
  const int kv_end = kCausal ? min(n, q_start + T::kBlockM) : n;
  const int n_blocks = ceil_div(kv_end, T::kBlockN);

  // Prologue: Q (its own commit group), then the first K/V block.
  load_tile<T, T::kBlockM>(s_q, q + head + std::int64_t(q_start) * T::kHeadDim, n - q_start, tid);
  ptx::cp_async_commit();
  load_tile<T, T::kBlockN>(s_k, k_head, n, tid);
  load_tile<T, T::kBlockN>(s_v, v_head, n, tid);
  ptx::cp_async_commit();

  // This lane's ldmatrix row addresses (A map for Q and V, B map for K) in stage 0.
  const __half* q_lane =
      s_q + (warp * T::kRowsPerWarp + frag::ldsm_a_row(lane)) * T::kStride + frag::ldsm_a_col(lane);
  const int k_lane_offset = frag::ldsm_b_row(lane) * T::kStride + frag::ldsm_b_col(lane);
  const int v_lane_offset = frag::ldsm_a_row(lane) * T::kStride + frag::ldsm_a_col(lane);

  // Q fragments, loaded once (D = 64): the Q group is complete once at most one group is pending.
  std::uint32_t q_frag[T::kMTiles][T::kDSteps][4];
  if constexpr (T::kQInRegisters) {
    ptx::cp_async_wait<1>();
    __syncthreads();
#pragma unroll
    for (int mi = 0; mi < T::kMTiles; ++mi)
#pragma unroll
      for (int kk = 0; kk < T::kDSteps; ++kk)
        ptx::ldmatrix_x4(q_frag[mi][kk], q_lane + mi * 16 * T::kStride + kk * 16);
  }

  float acc_o[T::kMTiles][T::kOTiles][4];
  float row_max[T::kMTiles][2];
  float row_sum[T::kMTiles][2];
#pragma unroll
  for (int mi = 0; mi < T::kMTiles; ++mi) {
#pragma unroll
    for (int nd = 0; nd < T::kOTiles; ++nd)
#pragma unroll
      for (int c = 0; c < 4; ++c) acc_o[mi][nd][c] = 0.f;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      row_max[mi][h] = -INFINITY;
      row_sum[mi][h] = 0.f;
    }
  }

  // Where block j + 1 starts and how many of its rows exist: pointer increments, so the loop
  // does no 64-bit index arithmetic.
  const __half* k_next = k_head;
  const __half* v_next = v_head;
  int rows_left = n;
  for (int j = 0; j < n_blocks; ++j) {
    const int stage = j & 1;
    const int kv_start = j * T::kBlockN;

    // Block j is the only group in flight. After the barrier it is visible to every thread, and
    // every thread has finished block j − 1, so its stage can be refilled with block j + 1,
    // which then lands while this block is computed.
    ptx::cp_async_wait<0>();
    __syncthreads();
    if (j + 1 < n_blocks) {
      k_next += T::kBlockN * T::kHeadDim;
      v_next += T::kBlockN * T::kHeadDim;
      rows_left -= T::kBlockN;
      load_tile<T, T::kBlockN>(s_k + (stage ^ 1) * T::kKVElems, k_next, rows_left, tid);
      load_tile<T, T::kBlockN>(s_v + (stage ^ 1) * T::kKVElems, v_next, rows_left, tid);
      ptx::cp_async_commit();
    }

    float s[T::kMTiles][T::kSTiles][4];
    gemm_qk<T>(s, q_frag, q_lane, s_k + stage * T::kKVElems + k_lane_offset);

    // Only the ragged last block and the blocks that reach past the warp's first row need the
    // element mask; the test is uniform across the warp.
    const bool ragged = kv_start + T::kBlockN > n;
    const bool diagonal = kCausal && kv_start + T::kBlockN - 1 > warp_row0;
    if (ragged || diagonal) apply_mask<T, kCausal>(s, warp_row0, kv_start, n, g, t);

    online_softmax<T>(s, row_max, row_sum, acc_o, scale_log2);
    gemm_pv<T>(acc_o, s, s_v + stage * T::kKVElems + v_lane_offset);
  }

  // Epilogue: finish the deferred row sums (quad reduction), normalize, store fp16 straight from
  // the accumulator. A lane owns two adjacent columns of a row, so each store is 4 bytes and a
  // warp's store touches 8 rows × 16 bytes: coalescing is poor (step 06 stages O through shared
  // memory). Every stored row has l >= 1: its max element contributes exp2(0).
  __half* o_head = o + head;
#pragma unroll
  for (int mi = 0; mi < T::kMTiles; ++mi)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float inv_sum = 1.f / frag::quad_sum(row_sum[mi][h]);
      const int row = warp_row0 + mi * 16 + g + 8 * h;
      if (row < n) {
        __half* dst = o_head + std::int64_t(row) * T::kHeadDim + 2 * t;
#pragma unroll
        for (int nd = 0; nd < T::kOTiles; ++nd)
          *reinterpret_cast<__half2*>(dst + nd * 8) = __floats2half2_rn(
              acc_o[mi][nd][2 * h] * inv_sum, acc_o[mi][nd][2 * h + 1] * inv_sum);
      }
    }
}

// ---- Host side --------------------------------------------------------------------------------
template <class T, bool kCausal>
void launch_tile(const AttentionArgs& a, cudaStream_t stream) {
  const auto& sh = a.shape;
  auto* kernel = fa_v2_1_kernel<T, kCausal>;
  if constexpr (T::kSmemBytes > kDefaultDynamicSmem)
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    int(T::kSmemBytes)));
  const dim3 grid(ceil_div(sh.seqlen, T::kBlockM), sh.batch * sh.heads);
  kernel<<<grid, T::kThreads, T::kSmemBytes, stream>>>(a.q, a.k, a.v, a.o, sh.seqlen,
                                                       a.softmax_scale * kLog2e);
  CUDA_CHECK_LAUNCH("fa_v2_1_kernel");
}

template <int kBlockN>
void launch(const AttentionArgs& a, cudaStream_t stream) {
  ladder::dispatch_head_dim<64, 128>(a.shape.head_dim, [&]<int kHeadDim>() {
    using T = Tile<kHeadDim, kBlockN>;
    a.shape.causal ? launch_tile<T, true>(a, stream) : launch_tile<T, false>(a, stream);
  });
}

template <class T>
std::vector<ladder::KernelInfo> kernel_pair(const char* name) {
  return {ladder::kernel(ladder::strprintf("%s<D=%d,Bc=%d>", name, T::kHeadDim, T::kBlockN),
                        fa_v2_1_kernel<T, false>, T::kThreads, T::kSmemBytes)
              .when_causal(false),
          ladder::kernel(ladder::strprintf("%s<D=%d,Bc=%d,causal>", name, T::kHeadDim, T::kBlockN),
                        fa_v2_1_kernel<T, true>, T::kThreads, T::kSmemBytes)
              .when_causal(true)};
}

template <int kBlockN>
ladder::Variant make_variant(const char* name, const char* description) {
  return ladder::attention_variant(name, description, launch<kBlockN>)
      .needs_sm(80)  // cp.async, ldmatrix, mma.sync.m16n8k16
      .for_head_dims({64, 128})
      .batch_heads_on_grid_yz()  // grid (query blocks, B·H)
      .with_kernels([](int head_dim) {
        return head_dim == 128 ? kernel_pair<Tile<128, kBlockN>>("fa_v2_1_kernel")
                               : kernel_pair<Tile<64, kBlockN>>("fa_v2_1_kernel");
      });
}

LADDER_REGISTER_STEP(
    ladder::attention_step(5, "fa_v2_1",
                           "FlashAttention v2.1: both GEMMs on tensor cores (mma.sync + ldmatrix)",
                           "04/br128")
        .add(make_variant<32>("bc32", "Br=128 (4 warps × 32 rows), Bc=32, S/P/O in registers, padded smem"))
        .add(make_variant<64>("bc64", "Br=128 (4 warps × 32 rows), Bc=64, S/P/O in registers, padded smem"))
        .main_is("bc64"));  // the faster on the H200 (docs/05_fa_v2_1.md says why)

}  // namespace
