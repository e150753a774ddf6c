// The skeleton of a persistent Hopper forward kernel (step 20 on): the producer warpgroup's tile
// loop and the consumers' TMA-store epilogue, the same in every persistent step. What a step
// writes itself is its Tile, its consumer loop (the lesson) and its registration.
//
// Usage, inside the kernel (st, scheduler, the tensor maps and the consumer's ids as in step 20):
//
//   if (warpgroup == 0) {
//     hopper::setmaxnreg_dec<T::kProducerRegisters>();
//     if (tid == 0) hopper::produce_tiles<T, kCausal>(st, scheduler, &tm_q, &tm_k, &tm_v, hopper::DenseRows{n});
//     return;
//   }
//   ... consumers: for each tile w, sp = hopper::span_of<T, kCausal>(w, n); the K/V blocks; then
//   hopper::store_o_tile<T>(st, &tm_o, acc_o, row_sum, consumer, local_row0, t, store_thread, sp.q_start, w.bh);
//
// Where a tile's rows live is the addressing policy given to the producer: DenseRows (K/V head =
// the tile's head), GroupedRows (GQA: K/V head = head / group), VarlenRows (a packed batch: the
// sequence's first token from cu_seqlens, K/V head = head / group). The consumers of a varlen
// step ask the same policy for the same rows.
#pragma once

#include <cstdint>

#include "common/device/hopper/arch.cuh"
#include "common/device/hopper/attention.cuh"
#include "common/device/hopper/barriers.cuh"
#include "common/device/hopper/mbarrier.cuh"
#include "common/device/hopper/pipeline.cuh"
#include "common/device/hopper/tile_scheduler.cuh"
#include "common/device/hopper/tma.cuh"
#include "common/device/hopper/varlen_scheduler.cuh"
#include "common/math.hpp"

namespace ladder::hopper {

inline constexpr int kWarpgroupThreads = 128;

// A tile's query rows and its K/V blocks, processed from the last block to the first. `n` is the
// tile's key count (the sequence's, for a packed batch); rows are the sequence's own.
struct Span {
  int q_start;   // first query row
  int n_blocks;  // K/V blocks to visit
  int n_masked;  // of which the first n_masked (in processing order) may need a mask
};
template <class T, bool kCausal, class Work>
__device__ __forceinline__ Span span_of(const Work& w, int n) {
  Span s;
  s.q_start = w.m_block * T::kBlockM;
  const int kv_end = kCausal ? min(n, s.q_start + T::kBlockM) : n;
  s.n_blocks = ceil_div(kv_end, T::kBlockN);
  // Blocks [0, n_full) need no mask (they end before N and, causal, before the tile's first row).
  const int n_full = kCausal ? min(n / T::kBlockN, s.q_start / T::kBlockN) : n / T::kBlockN;
  s.n_masked = s.n_blocks - n_full;
  return s;
}

// ---- Addressing policies: where a work tile's rows live ----------------------------------------
// A policy maps a work tile to the coordinates of the tensor maps, rows_of(w): a row (the first
// row of the tile's sequence in Q/O and in K/V) and Q/O's head, and the keys its queries see;
// and rows_of.kv_head(w), K and V's head, asked for apart, once the span is known: the division of
// GQA's head then follows the span's arithmetic, the order the GQA and varlen kernels were tuned
// in (ptxas's schedule follows the order it is given, and so does their SASS).
struct TileRows {
  int q_row;   // Q and O: the tile's query row r is q_row + r
  int kv_row;  // K and V: key j is row kv_row + j
  int q_head;  // Q and O's head coordinate
  int n;       // keys
};

// [B·H][N][D]: every head its own K and V.
struct DenseRows {
  int n;
  __device__ __forceinline__ TileRows operator()(const WorkTile& w) const { return {0, 0, w.bh, n}; }
  __device__ __forceinline__ int kv_head(const WorkTile& w) const { return w.bh; }
};

// GQA, K and V [B·Hkv][N][D]: the tile's head is b·Hq + h, and (b·Hq + h) / G = b·Hkv + h / G, so
// the batch comes along with the division.
struct GroupedRows {
  int n;
  int group;  // G = Hq / Hkv
  __device__ __forceinline__ TileRows operator()(const WorkTile& w) const { return {0, 0, w.bh, n}; }
  __device__ __forceinline__ int kv_head(const WorkTile& w) const { return w.bh / group; }
};

// A packed batch (Q, O [total_q, H, D]; K, V [total_k, Hkv, D]; tensor maps by token and head):
// sequence b is rows cu_q[b] .. cu_q[b + 1] - 1, its keys cu_k[b] .. cu_k[b + 1] - 1. Keys past
// n (the next sequence's) are masked like a ragged end; n_q bounds the rows a store may write.
struct SequenceRows : TileRows {
  int n_q;  // the sequence's queries
};
struct VarlenRows {
  const int* cu_q;
  const int* cu_k;
  int group;  // G = Hq / Hkv
  __device__ __forceinline__ SequenceRows operator()(const VarlenTile& w) const {
    const int q0 = cu_q[w.b];
    const int k0 = cu_k[w.b];
    return {{q0, k0, w.head, cu_k[w.b + 1] - k0}, cu_q[w.b + 1] - q0};
  }
  __device__ __forceinline__ int kv_head(const VarlenTile& w) const { return w.head / group; }
};

// ---- The round of GEMM turns (a step templated on its number of consumer warpgroups) -----------
// With two consumers the round is the ping-pong, and both functions are written as the
// two-consumer kernels write them (c ^ 1, c == 0), so those kernels' code stays what it was.
// The consumer after c: c + 1, and 0 after the last.
template <int kConsumers>
__device__ __forceinline__ int next_consumer(int c) {
  if constexpr (kConsumers == 2) return c ^ 1;
  else return (c + 1) % kConsumers;
}
// Whether c passes the turn after its tile's last GEMM when no tile follows: every consumer but
// the last, whose pass would go to consumer 0, which has no turn left to take.
template <int kConsumers>
__device__ __forceinline__ bool passes_final_turn(int c) {
  if constexpr (kConsumers == 2) return c == 0;
  else return c != kConsumers - 1;
}

#if LADDER_SM90A
// ---- The producer ------------------------------------------------------------------------------
// One thread of the producer warpgroup: every tile of the CTA's sequence from its own copy of the
// scheduler, its K/V blocks into the ring (last block first, the consumers' order) and its Q.
// The ring position `it` and the tile count `local` run for the CTA's whole life: the consumers
// count the same blocks in the same order, so both sides agree on every stage and its phase.
template <class T, bool kCausal, class Scheduler, class Rows>
__device__ __forceinline__ void produce_tiles(typename T::Storage& st, Scheduler& scheduler,
                                              const CUtensorMap* tm_q, const CUtensorMap* tm_k,
                                              const CUtensorMap* tm_v, const Rows& rows_of) {
  int it = 0;     // ring position: the CTA's it-th K/V block
  int local = 0;  // the CTA's tile count: the phase of q_full and q_empty
  for (auto w = scheduler.producer_first(); w.valid; w = scheduler.producer_next(), ++local) {
    const auto rows = rows_of(w);
    const Span sp = span_of<T, kCausal>(w, rows.n);
    const int kv_head = rows_of.kv_head(w);
    auto load_kv = [&](int i) {
      load_kv_block(st, it++, tm_k, tm_v, rows.kv_row + (sp.n_blocks - 1 - i) * T::kBlockN, kv_head);
    };
    // The tile's first blocks go into the ring as soon as the previous tile frees stages,
    // before Q, whose buffer frees only after the previous tile's epilogue: the loads of the
    // next tile overlap the end of this one.
    const int ahead = min(T::kStages, sp.n_blocks);
    int i = 0;
    for (; i < ahead; ++i) load_kv(i);
    // Q's buffer is free once every consumer warpgroup has stored the previous tile from it: the
    // consumers complete q_empty's phase local - 1 then. Waiting on parity (local - 1) & 1, an
    // empty barrier's convention (mbarrier.cuh), makes the first tile's wait return at once.
    mbarrier_wait(&st.q_empty, (local & 1) ^ 1);
    scheduler.publish();
    mbarrier_arrive_expect_tx(&st.q_full, T::Storage::kQBytes);
    tma_load_tile(st.q, tm_q, &st.q_full, rows.q_row + sp.q_start, rows.q_head);
    scheduler.prefetch_next();
    for (; i < sp.n_blocks; ++i) load_kv(i);
  }
  // A dynamic schedule tells its consumers there is no next tile (one more q_full phase); a
  // static one does nothing.
  scheduler.producer_done(local);
}

// ---- The epilogue ------------------------------------------------------------------------------
// One consumer warpgroup's O for its 64 rows of the tile: O / l into the warpgroup's own 64 rows of
// the Q buffer (its last S product, the only reader of those rows, has completed), in the
// swizzled layout a TMA store reads, fenced into the async proxy; once the warpgroup's writes are
// all done (its epilogue barrier), one thread stores them with the copy engine, one copy per
// 64-column block at row q_start + consumer · 64 (of the tile's sequence: + row_base) and `head`
// of tm_o, and releases the Q buffer as soon as the engine has read them (the copies to global
// memory may still be in flight: tma_store_wait_all before the thread exits). The engine clips
// rows past the tensor's end, so a ragged tile of a dense layout needs no mask.
//
// kRagged (a packed batch): a warpgroup whose 64 rows cross the sequence's end (n_q) cannot use
// the box, which would write the next sequence's rows; `store_rows(acc_o)` writes its rows below
// n_q from registers instead, and the warpgroup still meets on the barrier before the Q buffer is
// released, since its other threads' S products read it.
//
// kOpaqueStaging (the 160-register consumers of three-consumer steps): ptxas would compute this
// thread's 16 staging addresses once, before the tile loop, and keep them live (64-bit each)
// through the main loop: at 160 registers a consumer, spilled. Opaque copies of the base and the
// row, made here, keep their computation here.
template <class T, bool kOpaqueStaging, bool kRagged, class StoreRows>
__device__ __forceinline__ void store_o_tile_impl(typename T::Storage& st, const CUtensorMap* tm_o,
                                                  float (&acc_o)[T::kHeadDim / 2], const float (&row_sum)[2],
                                                  int consumer, int local_row0, int t, bool store_thread,
                                                  int row_base, int q_start, int head, int n_q,
                                                  StoreRows&& store_rows) {
  using Element = typename T::Element;
  finalize_rows<T::kHeadDim>(acc_o, row_sum);
  bool whole_box = true;
  if constexpr (kRagged) whole_box = q_start + consumer * 64 + 64 <= n_q;
  if (whole_box) {
    Element* o_stage = st.q;
    int o_row = local_row0;
    if constexpr (kOpaqueStaging) asm volatile("" : "+l"(o_stage), "+r"(o_row));
    stage_o_rows<T::kHeadDim, T::kBlockM>(acc_o, o_stage, o_row, t);
    fence_proxy_async_smem();
  } else {
    store_rows(acc_o);
  }
  named_barrier_sync<kWarpgroupThreads>(epilogue_barrier(consumer));
  if (store_thread) {
    if (whole_box) {
#pragma unroll
      for (int cb = 0; cb < T::kHeadDim / 64; ++cb)
        tma_store_tile(tm_o, st.q + cb * T::kBlockM * 64 + consumer * 64 * 64, row_base + (q_start + consumer * 64),
                       cb, head);
      tma_store_commit();
      tma_store_wait_read();  // the engine has read the rows: the buffer is free
    }
    mbarrier_arrive(&st.q_empty);
  }
}

// A dense layout: every row through the copy engine.
template <class T, bool kOpaqueStaging = false>
__device__ __forceinline__ void store_o_tile(typename T::Storage& st, const CUtensorMap* tm_o,
                                             float (&acc_o)[T::kHeadDim / 2], const float (&row_sum)[2],
                                             int consumer, int local_row0, int t, bool store_thread,
                                             int q_start, int head) {
  store_o_tile_impl<T, kOpaqueStaging, false>(st, tm_o, acc_o, row_sum, consumer, local_row0, t, store_thread, 0,
                                              q_start, head, 0, [](const float(&)[T::kHeadDim / 2]) {});
}

// A packed batch: the sequence starts at row_base of tm_o and has n_q rows; store_rows(acc_o)
// writes a warpgroup's rows that cross its end.
template <class T, bool kOpaqueStaging = false, class StoreRows>
__device__ __forceinline__ void store_o_tile_ragged(typename T::Storage& st, const CUtensorMap* tm_o,
                                                    float (&acc_o)[T::kHeadDim / 2], const float (&row_sum)[2],
                                                    int consumer, int local_row0, int t, bool store_thread,
                                                    int row_base, int q_start, int head, int n_q,
                                                    StoreRows&& store_rows) {
  store_o_tile_impl<T, kOpaqueStaging, true>(st, tm_o, acc_o, row_sum, consumer, local_row0, t, store_thread,
                                             row_base, q_start, head, n_q, store_rows);
}
#endif  // LADDER_SM90A

}  // namespace ladder::hopper
