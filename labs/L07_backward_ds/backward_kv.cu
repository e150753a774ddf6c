// Lab 07 — the softmax's backward on mma.sync fragments. GIVEN (do not edit): the kernel that
// runs YOUR answers in backward_ds.hpp (the accumulator map, P from the LSE, dS, the A packing).
// Run
//   labs/check.sh L07
// The checker runs your answers in a model of one warp's fragments first (no GPU), then this
// kernel against an fp64 reference.
//
// A FlashAttention-2-style backward, cut down to what the lab needs: fp16, D = 64, K/V outer.
// One CTA owns kBlockN = 64 keys (16 per warp) and walks every block of kBlockM = 64 queries that
// can see them; per block, on mma.m16n8k16 (fp16 in, fp32 accumulate):
//   Sᵀ  = K Qᵀ      dPᵀ = V dOᵀ                      (16 keys × 64 queries per warp)
//   Pᵀ  = exp(scale·Sᵀ − lse)    dSᵀ = Pᵀ ∘ (dPᵀ − D)  (yours: softmax_backward_tile)
//   dV += Pᵀ dO     dK += dSᵀ Q                      (yours: pack_a feeds the A operands)
// and at the end dK is scaled once and both are stored. The CTA is the only writer of its keys'
// dK and dV rows: no atomics, deterministic. What it leaves out is dQ = scale·dS K, a sum over
// every key block, so over CTAs: a reduction (step 24's subject), not this lab's. The launch
// therefore writes dK and dV only, and its registration refuses every problem of the harness:
// only the lab's checker calls it (check.cpp).
//
// Why the transposed products: with the keys as rows, Pᵀ and dSᵀ come out of their mma already
// laid out as the A operand of the products this CTA owns (dV and dK are per key). The price is
// that the per-query statistics, the LSE and D, now run along the fragment's columns.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

// <>, not "": the build puts labs/L07_backward_ds/ (your answers) or its solution/ first on the
// include path (labs/CMakeLists.txt), and the checker's model includes the same file.
#include <backward_ds.hpp>

#include "common/check.hpp"
#include "common/device/mma_fragments.cuh"
#include "common/device/ptx.cuh"
#include "common/registry.hpp"
#include "labs/L07_backward_ds/lab07.hpp"

namespace {

using ladder::BackwardArgs;
using ladder::ceil_div;
using namespace lab07;
namespace ptx = ladder::ptx;
namespace frag = ladder::frag;

constexpr int kWarpSize = 32;
constexpr int kThreads = kWarps * kWarpSize;
constexpr int kDSteps = kHeadDim / 16;  // k16 steps of Sᵀ = K Qᵀ (along D)
constexpr int kDTiles = kHeadDim / 8;   // n8 tiles of dV and dK (along D)
// Shared rows padded from 64 to 72 halves (144 bytes): ldmatrix's 8 rows of a phase then start
// in 8 different 16-byte bank groups (step 05's reason).
constexpr int kStride = kHeadDim + 8;
constexpr int kChunksPerRow = kHeadDim / 8;  // 16-byte chunks
// The per-query LSE and D of a block, with room past it: an answer that indexes them by a key
// reads a wrong value (and fails the check), never past the array.
constexpr int kPadded = kBlockM + kKeysPerWarp;

// ---- D_i = rowsum(dO ∘ O): one warp per row (step 23's row_dot_kernel, fp16) ---------------------
constexpr int kDeltaWarps = 8;
__global__ void delta_kernel(const __half* __restrict__ d_o, const __half* __restrict__ o,
                             float* __restrict__ delta, std::int64_t rows) {
  const std::int64_t row = std::int64_t(blockIdx.x) * kDeltaWarps + threadIdx.y;
  if (row >= rows) return;  // a whole warp: the shuffles see full warps
  float acc = 0.f;
  for (int c = threadIdx.x; c < kHeadDim; c += kWarpSize)
    acc += __half2float(d_o[row * kHeadDim + c]) * __half2float(o[row * kHeadDim + c]);
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) acc += __shfl_xor_sync(frag::kFullMask, acc, offset);
  if (threadIdx.x == 0) delta[row] = acc;
}

// ---- Global -> shared: kRows rows of D halves, 16 bytes at a time; rows past the end are zeros --
template <int kRows>
__device__ __forceinline__ void load_tile(__half* smem, const __half* tile, int rows_left, int tid) {
  for (int idx = tid; idx < kRows * kChunksPerRow; idx += kThreads) {
    const int row = idx / kChunksPerRow, chunk = idx % kChunksPerRow;
    uint4 value = make_uint4(0, 0, 0, 0);
    if (row < rows_left) value = *reinterpret_cast<const uint4*>(tile + row * kHeadDim + chunk * 8);
    *reinterpret_cast<uint4*>(smem + row * kStride + chunk * 8) = value;
  }
}

// ---- The kernel -------------------------------------------------------------------------------------
// grid (ceil(N / kBlockN), B·H).
template <bool kCausal>
__global__ void __launch_bounds__(kThreads)
    backward_kv_kernel(const __half* __restrict__ q, const __half* __restrict__ k,
                       const __half* __restrict__ v, const __half* __restrict__ d_o,
                       const float* __restrict__ lse, const float* __restrict__ delta,
                       __half* __restrict__ dk, __half* __restrict__ dv, int n, float scale) {
  __shared__ __align__(16) __half s_k[kBlockN * kStride];
  __shared__ __align__(16) __half s_v[kBlockN * kStride];
  __shared__ __align__(16) __half s_q[kBlockM * kStride];
  __shared__ __align__(16) __half s_do[kBlockM * kStride];
  __shared__ float s_lse[kPadded];
  __shared__ float s_delta[kPadded];

  const int tid = threadIdx.x;
  const int warp = tid / kWarpSize;
  const int lane = tid % kWarpSize;
  const int g = frag::group_of(lane);
  const int t = frag::thread_in_group(lane);

  const int key_start = blockIdx.x * kBlockN;
  const int warp_key0 = key_start + warp * kKeysPerWarp;
  const std::int64_t head_rows = std::int64_t(blockIdx.y) * n;
  const __half* q_head = q + head_rows * kHeadDim;
  const __half* do_head = d_o + head_rows * kHeadDim;

  // The CTA's keys, once: K and V as A operands (rows = keys), kept in registers for the loop.
  load_tile<kBlockN>(s_k, k + (head_rows + key_start) * kHeadDim, n - key_start, tid);
  load_tile<kBlockN>(s_v, v + (head_rows + key_start) * kHeadDim, n - key_start, tid);
  __syncthreads();
  std::uint32_t k_frag[kDSteps][4], v_frag[kDSteps][4];
  const int a_offset = (warp * kKeysPerWarp + frag::ldsm_a_row(lane)) * kStride + frag::ldsm_a_col(lane);
#pragma unroll
  for (int kk = 0; kk < kDSteps; ++kk) {
    ptx::ldmatrix_x4(k_frag[kk], s_k + a_offset + kk * 16);
    ptx::ldmatrix_x4(v_frag[kk], s_v + a_offset + kk * 16);
  }

  float acc_dv[kDTiles][4], acc_dk[kDTiles][4];
#pragma unroll
  for (int nd = 0; nd < kDTiles; ++nd)
#pragma unroll
    for (int c = 0; c < 4; ++c) acc_dv[nd][c] = acc_dk[nd][c] = 0.f;

  // This lane's ldmatrix addresses in Q and dO. As B of Sᵀ = K Qᵀ, B[d][query] = Q[query][d]: Q is
  // row-major [n][k], K's map in the forward (no transpose). As B of dV += Pᵀ dO, B[query][d] =
  // dO[query][d] is row-major [k][n]: ldmatrix.trans with the A map, V's in the forward.
  const int b_offset = frag::ldsm_b_row(lane) * kStride + frag::ldsm_b_col(lane);
  const int bt_offset = frag::ldsm_a_row(lane) * kStride + frag::ldsm_a_col(lane);

  // A causal query sees keys up to itself: query blocks before the CTA's first key see none.
  const int m_begin = kCausal ? key_start / kBlockM : 0;
  const int m_blocks = ceil_div(n, kBlockM);
  for (int mb = m_begin; mb < m_blocks; ++mb) {
    const int q_start = mb * kBlockM;
    __syncthreads();  // every warp is done with the previous block's Q, dO, LSE and D
    load_tile<kBlockM>(s_q, q_head + std::int64_t(q_start) * kHeadDim, n - q_start, tid);
    load_tile<kBlockM>(s_do, do_head + std::int64_t(q_start) * kHeadDim, n - q_start, tid);
    for (int i = tid; i < kPadded; i += kThreads) {
      const bool valid = i < kBlockM && q_start + i < n;
      s_lse[i] = valid ? lse[head_rows + q_start + i] : 0.f;
      s_delta[i] = valid ? delta[head_rows + q_start + i] : 0.f;
    }
    __syncthreads();

    // Sᵀ = K Qᵀ and dPᵀ = V dOᵀ, two n8 tiles of queries per ldmatrix.x4.
    float s[kQueryTiles][4], dp[kQueryTiles][4];
#pragma unroll
    for (int nt = 0; nt < kQueryTiles; ++nt)
#pragma unroll
      for (int c = 0; c < 4; ++c) s[nt][c] = dp[nt][c] = 0.f;
#pragma unroll
    for (int kk = 0; kk < kDSteps; ++kk)
#pragma unroll
      for (int np = 0; np < kQueryTiles / 2; ++np) {
        std::uint32_t b[4];
        ptx::ldmatrix_x4(b, s_q + b_offset + np * 16 * kStride + kk * 16);
        const std::uint32_t bq_lo[2] = {b[0], b[1]}, bq_hi[2] = {b[2], b[3]};
        ptx::mma_m16n8k16_f32(s[2 * np], k_frag[kk], bq_lo);
        ptx::mma_m16n8k16_f32(s[2 * np + 1], k_frag[kk], bq_hi);
        ptx::ldmatrix_x4(b, s_do + b_offset + np * 16 * kStride + kk * 16);
        const std::uint32_t bo_lo[2] = {b[0], b[1]}, bo_hi[2] = {b[2], b[3]};
        ptx::mma_m16n8k16_f32(dp[2 * np], v_frag[kk], bo_lo);
        ptx::mma_m16n8k16_f32(dp[2 * np + 1], v_frag[kk], bo_hi);
      }

    // The mask, with the PTX layout (not yours): key g + 8·(c / 2), query 8·nt + 2t + c % 2. A key
    // past N, a query past N (its zero row would give P = exp(0 − 0) = 1) and, causal, a query
    // before its key get s = −inf, so that P = 0 there.
#pragma unroll
    for (int nt = 0; nt < kQueryTiles; ++nt)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int key = warp_key0 + g + 8 * (c / 2);
        const int query = q_start + 8 * nt + 2 * t + c % 2;
        if (key >= n || query >= n || (kCausal && query < key)) s[nt][c] = -INFINITY;
      }

    // YOURS: Pᵀ and dSᵀ in place.
#pragma unroll
    for (int nt = 0; nt < kQueryTiles; ++nt)
      bwd::softmax_backward_tile(s[nt], dp[nt], s_lse, s_delta, lane, nt, scale);

    // dV += Pᵀ dO and dK += dSᵀ Q: the block's queries are the k dimension, 16 per step; YOURS:
    // pack_a turns accumulator tiles 2kk and 2kk + 1 into the A operand of step kk.
#pragma unroll
    for (int kk = 0; kk < kQuerySteps; ++kk) {
      std::uint32_t a_p[4], a_ds[4];
      bwd::pack_a(a_p, s[2 * kk], s[2 * kk + 1]);
      bwd::pack_a(a_ds, dp[2 * kk], dp[2 * kk + 1]);
#pragma unroll
      for (int dpair = 0; dpair < kDTiles / 2; ++dpair) {
        std::uint32_t b[4];
        ptx::ldmatrix_x4_trans(b, s_do + bt_offset + kk * 16 * kStride + dpair * 16);
        const std::uint32_t bo_lo[2] = {b[0], b[1]}, bo_hi[2] = {b[2], b[3]};
        ptx::mma_m16n8k16_f32(acc_dv[2 * dpair], a_p, bo_lo);
        ptx::mma_m16n8k16_f32(acc_dv[2 * dpair + 1], a_p, bo_hi);
        ptx::ldmatrix_x4_trans(b, s_q + bt_offset + kk * 16 * kStride + dpair * 16);
        const std::uint32_t bq_lo[2] = {b[0], b[1]}, bq_hi[2] = {b[2], b[3]};
        ptx::mma_m16n8k16_f32(acc_dk[2 * dpair], a_ds, bq_lo);
        ptx::mma_m16n8k16_f32(acc_dk[2 * dpair + 1], a_ds, bq_hi);
      }
    }
  }

  // Epilogue: dK = scale · dSᵀ Q (S was the unscaled Q Kᵀ), straight from the accumulators, two
  // adjacent head dims per store; keys past N are not stored.
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int key = warp_key0 + g + 8 * h;
    if (key >= n) continue;
    __half* dk_row = dk + (head_rows + key) * kHeadDim + 2 * t;
    __half* dv_row = dv + (head_rows + key) * kHeadDim + 2 * t;
#pragma unroll
    for (int nd = 0; nd < kDTiles; ++nd) {
      *reinterpret_cast<__half2*>(dk_row + nd * 8) =
          __floats2half2_rn(scale * acc_dk[nd][2 * h], scale * acc_dk[nd][2 * h + 1]);
      *reinterpret_cast<__half2*>(dv_row + nd * 8) = __floats2half2_rn(acc_dv[nd][2 * h], acc_dv[nd][2 * h + 1]);
    }
  }
}

// ---- Host side --------------------------------------------------------------------------------------
// Workspace: D, [B, H, N] fp32. dq is not written (the header says why).
void launch(const BackwardArgs& a, cudaStream_t stream) {
  const auto& sh = a.shape;
  auto* delta = static_cast<float*>(a.workspace);
  delta_kernel<<<unsigned(ceil_div(sh.rows(), std::int64_t(kDeltaWarps))), dim3(kWarpSize, kDeltaWarps), 0, stream>>>(
      a.d_o, a.o, delta, sh.rows());
  CUDA_CHECK_LAUNCH("delta_kernel");
  const dim3 grid(ceil_div(sh.seqlen, kBlockN), sh.batch * sh.heads);
  auto* kernel = sh.causal ? backward_kv_kernel<true> : backward_kv_kernel<false>;
  kernel<<<grid, kThreads, 0, stream>>>(a.q, a.k, a.v, a.d_o, a.lse, delta, a.dk, a.dv, sh.seqlen, a.softmax_scale);
  CUDA_CHECK_LAUNCH("backward_kv_kernel");
}

LADDER_REGISTER_STEP(
    ladder::backward_step(kStep, "lab_backward_ds", "Lab 07: the softmax's backward on mma.sync fragments", "23/naive")
        .add(ladder::backward_variant("kv_outer", "K/V-outer FA2-style backward, D=64 fp16, dK and dV only", launch)
                 .needs_sm(80)  // ldmatrix, mma.sync.m16n8k16
                 .for_head_dims({kHeadDim})
                 .batch_heads_on_grid_yz()
                 .with_workspace([](const ladder::AttentionShape& s) { return std::size_t(s.rows()) * sizeof(float); })
                 .refuse_if([](const ladder::AttentionShape&) -> std::optional<std::string> {
                   return "a lab kernel: it writes dK and dV only, not dQ (labs/check.sh L07 checks it)";
                 })
                 .with_kernels({
                     ladder::kernel("delta_kernel", delta_kernel, kWarpSize * kDeltaWarps),
                     ladder::kernel("backward_kv_kernel", backward_kv_kernel<false>, kThreads).when_causal(false),
                     ladder::kernel("backward_kv_kernel causal", backward_kv_kernel<true>, kThreads).when_causal(true),
                 })));

}  // namespace
