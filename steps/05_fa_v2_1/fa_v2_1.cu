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
// common/device/mma_fragments.cuh has the fragment maps this file relies on, and
// common/device/mma_attention.cuh the fragment loops on them (S = Q Kᵀ, the mask, the online
// softmax, O += P V) that steps 06 and 30 share with this one.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "common/attention_launch.hpp"
#include "common/device/mma_attention.cuh"
#include "common/math.hpp"
#include "common/registry.hpp"
#include "common/strings.hpp"

namespace {

using ladder::AttentionArgs;
using ladder::ceil_div;
using ladder::mma::kWarpSize;
namespace ptx = ladder::ptx;
namespace frag = ladder::frag;
namespace mma = ladder::mma;
using ladder::kLog2e;

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
//
// mma::Shape has the counts (4 warps × 32 rows, m16/n8/k16 tiles, the stage sizes). Its shared
// rows are padded from D to D + 8 halves (144 or 272 bytes): ldmatrix reads 8 rows of 16 bytes
// at the same column per phase; with a 128- or 256-byte stride those would all start in the same
// four banks (8-way conflict). A stride of 16 bytes more than a multiple of 128 puts row r at
// bank offset 16·r mod 128: the 8 rows cover all 32 banks once.
template <int kHeadDim_, int kBlockN_>
struct Tile : mma::Shape<kHeadDim_, kBlockN_> {
  using Base = mma::Shape<kHeadDim_, kBlockN_>;
  static constexpr bool kQInRegisters =
      Base::kMTiles * 4 * (Base::kDSteps + Base::kOTiles + Base::kSTiles) <= 160;
  // 65536 registers per SM: three CTAs of 128 threads need <= 168 registers per thread. Only
  // D = 64, Bc = 32 gets there; asking it of the others would spill.
  static constexpr int kMinBlocksPerSm = (kHeadDim_ == 64 && kBlockN_ == 32) ? 3 : 1;
};

// ---- The kernel -------------------------------------------------------------------------------
// grid (ceil(N / kBlockM), B·H) (mma::query_block_grid): blockIdx.x is the fastest-moving index,
// so the CTAs that run together share one head's K and V through L2.
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
  mma::load_tile<T, T::kBlockM>(s_q, q + head + std::int64_t(q_start) * T::kHeadDim, n - q_start,
                                tid);
  ptx::cp_async_commit();
  mma::load_tile<T, T::kBlockN>(s_k, k_head, n, tid);
  mma::load_tile<T, T::kBlockN>(s_v, v_head, n, tid);
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
    mma::load_q_fragments<T>(q_frag, q_lane);
  }

  // The running state of the warp's rows: O = 0, m = −inf, l = 0.
  float acc_o[T::kMTiles][T::kOTiles][4];
  float row_max[T::kMTiles][2];
  float row_sum[T::kMTiles][2];
  mma::init_rows<T>(acc_o, row_max, row_sum);

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
      mma::load_tile<T, T::kBlockN>(s_k + (stage ^ 1) * T::kKVElems, k_next, rows_left, tid);
      mma::load_tile<T, T::kBlockN>(s_v + (stage ^ 1) * T::kKVElems, v_next, rows_left, tid);
      ptx::cp_async_commit();
    }

    float s[T::kMTiles][T::kSTiles][4];
    mma::gemm_qk<T>(s, q_frag, q_lane, s_k + stage * T::kKVElems + k_lane_offset);

    // Only the ragged last block and the blocks that reach past the warp's first row need the
    // element mask; the test is uniform across the warp.
    const bool ragged = kv_start + T::kBlockN > n;
    const bool diagonal = kCausal && kv_start + T::kBlockN - 1 > warp_row0;
    if (ragged || diagonal) mma::apply_mask<T, kCausal>(s, warp_row0, kv_start, n, g, t);

    mma::online_softmax<T>(s, row_max, row_sum, acc_o, scale_log2);
    mma::gemm_pv<T>(acc_o, s, s_v + stage * T::kKVElems + v_lane_offset);
  }

  // Epilogue: finish the deferred row sums (quad reduction), normalize, store fp16 straight from
  // the accumulator: 4 bytes per lane, so coalescing is poor (step 06 stages O through shared
  // memory). Every stored row has l >= 1: its max element contributes exp2(0).
  const auto inv_sum = [&](int mi, int h) { return mma::quad_inverse_sum(row_sum[mi][h]); };
  mma::store_o<T>(o + head, acc_o, inv_sum, warp_row0, n, g, t);
}

// ---- Host side (the boilerplate is common/attention_launch.hpp's) ------------------------------
struct FaV21 {
  template <class T, bool kCausal>
  static void launch(const AttentionArgs& a, cudaStream_t stream) {
    mma::launch_kernel<T>(fa_v2_1_kernel<T, kCausal>, mma::query_block_grid<T>(a.shape), stream,
                          "fa_v2_1_kernel", a.q, a.k, a.v, a.o, a.shape.seqlen,
                          a.softmax_scale * kLog2e);
  }
  template <class T>
  static std::vector<ladder::KernelInfo> kernels(const char* /*variant*/) {
    const auto name = ladder::strprintf("fa_v2_1_kernel<D=%d,Bc=%d", T::kHeadDim, T::kBlockN);
    return mma::kernel_pair<T>(name + ">", name + ",causal>", fa_v2_1_kernel<T, false>,
                               fa_v2_1_kernel<T, true>);
  }
};

template <int kBlockN>
ladder::Variant make_variant(const char* name, const char* description) {
  return mma::variant<FaV21, Tile<64, kBlockN>, Tile<128, kBlockN>>(name, description);
}

LADDER_REGISTER_STEP(
    ladder::attention_step(5, "fa_v2_1",
                           "FlashAttention v2.1: both GEMMs on tensor cores (mma.sync + ldmatrix)",
                           "04/br128")
        .add(make_variant<32>("bc32", "Br=128 (4 warps × 32 rows), Bc=32, S/P/O in registers, padded smem"))
        .add(make_variant<64>("bc64", "Br=128 (4 warps × 32 rows), Bc=64, S/P/O in registers, padded smem"))
        .main_is("bc64"));  // the faster on the H200 (docs/05_fa_v2_1.md says why)

}  // namespace
