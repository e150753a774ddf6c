// Step 24 — FlashAttention-2's backward pass on mma.sync (sm_80 and later).
//
// Step 23 writes S, P, dP and dS to global memory: N² of each per head. FlashAttention-2's backward
// never stores any of them. It keeps the forward's log-sum-exp (one float per query row), and from
// it recomputes P exactly, block by block, with no second pass over the row:
//
//   P  = exp(S·scale − lse)            (S = Q Kᵀ; P is already normalized: lse holds the row sum)
//   dP = dO Vᵀ
//   dS = P ∘ (dP − D),  D_i = rowsum(dO_i ∘ O_i) = rowsum(P_i ∘ dP_i)   (the softmax's Jacobian)
//   dV = Pᵀ dO,   dK = scale · dSᵀ Q,   dQ = scale · dS K
//
// Three kernels:
//   1. preprocess: D_i for every row, lse·log2(e), and zeroes the fp32 dQ accumulator;
//   2. the main kernel: one CTA per block of kBlockN keys. dK and dV of its keys stay in registers
//      (fp32 mma accumulators) while it walks over every block of kBlockM queries that sees them;
//      dQ of a query block gets a contribution from every key block, so each CTA adds its
//      share into the fp32 accumulator with atomics;
//   3. convert: dQ from fp32 to the element type, times the scale.
//
// The warps are laid out so that two of the five GEMMs need no shared memory for their A operand.
// Each warp owns 16 keys and computes Sᵀ = K Qᵀ (keys as the M dimension) rather than S: its
// accumulator then holds Pᵀ and dSᵀ with keys as rows, which is exactly the A operand of
// dV += Pᵀ dO and dK += dSᵀ Q (the same C-to-A repacking as the forward's P V). Only dQ = dS K
// needs all of the CTA's keys at once; dSᵀ goes through shared memory for it, and ldmatrix.trans
// turns it back into dS. (FlashAttention-2 computes S with queries as rows and its dK/dV warps own
// other tiles than its S warps, so P and dS both make the trip through shared memory there.)
//
// Variants: `atomic` (float atomics: the order of additions into dQ, and so its last bits, depend
// on timing) and `deterministic` (the same kernel; each query block's dQ is added by the key
// blocks in a fixed order, handed from one to the next by a semaphore; see dq_turn below).
#include <cuda/atomic>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/check.hpp"
#include "common/device/mma_element.cuh"
#include "common/device/mma_fragments.cuh"
#include "common/device/ptx.cuh"
#include "common/device/swizzle.cuh"
#include "common/dispatch.hpp"
#include "common/math.hpp"
#include "common/registry.hpp"
#include "common/strings.hpp"

namespace {

using ladder::AttentionShape;
using ladder::BackwardArgs;
using ladder::ceil_div;
using ladder::kLog2e;
namespace ptx = ladder::ptx;
namespace frag = ladder::frag;
namespace swz = ladder::swizzle;

constexpr int kWarpSize = 32;
constexpr std::size_t kDefaultDynamicSmem = 48 * 1024;  // above this a kernel must opt in
constexpr int kBlockN = 128;     // keys per CTA (Bc); the queries per step (Br) are Tile::kBlockM
// lse·log2(e) and D are padded to whole blocks of kRowPad queries, a multiple of every tile's
// kBlockM; the deterministic kernel's semaphores, one per block of kMinBlockM queries, cover
// every tile's query blocks.
constexpr int kRowPad = 128;
constexpr int kMinBlockM = 64;
constexpr int padded_rows(int n) { return ceil_div(n, kRowPad) * kRowPad; }
constexpr int semaphores_per_head(int n) { return ceil_div(n, kMinBlockM); }
constexpr int kAuxThreads = 256; // preprocess and convert

// ---- The main kernel's tile -------------------------------------------------------------------
// 8 warps × 16 keys. Per thread the loop keeps dK and dV (16 keys × D each: D/2 fp32, 32 or 64
// registers each at D = 64 or 128) plus Sᵀ and dPᵀ of kSubM queries (2 × 16 registers).
template <int kHeadDim_, class Element_, bool kDeterministic_>
struct Tile {
  using Element = Element_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr bool kDeterministic = kDeterministic_;
  // Queries per step of the main loop (Br): 128 at D = 64, as FlashAttention-2 takes there (half
  // the steps, so half the barriers and prefetches per query, and dQ's K read once per 128
  // queries), 64 at D = 128, where dQ's accumulators for 128 queries would not fit.
  static constexpr int kBlockM = kHeadDim_ == 64 ? 128 : 64;
  static constexpr int kWarps = 8;
  static constexpr int kThreads = kWarps * kWarpSize;
  static constexpr int kKeysPerWarp = kBlockN / kWarps;  // one m16 tile of Sᵀ
  // Sᵀ and dPᵀ are computed kSubM queries at a time, sub-blocks of the step, so that they take
  // 2 × 16 fp32 beside dK and dV instead of 2 × 32 for a 64-query step (with a whole 64-query
  // step at once, ptxas spilled at D = 128 and, causal, at D = 64).
  static constexpr int kSubM = 32;
  static constexpr int kQTiles = kSubM / 8;              // n8 tiles of Sᵀ, dPᵀ (queries)
  static constexpr int kQSteps = kSubM / 16;             // k16 steps of dV, dK (queries)
  // Sᵀ = K Qᵀ's k16 loop: unrolled fully at D = 64, by two at D = 128, where fully unrolled ptxas
  // hoists the fragments of every step ahead of their mma and spills.
  static constexpr int kDUnroll = kHeadDim_ == 128 ? 2 : kHeadDim_ / 16;
  static constexpr int kDSteps = kHeadDim / 16;          // k16 steps of Sᵀ, dPᵀ (head dims)
  // The warp's A fragments of K and V (its 16 keys × D) held in registers for the whole loop
  // rather than read from shared memory again for each half of each step: 2 × kDSteps × 4
  // registers, 32 at D = 64, which fit beside dK and dV; the 64 of D = 128 do not.
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

  // Shared memory (element tiles XOR-swizzled): K and V of the CTA (loaded once), Q and dO
  // double-buffered, dSᵀ of one step; then lse·log2(e) and D of the step's queries (fp32, double
  // buffered). 130 KB at D = 64, 145 KB at D = 128.
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
  static_assert(kRowPad % kBlockM == 0 && kBlockM % kMinBlockM == 0);
};

// ---- Workspace ---------------------------------------------------------------------------------
// [B·H][N][D] fp32 dQ accumulator; lse·log2(e) and D per query row, padded to whole query blocks
// (+inf and 0 past N, so the main kernel loads them unchecked and padded rows get P = 0); one
// semaphore per (head, query block) for the deterministic order.
struct WorkspaceLayout {
  std::size_t dq_accum = 0, lse_log2 = 0, delta = 0, sem = 0, total = 0;  // byte offsets
};
WorkspaceLayout workspace_layout(const AttentionShape& s) {
  constexpr std::size_t kAlign = 256;
  const auto aligned = [](std::size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; };
  const std::size_t bh = std::size_t(s.batch) * s.heads;
  const std::size_t rows = padded_rows(s.seqlen);
  WorkspaceLayout l;
  l.lse_log2 = l.dq_accum + aligned(bh * s.seqlen * s.head_dim * sizeof(float));
  l.delta = l.lse_log2 + aligned(bh * rows * sizeof(float));
  l.sem = l.delta + aligned(bh * rows * sizeof(float));
  l.total = l.sem + aligned(bh * semaphores_per_head(s.seqlen) * sizeof(int));
  return l;
}
std::size_t workspace_bytes(const AttentionShape& s) { return workspace_layout(s).total; }

// ---- Kernel 1: D_i = rowsum(dO_i ∘ O_i), lse·log2(e), zeroed accumulators -----------------------
// kHeadDim / 8 consecutive threads share a row, 16 bytes (8 elements) each, and reduce with
// shuffles inside their aligned group of lanes. D comes from O as the forward stored it (rounded
// to the element type), as FlashAttention-2 does.
template <class Element, int kHeadDim>
__global__ void __launch_bounds__(kAuxThreads)
    fa2_bwd_preprocess(const Element* __restrict__ o, const Element* __restrict__ d_o,
                       const float* __restrict__ lse, float* __restrict__ lse_log2,
                       float* __restrict__ delta, float* __restrict__ dq_accum,
                       int* __restrict__ dq_sem, int n) {
  constexpr int kChunks = kHeadDim / 8;
  constexpr int kRows = kAuxThreads / kChunks;
  const int n_pad = padded_rows(n);
  const int sems = semaphores_per_head(n);
  const int bh = blockIdx.y;
  const int row = blockIdx.x * kRows + threadIdx.x / kChunks;
  const int chunk = threadIdx.x % kChunks;

  float sum = 0.f;
  if (row < n) {
    const std::int64_t offset = (std::int64_t(bh) * n + row) * kHeadDim + chunk * 8;
    const uint4 o_chunk = *reinterpret_cast<const uint4*>(o + offset);
    const uint4 do_chunk = *reinterpret_cast<const uint4*>(d_o + offset);
    const Element* oe = reinterpret_cast<const Element*>(&o_chunk);
    const Element* de = reinterpret_cast<const Element*>(&do_chunk);
#pragma unroll
    for (int i = 0; i < 8; ++i)
      sum = fmaf(ptx::element_to_float(oe[i]), ptx::element_to_float(de[i]), sum);
    float4* acc = reinterpret_cast<float4*>(dq_accum + offset);
    acc[0] = acc[1] = make_float4(0.f, 0.f, 0.f, 0.f);
  }
#pragma unroll
  for (int lanes = kChunks / 2; lanes > 0; lanes /= 2)
    sum += __shfl_xor_sync(frag::kFullMask, sum, lanes);
  if (chunk == 0 && row < n_pad) {
    const std::int64_t i = std::int64_t(bh) * n_pad + row;
    delta[i] = sum;  // 0 past N
    lse_log2[i] = row < n ? lse[std::int64_t(bh) * n + row] * kLog2e : INFINITY;
  }
  if (blockIdx.x == 0)
    for (int i = threadIdx.x; i < sems; i += kAuxThreads) dq_sem[std::int64_t(bh) * sems + i] = 0;
}

// ---- Global -> shared: a tile of kRows rows of D elements, 16 bytes per cp.async ----------------
// Rows at or past `rows_left` are zero-filled (no byte read). The zeros carry the ragged end:
// a zero K row makes that key's dS K contribution to dQ exactly 0, and its dK, dV rows are never
// stored; a zero Q or dO row has lse = +inf in the workspace, so its P (and dS) is exactly 0.
template <class T, int kRows>
__device__ __forceinline__ void load_rows(typename T::Element* smem,
                                          const typename T::Element* rows, int rows_left, int tid) {
  constexpr int kD = T::kHeadDim;
  constexpr int kChunks = kD / 8;
  constexpr int kRowsPerPass = T::kThreads / kChunks;
  static_assert(kRows % kRowsPerPass == 0);
  const int chunk = tid % kChunks;
  const int first_row = tid / kChunks;
#pragma unroll
  for (int pass = 0; pass < kRows / kRowsPerPass; ++pass) {
    const int row = first_row + pass * kRowsPerPass;
    const bool valid = row < rows_left;
    ptx::cp_async_16(smem + swz::xor_offset<kD>(row, chunk * 8),
                     valid ? rows + std::int64_t(row) * kD + chunk * 8 : rows, valid ? 16 : 0);
  }
}

// Address of logical element (row, col) of a swizzled tile with rows of kRowHalves elements.
template <int kRowHalves, class Element>
__device__ __forceinline__ const Element* at(const Element* tile, int row, int col) {
  return tile + swz::xor_offset<kRowHalves>(row, col);
}

// Two fp32 added into dQ's accumulator. sm_90 has a vector float atomic (one RED for the pair).
__device__ __forceinline__ void atomic_add2(float* dst, float x, float y) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  atomicAdd(reinterpret_cast<float2*>(dst), make_float2(x, y));
#else
  atomicAdd(dst, x);
  atomicAdd(dst + 1, y);
#endif
}

// threadIdx.x, read again: a value the compiler cannot merge with the kernel's first read (a
// volatile asm is never merged or hoisted out of a loop). The dQ phase recomputes its lane
// offsets from it once per query block instead of keeping them live through the whole loop: a
// few integer instructions per block, against registers that at D = 128 (causal) ptxas could
// only find by spilling. (Step 06's d128_lean does the same with its cp.async offsets.)
__device__ __forceinline__ int reread_tid() {
  int tid;
  asm volatile("mov.u32 %0, %%tid.x;" : "=r"(tid));
  return tid;
}

// ---- Kernel 2: the main loop ------------------------------------------------------------------
// grid (ceil(N / kBlockN), B·H), key block kb = blockIdx.x: causal, the heaviest key blocks (the
// lowest, seen by the most queries) are launched first.
template <class T, bool kCausal>
__global__ void __launch_bounds__(T::kThreads, 1)
    fa2_bwd_kernel(const typename T::Element* __restrict__ q,
                   const typename T::Element* __restrict__ k,
                   const typename T::Element* __restrict__ v,
                   const typename T::Element* __restrict__ d_o, typename T::Element* __restrict__ dk,
                   typename T::Element* __restrict__ dv, const float* __restrict__ lse_log2,
                   const float* __restrict__ delta, float* __restrict__ dq_accum,
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
  const int n_pad = padded_rows(n);
  // Causal: query i sees keys j <= i, so the first query block with a query >= k0 is k0 / kBlockM.
  // The loop walks the query blocks from the last down to that one (as FlashAttention-2 does):
  // then every key block of a head reaches query block m at the same step of its loop, which is
  // what lets the deterministic kernel add dQ in key-block order without waiting (dq_turn).
  const int m_first = kCausal ? k0 / kBlockM : 0;
  const int m_last = m_blocks - 1;
  const std::int64_t head = std::int64_t(bh) * n * kD;
  const float* lse_head = lse_log2 + std::int64_t(bh) * n_pad;
  const float* delta_head = delta + std::int64_t(bh) * n_pad;

  // One query block's Q, dO, lse and D into `stage`. lse and D are padded: no bounds to check.
  auto load_query_block = [&](int m, int stage) {
    const int q0 = m * kBlockM;
    load_rows<T, kBlockM>(s_q + stage * T::kQElems, q + head + std::int64_t(q0) * kD, n - q0, tid);
    load_rows<T, kBlockM>(s_do + stage * T::kQElems, d_o + head + std::int64_t(q0) * kD, n - q0, tid);
    constexpr int kVectorChunks = kBlockM * int(sizeof(float)) / 16;
    if (tid < 2 * kVectorChunks) {
      const bool is_lse = tid < kVectorChunks;
      const int c = tid % kVectorChunks;
      ptx::cp_async_16((is_lse ? s_lse : s_delta) + stage * kBlockM + 4 * c,
                       (is_lse ? lse_head : delta_head) + q0 + 4 * c);
    }
  };

  // Deterministic: pass the turn at query block `mb` to the next key block (dq_turn below).
  [[maybe_unused]] auto pass_turn = [&](int mb) {
    cuda::atomic_ref<int, cuda::thread_scope_device> sem(dq_sem[std::int64_t(bh) * semaphores_per_head(n) + mb]);
    sem.store(kb + 1, cuda::memory_order_release);
  };

  // Prologue: the CTA's K and V (kept for the whole loop) and the first query block of the loop.
  // K and V are one cp.async group and the first query block the next, so that K and V's
  // fragments can be taken into registers while the query block is still in flight.
  load_rows<T, kBlockN>(s_k, k + head + std::int64_t(k0) * kD, n - k0, tid);
  load_rows<T, kBlockN>(s_v, v + head + std::int64_t(k0) * kD, n - k0, tid);
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
#pragma unroll
  for (int nd = 0; nd < T::kDTiles; ++nd)
#pragma unroll
    for (int c = 0; c < 4; ++c) acc_dk[nd][c] = acc_dv[nd][c] = 0.f;

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
      if (tid == 0 && m < m_last) pass_turn(m + 1);
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
#pragma unroll
        for (int ni = 0; ni < T::kQTiles; ++ni)
#pragma unroll
          for (int c = 0; c < 4; ++c) s[ni][c] = dp[ni][c] = 0.f;
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
            std::uint32_t b[4];
            ptx::ldmatrix_x4(b, at<kD>(sq, qs + np * 16 + b_row, kk * 16 + b_col));
            const std::uint32_t bq_lo[2] = {b[0], b[1]}, bq_hi[2] = {b[2], b[3]};
            ptx::mma_m16n8k16<E>(s[2 * np], a_k, bq_lo);
            ptx::mma_m16n8k16<E>(s[2 * np + 1], a_k, bq_hi);
            ptx::ldmatrix_x4(b, at<kD>(sdo, qs + np * 16 + b_row, kk * 16 + b_col));
            const std::uint32_t bo_lo[2] = {b[0], b[1]}, bo_hi[2] = {b[2], b[3]};
            ptx::mma_m16n8k16<E>(dp[2 * np], a_v, bo_lo);
            ptx::mma_m16n8k16<E>(dp[2 * np + 1], a_v, bo_hi);
          }
        }

        // ---- Pᵀ = exp2(Sᵀ·scale·log2e − lse·log2e), dSᵀ = Pᵀ ∘ (dPᵀ − D), in place ----
        // Element (c = 2h + e) of n8 tile ni is key key_w0 + g + 8h, query q0 + qs + 8ni + 2t + e,
        // so a lane needs lse and D of queries 8ni + 2t and + 1: one float2 each. P is final as
        // computed (lse already holds the row's sum): no max, no rescale, no normalization.
        // Masked elements get P = 0 by assignment (rather than S = −inf first), so that an S far
        // above its row's lse, whose exp2 is +inf, never reaches a product. Two masks: causal
        // (key > query) on the diagonal, and keys at or past N in a ragged last key block (their
        // K rows are zeros, so S = 0 and P = exp(−lse), finite for any sane lse, and their dS K
        // adds 0 to dQ; masking makes that hold for any lse, where 0 · inf would be NaN). The
        // causal mask covers those keys already (a key >= N is above every query < N), so each
        // kernel has one mask. Queries past N need none: their lse is +inf, so P = 0.
        const bool diagonal = kCausal && key_w0 + T::kKeysPerWarp - 1 > q0 + qs;
        const bool ragged = !kCausal && key_w0 + T::kKeysPerWarp > n;
        // key − query of element (h, e) of tile ni is key_minus_query + 8h − 8ni − e, and
        // key − N is key_minus_n + 8h: one register per mask (the causal comparison written out
        // in full cost ptxas a spill at D = 128).
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
        // A: Pᵀ and dSᵀ straight from the accumulators, rounded to the element type (the k16 step
        // kk is n8 tiles 2kk and 2kk + 1). B[query][d] = dO[query][d]: a row-major [k][n] tile,
        // ldmatrix.trans with the A map (as V in the forward's P V). The same rounded dSᵀ goes to
        // shared memory for dQ; the swizzle makes these 4-byte stores conflict-free (rows g of
        // one chunk land in 8 different bank groups).
#pragma unroll
        for (int kk = 0; kk < T::kQSteps; ++kk) {
          const std::uint32_t a_p[4] = {
              ptx::pack2_as<E>(s[2 * kk][0], s[2 * kk][1]), ptx::pack2_as<E>(s[2 * kk][2], s[2 * kk][3]),
              ptx::pack2_as<E>(s[2 * kk + 1][0], s[2 * kk + 1][1]),
              ptx::pack2_as<E>(s[2 * kk + 1][2], s[2 * kk + 1][3])};
          const std::uint32_t a_ds[4] = {
              ptx::pack2_as<E>(dp[2 * kk][0], dp[2 * kk][1]), ptx::pack2_as<E>(dp[2 * kk][2], dp[2 * kk][3]),
              ptx::pack2_as<E>(dp[2 * kk + 1][0], dp[2 * kk + 1][1]),
              ptx::pack2_as<E>(dp[2 * kk + 1][2], dp[2 * kk + 1][3])};
          // a_ds[r] holds row g + 8·(r & 1), columns 16kk + 8·(r >> 1) + 2t, + 1.
#pragma unroll
          for (int r = 0; r < 4; ++r)
            *reinterpret_cast<std::uint32_t*>(
                s_ds + swz::xor_offset<kBlockM>(warp_key + g + 8 * (r & 1), qs + kk * 16 + 8 * (r >> 1) + 2 * t)) =
                a_ds[r];
#pragma unroll
          for (int dpair = 0; dpair < T::kDTiles / 2; ++dpair) {  // two n8 tiles of D per ldmatrix
            std::uint32_t b[4];
            ptx::ldmatrix_x4_trans(b, at<kD>(sdo, qs + kk * 16 + a_row, dpair * 16 + a_col));
            const std::uint32_t bo_lo[2] = {b[0], b[1]}, bo_hi[2] = {b[2], b[3]};
            ptx::mma_m16n8k16<E>(acc_dv[2 * dpair], a_p, bo_lo);
            ptx::mma_m16n8k16<E>(acc_dv[2 * dpair + 1], a_p, bo_hi);
            ptx::ldmatrix_x4_trans(b, at<kD>(sq, qs + kk * 16 + a_row, dpair * 16 + a_col));
            const std::uint32_t bq_lo[2] = {b[0], b[1]}, bq_hi[2] = {b[2], b[3]};
            ptx::mma_m16n8k16<E>(acc_dk[2 * dpair], a_ds, bq_lo);
            ptx::mma_m16n8k16<E>(acc_dk[2 * dpair + 1], a_ds, bq_hi);
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
    // A[query][key] = dS = (dSᵀ)ᵀ, stored [key][query]: ldmatrix.trans with the B map's addresses
    // hands each lane A's pairs (lane (g, t) gets rows 2t, 2t + 1 of column g of each 8×8 matrix,
    // and the B map orders the four matrices (k 0-7, m 0-7), (k 0-7, m 8-15), (k 8-15, m 0-7),
    // (k 8-15, m 8-15), which are a0..a3). B[key][d] = K[key][d]: .trans with the A map.
    const int dq_tid = reread_tid();
    const int dq_lane = dq_tid % kWarpSize;
    const int dq_row = (dq_tid / kWarpSize % T::kDqWarpsM) * T::kDqRows;  // the warp's query rows
    const int dq_col = (dq_tid / kWarpSize / T::kDqWarpsM) * T::kDqCols;  // and head dims
    const int ds_row = frag::ldsm_b_row(dq_lane), ds_col = frag::ldsm_b_col(dq_lane);
    const int kt_row = frag::ldsm_a_row(dq_lane), kt_col = frag::ldsm_a_col(dq_lane);
    float acc_dq[T::kDqMTiles][T::kDqTiles][4];
#pragma unroll
    for (int mt = 0; mt < T::kDqMTiles; ++mt)
#pragma unroll
      for (int nd = 0; nd < T::kDqTiles; ++nd)
#pragma unroll
        for (int c = 0; c < 4; ++c) acc_dq[mt][nd][c] = 0.f;
#pragma unroll
    for (int kk = 0; kk < T::kKeySteps; ++kk) {
      std::uint32_t a[T::kDqMTiles][4];
#pragma unroll
      for (int mt = 0; mt < T::kDqMTiles; ++mt)
        ptx::ldmatrix_x4_trans(a[mt], at<kBlockM>(s_ds, kk * 16 + ds_row, dq_row + mt * 16 + ds_col));
#pragma unroll
      for (int np = 0; np < T::kDqTiles / 2; ++np) {
        std::uint32_t b[4];
        ptx::ldmatrix_x4_trans(b, at<kD>(s_k, kk * 16 + kt_row, dq_col + np * 16 + kt_col));
        const std::uint32_t b_lo[2] = {b[0], b[1]}, b_hi[2] = {b[2], b[3]};
#pragma unroll
        for (int mt = 0; mt < T::kDqMTiles; ++mt) {
          ptx::mma_m16n8k16<E>(acc_dq[mt][2 * np], a[mt], b_lo);
          ptx::mma_m16n8k16<E>(acc_dq[mt][2 * np + 1], a[mt], b_hi);
        }
      }
    }

    // ---- dQ += this key block's share: fp32 atomics into the accumulator ----
    // The deterministic kernel takes its turn first. Query block m gets its shares from the key
    // blocks in a fixed order, kb = 0, 1, 2, ..., so every element of dQ is the same sequence of
    // fp32 additions on every run (the atomics are then only a way to add in L2). The order
    // follows the schedule: every key block of a head walks the query blocks from the last down,
    // so all of them reach query block m at the same step of their loops (causal: every key
    // block that sees m, and those are exactly kb = 0 .. the diagonal's), and key block kb runs
    // one dQ phase behind kb − 1 instead of waiting for whole steps. Had the causal loop walked
    // up from its first query block, key block kb would reach m = 2kb when kb − 1 is two steps
    // further on, and the waits would chain along the diagonal.
    // A CTA only ever waits for lower key blocks of its head, launched before it and so running
    // or done: with blocks dispatched in launch order, as the hardware does (FlashAttention-3's
    // deterministic backward relies on it too), the waits cannot deadlock.
    // Thread 0 waits (acquire) and the barrier releases the CTA. The turn is passed on by thread
    // 0's release store (a fence.acq_rel.gpu and a store) after a barrier that every thread
    // reaches after its atomics: the pattern of CUTLASS's semaphores. That barrier is the next
    // step's loop-top one (the last step's turn is released after the loop): the fence waits
    // until the atomics are performed in L2, and with its own barrier after the atomics the
    // whole CTA would wait for it at the loop top; now only warp 0 does, while the other warps
    // start the step. The turn is passed on no later than before.
    [[maybe_unused]] const int dq_turn = kb;
    if constexpr (T::kDeterministic) {
      if (tid == 0) {
        cuda::atomic_ref<int, cuda::thread_scope_device> sem(dq_sem[std::int64_t(bh) * semaphores_per_head(n) + m]);
        while (sem.load(cuda::memory_order_acquire) != dq_turn) {
        }
      }
      __syncthreads();
    }
#pragma unroll
    for (int mt = 0; mt < T::kDqMTiles; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = q0 + dq_row + mt * 16 + g + 8 * h;
        if (row < n) {
          float* dst = dq_accum + head + std::int64_t(row) * kD + dq_col + 2 * t;
#pragma unroll
          for (int nd = 0; nd < T::kDqTiles; ++nd)
            atomic_add2(dst + 8 * nd, acc_dq[mt][nd][2 * h], acc_dq[mt][nd][2 * h + 1]);
        }
      }
  }
  if constexpr (T::kDeterministic) {
    __syncthreads();  // every thread's atomics of the last step before thread 0's release
    if (tid == 0) pass_turn(m_first);
  }

  // ---- Epilogue: dK = scale · dSᵀ Q (the scale once, here), dV as accumulated ----
  // Keys past N (a ragged last block) are never stored.
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int key = key_w0 + g + 8 * h;
    if (key < n) {
      E* dk_row = dk + head + std::int64_t(key) * kD + 2 * t;
      E* dv_row = dv + head + std::int64_t(key) * kD + 2 * t;
#pragma unroll
      for (int nd = 0; nd < T::kDTiles; ++nd) {
        *reinterpret_cast<std::uint32_t*>(dk_row + 8 * nd) = ptx::pack2_as<E>(
            acc_dk[nd][2 * h] * softmax_scale, acc_dk[nd][2 * h + 1] * softmax_scale);
        *reinterpret_cast<std::uint32_t*>(dv_row + 8 * nd) =
            ptx::pack2_as<E>(acc_dv[nd][2 * h], acc_dv[nd][2 * h + 1]);
      }
    }
  }
}

// ---- Kernel 3: dQ = scale · accumulator, in the element type ------------------------------------
template <class Element, int kHeadDim>
__global__ void __launch_bounds__(kAuxThreads)
    fa2_bwd_convert(const float* __restrict__ dq_accum, Element* __restrict__ dq, int n,
                    float softmax_scale) {
  constexpr int kChunks = kHeadDim / 8;
  constexpr int kRows = kAuxThreads / kChunks;
  const int row = blockIdx.x * kRows + threadIdx.x / kChunks;
  if (row >= n) return;
  const std::int64_t offset =
      (std::int64_t(blockIdx.y) * n + row) * kHeadDim + (threadIdx.x % kChunks) * 8;
  const float4 lo = *reinterpret_cast<const float4*>(dq_accum + offset);
  const float4 hi = *reinterpret_cast<const float4*>(dq_accum + offset + 4);
  const float s = softmax_scale;
  *reinterpret_cast<uint4*>(dq + offset) =
      make_uint4(ptx::pack2_as<Element>(lo.x * s, lo.y * s), ptx::pack2_as<Element>(lo.z * s, lo.w * s),
                 ptx::pack2_as<Element>(hi.x * s, hi.y * s), ptx::pack2_as<Element>(hi.z * s, hi.w * s));
}

// ---- Host side --------------------------------------------------------------------------------
template <class T, bool kCausal>
void launch_tile(const BackwardArgs& a, cudaStream_t stream) {
  using E = typename T::Element;
  constexpr int kD = T::kHeadDim;
  constexpr int kAuxRows = kAuxThreads / (kD / 8);
  const auto x = a.as<E>();
  const auto& sh = a.shape;
  const int n = sh.seqlen;
  const int bh = sh.batch * sh.heads;
  if (a.workspace == nullptr)
    throw std::logic_error("fa2_backward: launched without its workspace (with_workspace)");
  const WorkspaceLayout l = workspace_layout(sh);
  auto* base = static_cast<unsigned char*>(a.workspace);
  auto* dq_accum = reinterpret_cast<float*>(base + l.dq_accum);
  auto* lse_log2 = reinterpret_cast<float*>(base + l.lse_log2);
  auto* delta = reinterpret_cast<float*>(base + l.delta);
  auto* dq_sem = reinterpret_cast<int*>(base + l.sem);
  const int n_pad = padded_rows(n);

  fa2_bwd_preprocess<E, kD><<<dim3(ceil_div(n_pad, kAuxRows), bh), kAuxThreads, 0, stream>>>(
      x.o, x.d_o, a.lse, lse_log2, delta, dq_accum, dq_sem, n);
  CUDA_CHECK_LAUNCH("fa2_bwd_preprocess");

  auto* kernel = fa2_bwd_kernel<T, kCausal>;
  if constexpr (T::kSmemBytes > kDefaultDynamicSmem)
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    int(T::kSmemBytes)));
  kernel<<<dim3(ceil_div(n, kBlockN), bh), T::kThreads, T::kSmemBytes, stream>>>(
      x.q, x.k, x.v, x.d_o, x.dk, x.dv, lse_log2, delta, dq_accum, dq_sem, n,
      a.softmax_scale * kLog2e, a.softmax_scale);
  CUDA_CHECK_LAUNCH("fa2_bwd_kernel");

  fa2_bwd_convert<E, kD><<<dim3(ceil_div(n, kAuxRows), bh), kAuxThreads, 0, stream>>>(
      dq_accum, x.dq, n, a.softmax_scale);
  CUDA_CHECK_LAUNCH("fa2_bwd_convert");
}

template <bool kDeterministic>
void launch(const BackwardArgs& a, cudaStream_t stream) {
  ladder::dispatch_head_dim<64, 128>(a.shape.head_dim, [&]<int kHeadDim>() {
    auto by_mask = [&]<class E>() {
      using T = Tile<kHeadDim, E, kDeterministic>;
      a.shape.causal ? launch_tile<T, true>(a, stream) : launch_tile<T, false>(a, stream);
    };
    if (a.shape.dtype == ladder::DType::BF16) by_mask.template operator()<__nv_bfloat16>();
    else by_mask.template operator()<__half>();
  });
}

template <int kHeadDim, bool kDeterministic>
std::vector<ladder::KernelInfo> kernels() {
  std::vector<ladder::KernelInfo> out;
  auto add = [&]<class E>(const char* type) {
    using T = Tile<kHeadDim, E, kDeterministic>;
    const auto main = ladder::strprintf("fa2_bwd_kernel<D=%d,Bc=%d,Br=%d%s%s>", kHeadDim, kBlockN,
                                        T::kBlockM, type, kDeterministic ? ",ordered dQ" : "");
    const std::size_t first = out.size();
    out.push_back(ladder::kernel(ladder::strprintf("fa2_bwd_preprocess<D=%d%s>", kHeadDim, type),
                                 fa2_bwd_preprocess<E, kHeadDim>, kAuxThreads));
    out.push_back(ladder::kernel(main, fa2_bwd_kernel<T, false>, T::kThreads, T::kSmemBytes).when_causal(false));
    out.push_back(ladder::kernel(main + " causal", fa2_bwd_kernel<T, true>, T::kThreads, T::kSmemBytes).when_causal(true));
    out.push_back(ladder::kernel(ladder::strprintf("fa2_bwd_convert<D=%d%s>", kHeadDim, type),
                                 fa2_bwd_convert<E, kHeadDim>, kAuxThreads));
    for (std::size_t i = first; i < out.size(); ++i) out[i].dtype = ladder::dtype_of<E>();
  };
  add.template operator()<__half>("");
  add.template operator()<__nv_bfloat16>(",bf16");
  return out;
}

template <bool kDeterministic>
ladder::Variant make_variant(const char* name, const char* description) {
  return ladder::backward_variant(name, description, launch<kDeterministic>)
      .needs_sm(80)  // cp.async, ldmatrix, mma.sync.m16n8k16 (.bf16 too)
      .for_head_dims({64, 128})
      .for_dtypes({ladder::DType::F16, ladder::DType::BF16})
      .batch_heads_on_grid_yz()  // grid (key blocks, B·H) and (query rows, B·H)
      .with_workspace(workspace_bytes)
      .with_kernels([](int head_dim) {
        return head_dim == 128 ? kernels<128, kDeterministic>() : kernels<64, kDeterministic>();
      });
}

LADDER_REGISTER_STEP(
    ladder::backward_step(24, "fa2_backward", "FlashAttention-2's backward on mma.sync", "23/naive")
        .add(make_variant<false>("atomic", "K/V outer, dK/dV in registers, P from the LSE, dQ by fp32 atomics")
                 .nondeterministic())
        .add(make_variant<true>("deterministic", "atomic + dQ added in a fixed key-block order (a semaphore per query block)")
                 .compared_with("24/atomic"))
        .main_is("atomic"));

}  // namespace
