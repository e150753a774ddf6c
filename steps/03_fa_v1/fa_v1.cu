// Step 03 — FlashAttention-1: K/V blocks outer, Q blocks inner, running state in global memory.
//
// Step 00 wrote the N×N score matrix to global memory. FlashAttention never forms it: S is
// computed one (Q block, K/V block) tile at a time in on-chip memory, and the softmax is made
// exact across tiles by carrying, for every query row, its running maximum m, its running sum l
// and its output O so far. FlashAttention-1 (Dao et al., 2022, Algorithm 1) orders the loops so
// that each K/V block is loaded once:
//
//   O = 0, l = 0, m = −inf                       (global memory, B·H·N rows)
//   for each K/V block j:                         (outer: K_j, V_j -> shared memory, once)
//     for each Q block i that sees block j:       (inner)
//       Q_i -> shared;  O_i, l_i, m_i <- global
//       S = Q_i K_jᵀ · scale;  m̃ = rowmax(S);  P̃ = exp(S − m̃);  l̃ = rowsum(P̃)
//       m_new = max(m_i, m̃);  l_new = e^(m_i − m_new) l_i + e^(m̃ − m_new) l̃
//       O_i = (e^(m_i − m_new) l_i O_i + e^(m̃ − m_new) P̃ V_j) / l_new
//       O_i, l_new, m_new -> global               (fp16 output instead, on block i's last visit)
//
// The price of that order is the running state: every (j, i) visit reads and writes O_i (fp32),
// l_i and m_i in global memory, so O makes ceil(N / Bc) round trips (the ledger under the table
// counts the bytes). And the parallelism is poor. A thread block that loads K_j once must visit
// every Q block with it; giving the Q blocks to several thread blocks would make each of them
// load every K/V block (that is step 04's loop order), and giving them the K/V blocks would make
// several thread blocks update the same O_i (atomics, or a separate reduction). So the grid is
// one thread block per (batch, head): B·H = 32 blocks for the default problem, on a GPU with
// 132 SMs. Step 04 swaps the loops, which fixes both.
//
// Everything inside a tile is what step 04 keeps, and it lives in
// common/device/cuda_core_attention.cuh: 256 threads, register micro-tiles for S = QKᵀ and for
// P V, P through shared memory (S stays in registers), scalar fp32 FFMA (no tensor cores). This
// file holds what is FA1's own: the K/V loader, the online-softmax merge, the running state in
// global memory and the loops. The two variants differ only in Br, the rows of a Q block: 48 (the
// seed's v1) and 64 (its v1.1).
#include <cuda_fp16.h>

#include <cmath>

#include "common/cuda_core_launch.hpp"
#include "common/device/cuda_core_attention.cuh"
#include "common/device/ptx.cuh"
#include "common/math.hpp"
#include "common/registry.hpp"
#include "common/strings.hpp"

namespace {

using ladder::AttentionArgs;
using ladder::ceil_div;
namespace cuda_core = ladder::cuda_core;
using cuda_core::kChunk;
using cuda_core::kLanesPerRow;  // thread (ty, tx) = (tid / 16, tid % 16): see the header
using cuda_core::kRowGroups;
using cuda_core::kThreads;

// ---- Tiles ----------------------------------------------------------------------------------
// The K/V tile is the outer loop's tile: the larger it is, the fewer round trips O makes through
// global memory (Algorithm 1 sizes it from the shared memory available). 64 keys is the largest
// power of two that keeps the block within 99 KB, the per-block limit of most GPUs, at D = 128
// and Br = 64 (84 KB); 128 keys would need 134 KB. See Tile::kSmemBytes.
constexpr int kBlockN = 64;  // keys per K/V tile (Bc)

template <int kHeadDim, int kBlockM>
struct Tile : cuda_core::TileLayout<kHeadDim, kBlockM, kBlockN> {
  using Base = cuda_core::TileLayout<kHeadDim, kBlockM, kBlockN>;
  // Q, P (fp32), then K, V (fp16).
  static constexpr std::size_t kSmemBytes = Base::kQBytes + Base::kPBytes + 2 * Base::kKvBytes;
};

// ---- Loading K_j and V_j --------------------------------------------------------------------
// 16-byte chunks through registers; the threads wait for them (the block has nothing else to do
// yet). Keys past the end of the sequence are zero-filled; their scores are masked.
template <class T>
__device__ __forceinline__ void load_kv_tile(__half* k_tile, __half* v_tile, const __half* k_head,
                                             const __half* v_head, int kv_start, int n) {
  constexpr int kChunksPerRow = T::kHeadDim / kChunk;
  constexpr int kChunksPerThread = kBlockN * kChunksPerRow / kThreads;
  static_assert(kBlockN * kChunksPerRow % kThreads == 0, "every thread copies whole chunks");
#pragma unroll
  for (int t = 0; t < kChunksPerThread; ++t) {
    const int c = int(threadIdx.x) + t * kThreads;
    const int row = c / kChunksPerRow;
    const int col = (c % kChunksPerRow) * kChunk;
    uint4 k_chunk = make_uint4(0, 0, 0, 0), v_chunk = make_uint4(0, 0, 0, 0);
    if (kv_start + row < n) {
      const std::int64_t src = std::int64_t(kv_start + row) * T::kHeadDim + col;
      k_chunk = *reinterpret_cast<const uint4*>(k_head + src);
      v_chunk = *reinterpret_cast<const uint4*>(v_head + src);
    }
    *reinterpret_cast<uint4*>(k_tile + row * T::kKvStride + col) = k_chunk;
    *reinterpret_cast<uint4*>(v_tile + row * T::kKvStride + col) = v_chunk;
  }
}

// ---- Softmax of one tile, merged into the running state -------------------------------------
// The tile's probabilities are taken against the tile's own maximum, P̃ = exp(S − m̃), and then
// merged with the running state read from global memory. FA1 keeps O_i normalized between
// visits (it is written back as it is), so the merge yields two weights per row:
//
//   O_i = old_weight · O_i + new_weight · (P̃ V_j)
//   old_weight = e^(m_i − m_new) l_i / l_new,   new_weight = e^(m̃ − m_new) / l_new
//
// −inf guards: on a diagonal tile a row can have all its keys masked (m̃ = −inf), and on its first
// visit a row has m_i = −inf; −inf − (−inf) is NaN. Each exponent's reference point is clamped to
// 0 for such a row, which makes the matching P̃ or factor exactly 0. A row whose keys in this tile
// are all masked thus gets old_weight = 1 and new_weight = 0: its state passes through unchanged.
template <int kRows, int kCols>
__device__ __forceinline__ void softmax_update(float (&s)[kRows][kCols],
                                               const float (&m_old)[kRows],
                                               const float (&l_old)[kRows], float (&m_new)[kRows],
                                               float (&l_new)[kRows], float (&old_weight)[kRows],
                                               float (&new_weight)[kRows]) {
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    float tile_max = s[i][0];
#pragma unroll
    for (int j = 1; j < kCols; ++j) tile_max = fmaxf(tile_max, s[i][j]);
    tile_max = cuda_core::row_max(tile_max);
    const float tile_ref = tile_max == -INFINITY ? 0.f : tile_max;
    float tile_sum = 0.f;
#pragma unroll
    for (int j = 0; j < kCols; ++j) {
      s[i][j] = ladder::ptx::exp2_approx(s[i][j] - tile_ref);
      tile_sum += s[i][j];
    }
    tile_sum = cuda_core::row_sum(tile_sum);

    m_new[i] = fmaxf(m_old[i], tile_max);
    const float m_ref = m_new[i] == -INFINITY ? 0.f : m_new[i];
    const float kept =
        ladder::ptx::exp2_approx(m_old[i] - m_ref) * l_old[i];  // 0 on the first visit
    const float added =
        ladder::ptx::exp2_approx(tile_max - m_ref);  // 0 if the tile's row is all masked
    l_new[i] = kept + added * tile_sum;
    // Every real row has seen key 0 on its first visit, so l_new > 0; the guard is for safety.
    old_weight[i] = l_new[i] > 0.f ? kept / l_new[i] : 0.f;
    new_weight[i] = l_new[i] > 0.f ? added / l_new[i] : 0.f;
  }
}

// ---- The running state O_i, l_i, m_i, in global memory ----------------------------------------
// The workspace holds O (fp32, [B·H, N, D]), l and m ([B·H, N]). Algorithm 1 initializes them
// before its loops; here each thread block initializes its own head inside the launch, so the
// cost is part of the measured time.
template <int kHeadDim>
__device__ __forceinline__ void init_running_state(float* o_run, float* l_run, float* m_run,
                                                   int n) {
  static_assert(kHeadDim % 4 == 0);
  const std::int64_t count4 = std::int64_t(n) * kHeadDim / 4;
  float4* o4 = reinterpret_cast<float4*>(o_run);
  for (std::int64_t c = threadIdx.x; c < count4; c += kThreads)
    o4[c] = make_float4(0.f, 0.f, 0.f, 0.f);
  for (int r = threadIdx.x; r < n; r += kThreads) {
    l_run[r] = 0.f;
    m_run[r] = -INFINITY;
  }
}

// Thread (ty, tx) reads exactly the elements of O_i it will update (its rows, its kOutCols
// contiguous columns: the 16 lanes of a row group read one contiguous row) and m, l of its rows
// (the 16 lanes read the same word). No other thread reads or writes those O elements, so they
// need no barrier between visits; m and l are written by lane 0 of the row group and read by all
// 16 lanes at the next visit, which is after the next K/V block's __syncthreads. Rows past the
// end of the sequence have no state: they start empty and are never written back.
template <class T>
__device__ __forceinline__ void load_running_state(float (&o_old)[T::kRows][T::kOutCols],
                                                   float (&m_old)[T::kRows],
                                                   float (&l_old)[T::kRows], const float* o_run,
                                                   const float* l_run, const float* m_run,
                                                   int q_start, int n, int ty, int tx) {
#pragma unroll
  for (int i = 0; i < T::kRows; ++i) {
    const int row = q_start + ty + i * kRowGroups;
    m_old[i] = -INFINITY;
    l_old[i] = 0.f;
#pragma unroll
    for (int d = 0; d < T::kOutCols; ++d) o_old[i][d] = 0.f;
    if (row >= n) continue;
    m_old[i] = m_run[row];
    l_old[i] = l_run[row];
    const float4* src =
        reinterpret_cast<const float4*>(o_run + std::int64_t(row) * T::kHeadDim + tx * T::kOutCols);
#pragma unroll
    for (int d4 = 0; d4 < T::kOutCols / 4; ++d4) {
      const float4 x = src[d4];
      o_old[i][4 * d4 + 0] = x.x;
      o_old[i][4 * d4 + 1] = x.y;
      o_old[i][4 * d4 + 2] = x.z;
      o_old[i][4 * d4 + 3] = x.w;
    }
  }
}

template <class T>
__device__ __forceinline__ void store_running_state(float* o_run, float* l_run, float* m_run,
                                                    const float (&o_new)[T::kRows][T::kOutCols],
                                                    const float (&m_new)[T::kRows],
                                                    const float (&l_new)[T::kRows], int q_start,
                                                    int n, int ty, int tx) {
#pragma unroll
  for (int i = 0; i < T::kRows; ++i) {
    const int row = q_start + ty + i * kRowGroups;
    if (row >= n) continue;
    float4* dst =
        reinterpret_cast<float4*>(o_run + std::int64_t(row) * T::kHeadDim + tx * T::kOutCols);
#pragma unroll
    for (int d4 = 0; d4 < T::kOutCols / 4; ++d4)
      dst[d4] = make_float4(o_new[i][4 * d4 + 0], o_new[i][4 * d4 + 1], o_new[i][4 * d4 + 2],
                            o_new[i][4 * d4 + 3]);
    if (tx == 0) {
      m_run[row] = m_new[i];
      l_run[row] = l_new[i];
    }
  }
}

// ---- The kernel -----------------------------------------------------------------------------
template <int kHeadDim, int kBlockM>
__global__ void __launch_bounds__(kThreads)
    fa_v1_kernel(const __half* __restrict__ q, const __half* __restrict__ k,
                 const __half* __restrict__ v, __half* __restrict__ o, float* o_run_all,
                 float* l_run_all, float* m_run_all, int n, float scale_log2, bool causal) {
  using T = Tile<kHeadDim, kBlockM>;
  extern __shared__ __align__(16) unsigned char smem[];
  float* q_tile = reinterpret_cast<float*>(smem);
  float* p_tile = reinterpret_cast<float*>(smem + T::kQBytes);
  __half* k_tile = reinterpret_cast<__half*>(smem + T::kQBytes + T::kPBytes);
  __half* v_tile = k_tile + kBlockN * T::kKvStride;

  const int ty = threadIdx.x / kLanesPerRow;
  const int tx = threadIdx.x % kLanesPerRow;

  // FA1: one thread block per (batch, head), which owns that head's running state.
  const std::int64_t head = std::int64_t(blockIdx.x) * n * kHeadDim;
  const std::int64_t head_rows = std::int64_t(blockIdx.x) * n;
  float* o_run = o_run_all + head;
  float* l_run = l_run_all + head_rows;
  float* m_run = m_run_all + head_rows;
  init_running_state<kHeadDim>(o_run, l_run, m_run, n);

  const int num_kv_blocks = ceil_div(n, kBlockN);
  const int num_q_blocks = ceil_div(n, kBlockM);
  for (int j = 0; j < num_kv_blocks; ++j) {
    const int kv_start = j * kBlockN;
    // Every thread has finished with K_{j−1} and V_{j−1} (before the first tile: every thread has
    // done its share of the initialization, which the barrier makes visible to the whole block).
    __syncthreads();
    load_kv_tile<T>(k_tile, v_tile, k + head, v + head, kv_start, n);

    // Causal: Q block i lies entirely above the diagonal of this K/V block (its last row,
    // q_start + Br − 1, is before the block's first key) exactly when i < floor(j·Bc / Br).
    const int first_q_block = causal ? kv_start / kBlockM : 0;
    for (int i = first_q_block; i < num_q_blocks; ++i) {
      const int q_start = i * kBlockM;
      // Q_i is staged again on every (K/V block, Q block) visit: up to ceil(N / Bc) times.
      cuda_core::load_q_tile<T>(q_tile, q + head, q_start, n, scale_log2);
      float o_old[T::kRows][T::kOutCols], m_old[T::kRows], l_old[T::kRows];
      load_running_state<T>(o_old, m_old, l_old, o_run, l_run, m_run, q_start, n, ty, tx);
      // Q_i (and, on the first visit of this K/V block, K_j and V_j) is visible to every thread,
      // and every thread has finished reading P of the previous visit.
      __syncthreads();

      float s[T::kRows][T::kScoreCols];
      cuda_core::compute_scores<T>(s, q_tile, k_tile, ty, tx);
      // Only a tile that crosses the diagonal (its last key is after this block's first row) or
      // the end of the sequence needs the element mask.
      const bool crosses_diagonal = causal && kv_start + kBlockN - 1 > q_start;
      if (crosses_diagonal || kv_start + kBlockN > n)
        cuda_core::mask_scores(s, q_start + ty, kv_start + tx, n, causal);

      float m_new[T::kRows], l_new[T::kRows], old_weight[T::kRows], new_weight[T::kRows];
      softmax_update(s, m_old, l_old, m_new, l_new, old_weight, new_weight);
      cuda_core::store_probs<T>(p_tile, s, ty, tx);
      __syncthreads();  // all of P is written before any row of it is read

      float acc[T::kRows][T::kOutCols];
      cuda_core::multiply_pv<T>(acc, p_tile, v_tile, ty, tx);
      float o_new[T::kRows][T::kOutCols];
#pragma unroll
      for (int r = 0; r < T::kRows; ++r)
#pragma unroll
        for (int d = 0; d < T::kOutCols; ++d)
          o_new[r][d] = old_weight[r] * o_old[r][d] + new_weight[r] * acc[r][d];

      // With the causal skip, a Q block's last visit is not always the last K/V block: block i
      // sees no key after min(q_start + Br, N) − 1, so the K/V blocks after the one that holds
      // that key skip it. The fp16 output is written on that last visit, from the registers that
      // would otherwise go back to the workspace. Every row of the block is final then (a row
      // whose keys in this tile are all masked passes through unchanged), and each Q block has
      // exactly one last visit, so every output row is written exactly once.
      const int last_kv_block =
          causal ? (min(q_start + kBlockM, n) - 1) / kBlockN : num_kv_blocks - 1;
      if (j == last_kv_block)
        cuda_core::store_output<T>(o + head, o_new, q_start, n, ty, tx);
      else
        store_running_state<T>(o_run, l_run, m_run, o_new, m_new, l_new, q_start, n, ty, tx);
    }
  }
}

// ---- Host side ------------------------------------------------------------------------------
constexpr int kBlockM48 = 48;  // Br of the seed's v1
constexpr int kBlockM64 = 64;  // Br of its v1.1

std::size_t workspace_bytes(const ladder::AttentionShape& s) {
  return std::size_t(s.elements() + 2 * s.rows()) * sizeof(float);
}

// One (D, Br) instantiation, as common/cuda_core_launch.hpp takes it.
template <int kHeadDim, int kBlockM>
struct Fa1 {
  static void launch(const AttentionArgs& a, cudaStream_t stream) {
    const auto& sh = a.shape;
    // The workspace: O (fp32, one per element of the output), then l and m (one per row).
    float* o_run = static_cast<float*>(a.workspace);
    float* l_run = o_run + sh.elements();
    float* m_run = l_run + sh.rows();
    // FA1: one thread block per (batch, head).
    cuda_core::launch_kernel("fa_v1_kernel", fa_v1_kernel<kHeadDim, kBlockM>,
                             sh.batch * sh.heads, Tile<kHeadDim, kBlockM>::kSmemBytes, stream,
                             a.q, a.k, a.v, a.o, o_run, l_run, m_run, sh.seqlen,
                             a.softmax_scale * ladder::kLog2e, sh.causal);
  }
  static ladder::KernelInfo info() {
    return ladder::kernel(ladder::strprintf("fa_v1_kernel<%d, %d>", kHeadDim, kBlockM),
                          fa_v1_kernel<kHeadDim, kBlockM>, kThreads,
                          Tile<kHeadDim, kBlockM>::kSmemBytes);
  }
};

// Bytes through global memory for one Br: the initialization of the running state, K and V once,
// and per (K/V block, Q block) visit Q_i and the state read, the state written back (or, on a Q
// block's last visit, the fp16 output instead).
struct Traffic {
  double bytes = 0;
  double visits = 0;  // (K/V block, Q block) pairs, all heads
};

Traffic traffic(const ladder::AttentionShape& s, int block_m) {
  const int n = s.seqlen;
  const double row_bytes = double(s.head_dim) * sizeof(__half);  // Q, K, V or O
  const double state_bytes = double(s.head_dim) * sizeof(float) + 2 * sizeof(float);  // O, l, m
  const int num_kv = ceil_div(n, kBlockN);
  const int num_q = ceil_div(n, block_m);
  double visited_rows = 0, visits = 0;
  for (int j = 0; j < num_kv; ++j) {
    const int first = s.causal ? j * kBlockN / block_m : 0;
    visits += num_q - first;
    // Rows of Q blocks first .. num_q − 1; only the last block can be ragged.
    visited_rows += double(n) - double(first) * block_m;
  }
  const double per_head = n * state_bytes                             // initialization
                          + 2.0 * n * row_bytes                       // K and V, once
                          + visited_rows * (row_bytes + state_bytes)  // Q_i and the state, read
                          + (visited_rows - n) * state_bytes          // the state, written back
                          + n * row_bytes;                            // the output, once per row
  const double bh = double(s.batch) * s.heads;
  return {per_head * bh, visits * bh};
}

std::vector<std::string> ledger(const ladder::AttentionShape& s) {
  const double state = double(workspace_bytes(s));
  std::vector<std::string> lines = {ladder::strprintf(
      "grid: %d thread blocks, one per (batch, head); running state O (fp32), l, m: %.1f MiB in "
      "global memory, read and written on every (K/V block, Q block) visit",
      s.batch * s.heads, state / (1 << 20))};
  for (int block_m : {kBlockM48, kBlockM64}) {
    const Traffic t = traffic(s, block_m);
    lines.push_back(ladder::strprintf(
        "ledger Br=%d: %.0f visits, %.2f GB through global memory (%.0f× the minimum %.3f GB), "
        "%.1f FLOP/byte",
        block_m, t.visits, t.bytes / 1e9, t.bytes / ladder::min_bytes(s),
        ladder::min_bytes(s) / 1e9, ladder::flops(s) / t.bytes));
  }
  return lines;
}

template <int kBlockM>
ladder::Variant variant(const char* name, const char* description) {
  return ladder::attention_variant(name, description, cuda_core::launch<Fa1, kBlockM>)
      .needs_sm(75)
      .for_head_dims({64, 128})
      .with_workspace(workspace_bytes)
      .with_kernels(cuda_core::kernels<Fa1, kBlockM>);
}

LADDER_REGISTER_STEP(
    ladder::attention_step(3, "fa_v1", "FlashAttention-1: K/V blocks outer, running state in global memory",
                           "00/naive")
        .with_notes(ledger)
        .add(variant<kBlockM48>("br48", "FA1 loop order, Br=48 (the seed's v1), Bc=64, one block "
                                        "per (batch, head)"))
        .add(variant<kBlockM64>("br64", "FA1 loop order, Br=64 (the seed's v1.1), Bc=64, one block "
                                        "per (batch, head)"))
        .main_is("br64"));

}  // namespace
