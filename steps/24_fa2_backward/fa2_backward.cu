// Step 24 — FlashAttention-2's backward pass on mma.sync (sm_80 and later).
//
// Step 23 writes S, P, dP and dS to global memory, N² of each per head; FlashAttention-2's backward
// stores none of them. From the forward's log-sum-exp (one float per query row) it recomputes P
// exactly, block by block, with no second pass over the row:
//
//   P  = exp(S·scale − lse)            (S = Q Kᵀ; P is already normalized: lse holds the row sum)
//   dP = dO Vᵀ
//   dS = P ∘ (dP − D),  D_i = rowsum(dO_i ∘ O_i) = rowsum(P_i ∘ dP_i)   (the softmax's Jacobian)
//   dV = Pᵀ dO,   dK = scale · dSᵀ Q,   dQ = scale · dS K
//
// A preprocess (D_i of every row, lse·log2(e), the fp32 dQ accumulator zeroed) and a convert (dQ =
// scale · accumulator, in the element type), step 25's too (common/device/backward_prep.cuh), run
// around this file's kernel: one CTA per block of kBlockN keys, whose dK and dV stay in registers
// (fp32 accumulators) while it walks every block of kBlockM queries that sees them. dQ of a query
// block gets a share from every key block: each CTA adds its own into the accumulator atomically.
//
// Each warp owns 16 keys and computes Sᵀ = K Qᵀ (keys as the M dimension) rather than S: its
// accumulator then holds Pᵀ and dSᵀ with keys as rows, exactly the A operand of dV += Pᵀ dO and
// dK += dSᵀ Q (the forward's C-to-A repacking of P V), so two of the five GEMMs take A from no
// shared memory. Only dQ = dS K needs all of the CTA's keys at once: dSᵀ goes through shared memory,
// and ldmatrix.trans turns it back into dS. (FlashAttention-2 sends both P and dS through it.)
//
// Variants: `atomic` (float atomics: the order of dQ's additions, and so its last bits, depend on
// timing) and `deterministic` (the same kernel; key blocks add a query block's dQ in a fixed order,
// handed on by a semaphore; see dq_turn below).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/device/backward_mma.cuh"
#include "common/device/backward_prep.cuh"
#include "common/device/mma_fragments.cuh"
#include "common/device/ptx.cuh"
#include "common/device/swizzle.cuh"
#include "common/math.hpp"
#include "common/registry.hpp"
#include "common/strings.hpp"

namespace {

using ladder::BackwardArgs;
using ladder::ceil_div;
using ladder::kLog2e;
using ladder::mma_sync::at;
namespace ptx = ladder::ptx;
namespace frag = ladder::frag;
namespace swz = ladder::swizzle;
namespace bwd = ladder::bwd;
namespace mma = ladder::mma_sync;
// The workspace (backward_prep.cuh): dQ's fp32 accumulator, [B·H][N][D] like dQ; lse·log2(e) and D
// padded to kRowPad rows with +inf and 0 (read unchecked: P = 0 there); a semaphore per kMinBlockM queries.
using DqLayout = bwd::DqRowMajor;
template <int kHeadDim>
using RowDot = bwd::RowDot<kHeadDim / 8, false>;  // D_i: D/8 lanes a row, 16 bytes each

constexpr int kWarpSize = 32;
constexpr int kBlockN = 128;     // keys per CTA (Bc); the queries per step (Br) are Tile::kBlockM
constexpr int kMinBlockM = 64;  // divides every tile's kBlockM: the semaphores cover its blocks
constexpr int semaphores_per_head(int n) { return ceil_div(n, kMinBlockM); }

// ---- The main kernel's tile -------------------------------------------------------------------
// 8 warps × 16 keys. Per thread the loop keeps dK and dV (16 keys × D each: D/2 fp32, 32 or 64
// registers each at D = 64 or 128) plus Sᵀ and dPᵀ of kSubM queries (2 × 16 registers).
template <int kHeadDim_, class Element_, bool kDeterministic_>
struct Tile {
  using Element = Element_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr bool kDeterministic = kDeterministic_;
  // Queries per step (Br): 128 at D = 64, as FlashAttention-2 (half the barriers and prefetches per
  // query, dQ's K read once per 128 queries); 64 at D = 128, where 128 queries' dQ would not fit.
  static constexpr int kBlockM = kHeadDim_ == 64 ? 128 : 64;
  static constexpr int kWarps = 8;
  static constexpr int kThreads = kWarps * kWarpSize;
  static constexpr int kKeysPerWarp = kBlockN / kWarps;  // one m16 tile of Sᵀ
  // Sᵀ and dPᵀ are computed kSubM queries at a time: 2 × 16 fp32 beside dK and dV, not 2 × 32 for
  // 64 queries (with those, ptxas spilled at D = 128 and, causal, at D = 64).
  static constexpr int kSubM = 32;
  static constexpr int kQTiles = kSubM / 8;              // n8 tiles of Sᵀ, dPᵀ (queries)
  static constexpr int kQSteps = kSubM / 16;             // k16 steps of dV, dK (queries)
  // Sᵀ = K Qᵀ's k16 loop: unrolled fully at D = 64, by two at D = 128, where fully unrolled ptxas
  // hoists the fragments of every step ahead of their mma and spills.
  static constexpr int kDUnroll = kHeadDim_ == 128 ? 2 : kHeadDim_ / 16;
  static constexpr int kDSteps = kHeadDim / 16;          // k16 steps of Sᵀ, dPᵀ (head dims)
  // The warp's A fragments of K and V (16 keys × D) in registers for the whole loop, not re-read
  // from shared memory every sub-block: 2 × kDSteps × 4 registers: D = 64's 32 fit, D = 128's 64 do not.
  static constexpr bool kKVInRegisters = kHeadDim_ == 64;
  static constexpr int kKVFragSteps = kKVInRegisters ? kDSteps : 1;
  static constexpr int kDTiles = kHeadDim / 8;           // n8 tiles of dK, dV
  // dQ = dS K for the step's [kBlockM × D]: kDqWarpsM warps along queries (kDqMTiles m16 tiles
  // each) × the rest along D. At D = 64, 8 × 1 (16 × 64 each); at D = 128, 2 × 4 (32 × 32),
  // where a warp then reads 8 KB of dS and 8 KB of K per step rather than 4 and 16 with 4 × 2.
  static constexpr int kDqWarpsM = kHeadDim_ == 64 ? 8 : 2;
  static constexpr int kDqMTiles = kBlockM / 16 / kDqWarpsM;
  static constexpr int kDqRows = kDqMTiles * 16;
  static constexpr int kDqCols = kHeadDim / (kWarps / kDqWarpsM);
  static constexpr int kDqTiles = kDqCols / 8;
  static constexpr int kKeySteps = kBlockN / 16;         // k16 steps of dQ (keys)

  // Shared memory: K and V of the CTA (loaded once), Q and dO (double-buffered), one step's dSᵀ,
  // all XOR-swizzled; lse·log2(e) and D of a step (fp32, double-buffered). 130 KB at D = 64, 145 at 128.
  static constexpr int kStages = 2;
  static constexpr int kKVElems = kBlockN * kHeadDim;
  static constexpr int kQElems = kBlockM * kHeadDim;
  static constexpr int kDsElems = kBlockN * kBlockM;
  static constexpr std::size_t kSmemBytes =
      sizeof(Element) * (2 * kKVElems + 2 * kStages * kQElems + kDsElems) +
      sizeof(float) * 2 * kStages * kBlockM;

  static_assert(kKeysPerWarp == 16 && kWarps % kDqWarpsM == 0 && kDqTiles % 2 == 0);
  static_assert(kDqMTiles >= 1 && kDqWarpsM * kDqRows == kBlockM);
  static_assert(kBlockN % kBlockM == 0, "a causal CTA's first query block is k0 / kBlockM");
  static_assert(bwd::kRowPad % kBlockM == 0 && kBlockM % kMinBlockM == 0);
};

// ---- Kernel 2: the main loop ------------------------------------------------------------------
// grid (ceil(N / kBlockN), B·H), key block kb = blockIdx.x: causal, the heaviest key blocks (the
// lowest, seen by the most queries) are launched first.
template <class T, bool kCausal>
__global__ void __launch_bounds__(T::kThreads, 1)
    fa2_bwd_kernel(const typename T::Element* __restrict__ q, const typename T::Element* __restrict__ k,
                   const typename T::Element* __restrict__ v, const typename T::Element* __restrict__ d_o,
                   typename T::Element* __restrict__ dk, typename T::Element* __restrict__ dv,
                   const float* __restrict__ lse_log2, const float* __restrict__ delta, float* __restrict__ dq_accum,
                   int* __restrict__ dq_sem, int n, float scale_log2, float softmax_scale) {
  using E = typename T::Element;
  constexpr int kD = T::kHeadDim;
  constexpr int kBlockM = T::kBlockM;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  E* s_k = reinterpret_cast<E*>(smem_raw);                       // [kBlockN][D]
  E* s_v = s_k + T::kKVElems;                                    // [kBlockN][D]
  E* s_q = s_v + T::kKVElems;                                    // [kStages][kBlockM][D]
  E* s_do = s_q + T::kStages * T::kQElems;                       // [kStages][kBlockM][D]
  E* s_ds = s_do + T::kStages * T::kQElems;                      // [kBlockN][kBlockM]: dSᵀ
  float* s_lse = reinterpret_cast<float*>(s_ds + T::kDsElems);   // [kStages][kBlockM]
  float* s_delta = s_lse + T::kStages * kBlockM;                 // [kStages][kBlockM]

  const int tid = threadIdx.x;
  const int warp = tid / kWarpSize;
  const int lane = tid % kWarpSize;
  const int g = frag::group_of(lane);
  const int t = frag::thread_in_group(lane);
  const int kb = blockIdx.x;
  const int bh = blockIdx.y;
  const int k0 = kb * kBlockN;
  const int m_blocks = ceil_div(n, kBlockM);
  const int n_pad = bwd::padded_rows(n);
  // Causal: query i sees keys j <= i, so the first query block with a query >= k0 is k0 / kBlockM.
  // The loop walks from the last query block down to that one, as FlashAttention-2 does: every key
  // block of a head then reaches query block m at the same step, the order dq_turn builds on.
  const int m_first = kCausal ? k0 / kBlockM : 0;
  const int m_last = m_blocks - 1;
  const std::int64_t head = std::int64_t(bh) * n * kD;
  const float* lse_head = lse_log2 + std::int64_t(bh) * n_pad;
  const float* delta_head = delta + std::int64_t(bh) * n_pad;

  // One query block's Q, dO, lse and D into `stage`. lse and D are padded: no bounds to check.
  auto load_query_block = [&](int m, int stage) {
    const int q0 = m * kBlockM;
    mma::load_rows<T, kBlockM>(s_q + stage * T::kQElems, q + head + std::int64_t(q0) * kD, n - q0, tid);
    mma::load_rows<T, kBlockM>(s_do + stage * T::kQElems, d_o + head + std::int64_t(q0) * kD, n - q0, tid);
    mma::load_floats2<kBlockM>(s_lse, s_delta, stage * kBlockM, lse_head, delta_head, q0, tid);
  };

  // Deterministic: the semaphore of query block `mb` (bwd::wait_turn, bwd::pass_turn; dq_turn below).
  [[maybe_unused]] auto sem_of = [&](int mb) { return dq_sem + std::int64_t(bh) * semaphores_per_head(n) + mb; };

  // Prologue: the CTA's K and V (kept for the whole loop) as one cp.async group, the loop's first
  // query block as the next, so that K and V's fragments go into registers while it is in flight.
  mma::load_rows<T, kBlockN>(s_k, k + head + std::int64_t(k0) * kD, n - k0, tid);
  mma::load_rows<T, kBlockN>(s_v, v + head + std::int64_t(k0) * kD, n - k0, tid);
  ptx::cp_async_commit();
  load_query_block(m_last, 0);
  ptx::cp_async_commit();

  // This lane's ldmatrix offsets (mma_fragments.cuh): the A map, and the B map.
  const int a_row = frag::ldsm_a_row(lane), a_col = frag::ldsm_a_col(lane);
  const int b_row = frag::ldsm_b_row(lane), b_col = frag::ldsm_b_col(lane);
  const int warp_key = warp * T::kKeysPerWarp;        // the warp's first key in the CTA's block
  const int key_w0 = k0 + warp_key;                   // ... in the sequence

  // kKVInRegisters: the warp's K and V fragments, once (only this warp reads its rows of s_k and
  // s_v here, but the rows were written by every thread's cp.async: a CTA-wide barrier).
  std::uint32_t kv_frag[T::kKVFragSteps][2][4];
  if constexpr (T::kKVInRegisters) {
    ptx::cp_async_wait<1>();
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < T::kDSteps; ++kk) {
      ptx::ldmatrix_x4(kv_frag[kk][0], at<kD>(s_k, warp_key + a_row, kk * 16 + a_col));
      ptx::ldmatrix_x4(kv_frag[kk][1], at<kD>(s_v, warp_key + a_row, kk * 16 + a_col));
    }
  }

  float acc_dk[T::kDTiles][4], acc_dv[T::kDTiles][4];
  mma::fill_zero(acc_dk);
  mma::fill_zero(acc_dv);

  for (int m = m_last; m >= m_first; --m) {
    const int stage = (m_last - m) & 1;
    const int q0 = m * kBlockM;
    // The step's tiles have landed, and every warp is done with the other stage and with s_ds
    // (the previous step's dQ): prefetch the next block (m − 1) there while this one is computed.
    ptx::cp_async_wait<0>();
    __syncthreads();
    // Deterministic: the turn at the previous step's query block (m + 1) is passed on here, after
    // the barrier that every thread reached after its atomics (see dq_turn below).
    if constexpr (T::kDeterministic)
      if (tid == 0 && m < m_last) bwd::pass_turn(sem_of(m + 1), kb + 1);
    if (m > m_first) {
      load_query_block(m - 1, stage ^ 1);
      ptx::cp_async_commit();
    }
    const E* sq = s_q + stage * T::kQElems;
    const E* sdo = s_do + stage * T::kQElems;
    const float* slse = s_lse + stage * kBlockM;
    const float* sdelta = s_delta + stage * kBlockM;

    // The step's queries kSubM at a time, sub-block qs .. qs + kSubM − 1 of the step. Not
    // unrolled: overlapping two sub-blocks would bring back the registers the split saves.
#pragma unroll 1
    for (int qs = 0; qs < kBlockM; qs += T::kSubM) {
      // Causal: a warp whose first key is past the sub-block's last query has P = 0 everywhere;
      // it only owes the dQ GEMM its rows of dSᵀ, which are zero.
      const bool warp_idle = kCausal && key_w0 > q0 + qs + T::kSubM - 1;
      if (!warp_idle) {
        // ---- Sᵀ = K Qᵀ and dPᵀ = V dOᵀ: [16 keys × kSubM queries] each, k = D ----
        // A: the warp's 16 rows of K (V), row-major: the A map. B[d][query] = Q[query][d]: Q is a
        // row-major [n][k] tile, the B map without transpose (as K in the forward's Q Kᵀ).
        float s[T::kQTiles][4], dp[T::kQTiles][4];
        mma::fill_zero(s);
        mma::fill_zero(dp);
#pragma unroll(T::kDUnroll)
        for (int kk = 0; kk < T::kDSteps; ++kk) {
          std::uint32_t a_k[4], a_v[4];
          if constexpr (T::kKVInRegisters) {
#pragma unroll
            for (int r = 0; r < 4; ++r) a_k[r] = kv_frag[kk][0][r], a_v[r] = kv_frag[kk][1][r];
          } else {
            ptx::ldmatrix_x4(a_k, at<kD>(s_k, warp_key + a_row, kk * 16 + a_col));
            ptx::ldmatrix_x4(a_v, at<kD>(s_v, warp_key + a_row, kk * 16 + a_col));
          }
#pragma unroll
          for (int np = 0; np < T::kQTiles / 2; ++np) {  // two n8 tiles of queries per ldmatrix.x4
            mma::mma_two_tiles<E, false>(s[2 * np], s[2 * np + 1], a_k, at<kD>(sq, qs + np * 16 + b_row, kk * 16 + b_col));
            mma::mma_two_tiles<E, false>(dp[2 * np], dp[2 * np + 1], a_v, at<kD>(sdo, qs + np * 16 + b_row, kk * 16 + b_col));
          }
        }

        // ---- Pᵀ = exp2(Sᵀ·scale·log2e − lse·log2e), dSᵀ = Pᵀ ∘ (dPᵀ − D), in place ----
        // Element (c = 2h + e) of n8 tile ni is key key_w0 + g + 8h, query q0 + qs + 8ni + 2t + e,
        // so a lane needs lse and D of queries 8ni + 2t and + 1: one float2 each. P is final as
        // computed (lse already holds the row's sum): no max, no rescale, no normalization.
        // Masked elements get P = 0 by assignment (not S = −inf first): an S far above its row's
        // lse, whose exp2 is +inf, never reaches a product. One mask per kernel: causal (key >
        // query), or else keys at or past N in a ragged last key block (zero K rows: P = exp(−lse),
        // and masking keeps 0 · inf = NaN out of dS K for any lse; causal, such a key is above
        // every query < N already). Queries past N need none: their lse is +inf, so P = 0.
        const bool diagonal = kCausal && key_w0 + T::kKeysPerWarp - 1 > q0 + qs;
        const bool ragged = !kCausal && key_w0 + T::kKeysPerWarp > n;
        // key − query of element (h, e) of tile ni is key_minus_query + 8h − 8ni − e, key − N is
        // key_minus_n + 8h: one register per mask (written out in full, a spill at D = 128).
        const int key_minus_query = key_w0 + g - (q0 + qs + 2 * t);
        const int key_minus_n = key_w0 + g - n;
#pragma unroll
        for (int ni = 0; ni < T::kQTiles; ++ni) {
          const float2 l2 = *reinterpret_cast<const float2*>(slse + qs + 8 * ni + 2 * t);
          const float2 d2 = *reinterpret_cast<const float2*>(sdelta + qs + 8 * ni + 2 * t);
#pragma unroll
          for (int h = 0; h < 2; ++h)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const int c = 2 * h + e;
              float p = ptx::exp2_approx(fmaf(s[ni][c], scale_log2, -(e ? l2.y : l2.x)));
              if (diagonal && key_minus_query + 8 * h - 8 * ni - e > 0) p = 0.f;
              if (ragged && key_minus_n + 8 * h >= 0) p = 0.f;
              s[ni][c] = p;
              dp[ni][c] = p * (dp[ni][c] - (e ? d2.y : d2.x));
            }
        }

        // ---- dV += Pᵀ dO, dK += dSᵀ Q: [16 keys × D], k = the step's queries ----
        // A: Pᵀ and dSᵀ straight from the accumulators, rounded to the element type (k16 step kk is
        // n8 tiles 2kk and 2kk + 1). B[query][d] = dO[query][d]: a row-major [k][n] tile, ldmatrix.trans
        // with the A map (as V in the forward's P V). The same rounded dSᵀ goes to shared memory for
        // dQ, in 4-byte stores the swizzle keeps conflict-free (rows g of a chunk: 8 bank groups).
#pragma unroll
        for (int kk = 0; kk < T::kQSteps; ++kk) {
          std::uint32_t a_p[4], a_ds[4];
          mma::c_to_a<E>(s[2 * kk], s[2 * kk + 1], a_p);
          mma::c_to_a<E>(dp[2 * kk], dp[2 * kk + 1], a_ds);
          // a_ds[r] holds row g + 8·(r & 1), columns 16kk + 8·(r >> 1) + 2t, + 1.
#pragma unroll
          for (int r = 0; r < 4; ++r)
            *reinterpret_cast<std::uint32_t*>(
                s_ds + swz::xor_offset<kBlockM>(warp_key + g + 8 * (r & 1), qs + kk * 16 + 8 * (r >> 1) + 2 * t)) =
                a_ds[r];
#pragma unroll
          for (int dpair = 0; dpair < T::kDTiles / 2; ++dpair) {  // two n8 tiles of D per ldmatrix
            mma::mma_two_tiles<E, true>(acc_dv[2 * dpair], acc_dv[2 * dpair + 1], a_p,
                                        at<kD>(sdo, qs + kk * 16 + a_row, dpair * 16 + a_col));
            mma::mma_two_tiles<E, true>(acc_dk[2 * dpair], acc_dk[2 * dpair + 1], a_ds,
                                        at<kD>(sq, qs + kk * 16 + a_row, dpair * 16 + a_col));
          }
        }
      } else {
#pragma unroll
        for (int kk = 0; kk < T::kQSteps; ++kk)
#pragma unroll
          for (int r = 0; r < 4; ++r)
            *reinterpret_cast<std::uint32_t*>(
                s_ds + swz::xor_offset<kBlockM>(warp_key + g + 8 * (r & 1), qs + kk * 16 + 8 * (r >> 1) + 2 * t)) = 0u;
      }
    }
    __syncthreads();  // all of dSᵀ is in s_ds

    // ---- dQ(step) = dS K: [kBlockM × D] over the CTA's kBlockN keys, this warp's kDqRows × kDqCols ----
    // A[query][key] = dS = (dSᵀ)ᵀ, read from the stored dSᵀ with ldmatrix.trans (mma_a_transposed).
    // The warp's offsets come from a re-read threadIdx.x once per step rather than live through the
    // loop: a few integer instructions, against registers ptxas could only find by spilling (D = 128).
    const int dq_tid = ptx::reread_tid();
    const int dq_lane = dq_tid % kWarpSize;
    const int dq_row = (dq_tid / kWarpSize % T::kDqWarpsM) * T::kDqRows;  // the warp's query rows
    const int dq_col = (dq_tid / kWarpSize / T::kDqWarpsM) * T::kDqCols;  // and head dims
    float acc_dq[T::kDqMTiles][T::kDqTiles][4];
    mma::fill_zero(acc_dq);
    mma::mma_a_transposed<E, T::kKeySteps, kBlockM, kD>(acc_dq, s_ds, dq_row, s_k, dq_col, dq_lane);

    // ---- dQ += this key block's share: fp32 atomics into the accumulator ----
    // The deterministic kernel takes its turn first: query block m gets its shares from key blocks
    // kb = 0, 1, 2, ... in that order, so every element of dQ is the same sequence of fp32 additions
    // on every run (the atomics only add in L2). All of a head's key blocks walk the query blocks
    // from the last down, so they reach block m at the same step (causal: exactly kb = 0 .. the
    // diagonal's see m), kb one dQ phase behind kb − 1 (walking up, the waits would chain along the
    // diagonal). A CTA waits only for lower key blocks of its head, launched before it: with blocks
    // dispatched in launch order, as the hardware does (FlashAttention-3 relies on it too), no
    // deadlock. Thread 0 waits, the barrier releases the CTA; the turn is passed on after the next
    // step's loop-top barrier, which every thread reaches after its atomics (the last step's: after
    // the loop), so that only warp 0 waits for the release's fence (atomics performed in L2).
    [[maybe_unused]] const int dq_turn = kb;
    if constexpr (T::kDeterministic) {
      if (tid == 0) bwd::wait_turn(sem_of(m), dq_turn);
      __syncthreads();
    }
    mma::atomic_add_c<kD>(acc_dq, dq_accum + head + dq_col, q0 + dq_row, n, g, t);  // rows past N skipped
  }
  if constexpr (T::kDeterministic) {
    __syncthreads();  // every thread's atomics of the last step before thread 0's release
    if (tid == 0) bwd::pass_turn(sem_of(m_first), kb + 1);
  }

  // ---- Epilogue: dK = scale · dSᵀ Q (the scale once, here), dV as accumulated ----
  // Keys past N (a ragged last block) are never stored.
  mma::store_c_rows2<kD>(acc_dk, dk + head, softmax_scale, acc_dv, dv + head, key_w0, n, g, t);
}

// ---- Host side --------------------------------------------------------------------------------
template <bool kDeterministic>
void launch(const BackwardArgs& a, cudaStream_t stream) {
  bwd::dispatch(a, [&]<class E, int kD, bool kCausal>() {
    using T = Tile<kD, E, kDeterministic>;
    const auto x = a.as<E>();
    const int n = a.shape.seqlen;
    bwd::run<RowDot<kD>, DqLayout, E, kD>(a, stream, semaphores_per_head(n), [&](const bwd::Workspace& ws) {
      const dim3 grid(ceil_div(n, kBlockN), a.shape.batch * a.shape.heads);
      bwd::launch_main<T>(fa2_bwd_kernel<T, kCausal>, "fa2_bwd_kernel", grid, stream, x.q, x.k, x.v, x.d_o, x.dk,
                          x.dv, ws.lse_log2, ws.delta, ws.dq_accum, ws.dq_sem, n, a.softmax_scale * kLog2e,
                          a.softmax_scale);
    });
  });
}

template <bool kDeterministic>
ladder::Variant make_variant(const char* name, const char* description) {
  auto rows = [=]<class E, int kD>(std::vector<ladder::KernelInfo>& out, const char* type) {
    using T = Tile<kD, E, kDeterministic>;
    const auto main = ladder::strprintf("fa2_bwd_kernel<D=%d,Bc=%d,Br=%d%s%s>", kD, kBlockN, T::kBlockM, type,
                                        kDeterministic ? ",ordered dQ" : "");
    bwd::add_kernel_rows<RowDot<kD>, DqLayout, T>(out, type, main, fa2_bwd_kernel<T, false>, fa2_bwd_kernel<T, true>);
  };
  return bwd::variant<DqLayout>(name, description, launch<kDeterministic>, semaphores_per_head, rows)
      .needs_sm(80)               // cp.async, ldmatrix, mma.sync.m16n8k16 (.bf16 too)
      .batch_heads_on_grid_yz();  // grid (key blocks, B·H)
}

LADDER_REGISTER_STEP(
    ladder::backward_step(24, "fa2_backward", "FlashAttention-2's backward on mma.sync", "23/naive")
        .add(make_variant<false>("atomic", "K/V outer, dK/dV in registers, P from the LSE, dQ by fp32 atomics")
                 .nondeterministic())
        .add(make_variant<true>("deterministic", "atomic + dQ added in a fixed key-block order (a semaphore per query block)")
                 .compared_with("24/atomic"))
        .main_is("atomic"));

}  // namespace
