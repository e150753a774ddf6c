// Tile schedulers for a persistent grid (FlashAttention-3's shape: first work, next work).
//
// A persistent kernel launches about one CTA per SM, and each CTA walks a list of work tiles:
// (head, 128- or 192-row query block) pairs, n_tiles = B·H · ceil(N / kBlockM) of them. A grid
// dimension limits nothing here (the grid is at most the SM count), so B·H may exceed 65,535;
// the host checks that the list's length fits an int (make_tile_list).
//
// The scheduler decides which CTA gets which tile, in which order. Its interface, used by the
// producer warpgroup (which loads the tile's Q and K/V) and by the consumer warpgroups (which
// compute it) — each role holds its own scheduler object and asks it for the same sequence:
//
//   Scheduler sched(params, &q_full, &q_empty)   each role, after the barriers are initialised
//   producer  for (w = sched.producer_first(); w.valid; w = sched.producer_next()):
//               ... sched.publish() just before its q_full arrival, sched.prefetch_next() just
//               after the Q copy; after the loop sched.producer_done(tiles)
//   consumer  for (w = sched.consumer_first(); w.valid; w = sched.consumer_next()):
//               sched.wait_q() before the first use of Q; sched.may_have_next() for the
//               ping-pong's last turn, and kKnowsLast (false: the last tile is not known in time)
// (FlashAttention-3's get_initial_work / get_next_work / prefetch_next_work, with the producer's
// broadcast of a dynamic tile riding on q_full instead of two more named barriers.)
//
// Four schedulers:
//   RowWalk  static: CTA c takes tiles c, c + G, c + 2G, ... (G CTAs). Without a mask the tiles
//            are numbered head-major (the CTAs that run together share a few heads' K and V in
//            L2); with the causal mask heaviest query block first, so the short tiles fill the end
//   Snake    static, causal: the same list walked right to left in every other row, so that the
//            CTA which took the heaviest tile of one row takes the lightest of the next
//   GroupWalk static, no mask, GQA (step 26): the row walk over a list numbered K/V-head-major
//            with the Q heads of a group innermost, so the heads that read one K/V block run
//            side by side (with the causal mask Snake's order already is: the head is innermost)
//   Dynamic  causal: each CTA's producer takes its next tile from an atomic counter when it has
//            loaded the current one's Q (longest-processing-time-first: who is free first gets
//            the heaviest tile left), over a list ordered heaviest-first within windows of heads
//            whose K and V fit half the L2; it hands the tile to its consumers through q_full.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "common/check.hpp"
#include "common/device/hopper/arch.cuh"
#if LADDER_SM90A  // the host side (and the CPU test of the orders) compiles without device code
#include "common/device/hopper/mbarrier.cuh"
#endif

namespace ladder::hopper {

struct WorkTile {
  int bh;       // batch · H + head
  int m_block;  // query block: rows [m_block · kBlockM, (m_block + 1) · kBlockM)
  bool valid;   // false: no tile left for this CTA
};

// The problem's tiles: bh_count heads of m_blocks query blocks each.
struct TileList {
  int bh_count;
  int m_blocks;
  int n_tiles;    // bh_count · m_blocks
  int group = 1;  // GQA: consecutive heads that share one K/V head (GroupWalk's order)
};

inline TileList make_tile_list(std::int64_t bh_count, std::int64_t seqlen, int block_m) {
  const std::int64_t m_blocks = (seqlen + block_m - 1) / block_m;
  const std::int64_t n_tiles = bh_count * m_blocks;  // 64-bit: B·H·N / kBlockM may pass 2^31
  if (bh_count < 1 || m_blocks < 1 || n_tiles > INT_MAX)
    throw std::invalid_argument("a persistent kernel's tile list holds up to 2^31 - 1 tiles; " +
                                std::to_string(bh_count) + " heads of " + std::to_string(m_blocks) +
                                " query blocks are " + std::to_string(n_tiles));
  return {int(bh_count), int(m_blocks), int(n_tiles)};
}

// What a scheduler's host side needs to size the grid and set up its parameters.
struct ScheduleArgs {
  TileList list;
  int sm_count;            // AttentionArgs::sm_count
  std::size_t l2_bytes;    // AttentionArgs::l2_bytes
  std::size_t kv_head_bytes;  // one head's K and V
  void* workspace;         // workspace_bytes() bytes
  cudaStream_t stream;
};

// One CTA per SM, or one per tile if there are fewer tiles.
inline int persistent_grid(const ScheduleArgs& a) {
  if (a.sm_count < 1) throw std::logic_error("a persistent grid needs the SM count (AttentionArgs::sm_count)");
  return std::min(a.list.n_tiles, a.sm_count);
}

// ---- Static schedules ----------------------------------------------------------------------------
// The CTA's r-th tile is a function of r: producer and consumers compute it each on their own,
// and the handoff hooks do nothing. Row r of the list is tiles [rG, rG + G), one per CTA; a tile
// index becomes (head, query block) head-major without a mask, heaviest query block first with it.
template <bool kCausal, bool kSnakeRows, bool kGroupInner = false>
struct StaticSchedule {
  struct Params {
    TileList list;
  };
  static constexpr bool kKnowsLast = true;
  static std::size_t workspace_bytes() { return 0; }
  static int grid_size(const ScheduleArgs& a) { return persistent_grid(a); }
  static Params make_params(const ScheduleArgs& a) { return {a.list}; }

  // CTA `cta` of `grid`'s r-th tile index, and what a tile index stands for (host and device:
  // tests/cpu/test_tile_scheduler.cpp walks them).
  __host__ __device__ __forceinline__ static int tile_index(int r, int cta, int grid) {
    return (kSnakeRows && (r & 1)) ? r * grid + (grid - 1 - cta) : r * grid + cta;
  }
  __host__ __device__ __forceinline__ static WorkTile decode(const TileList& list, int tile) {
    if constexpr (kCausal) {
      return {tile % list.bh_count, list.m_blocks - 1 - tile / list.bh_count, tile < list.n_tiles};
    } else if constexpr (kGroupInner) {
      // (K/V head, query block, head within the group), the last fastest.
      const int per_kv_head = list.m_blocks * list.group;
      const int j = tile % per_kv_head;
      return {tile / per_kv_head * list.group + j % list.group, j / list.group, tile < list.n_tiles};
    } else
      return {tile / list.m_blocks, tile % list.m_blocks, tile < list.n_tiles};
  }

#if LADDER_SM90A
  __device__ __forceinline__ StaticSchedule(const Params& p, std::uint64_t* q_full, std::uint64_t*)
      : list_(p.list), q_full_(q_full) {}

  __device__ __forceinline__ WorkTile producer_first() { return work(index(r_ = 0)); }
  __device__ __forceinline__ WorkTile producer_next() { return work(index(++r_)); }
  __device__ __forceinline__ void publish() const {}
  __device__ __forceinline__ void prefetch_next() const {}
  __device__ __forceinline__ void producer_done(int) const {}

  __device__ __forceinline__ WorkTile consumer_first() { return work(index(r_ = 0)); }
  __device__ __forceinline__ WorkTile consumer_next() { return work(index(++r_)); }
  // The r-th tile's Q is the r-th phase of q_full.
  __device__ __forceinline__ void wait_q() const { mbarrier_wait(q_full_, r_ & 1); }
  // Whether a tile follows the current one (the last ping-pong turn is not passed if not).
  __device__ __forceinline__ bool may_have_next() const { return index(r_ + 1) < list_.n_tiles; }

 private:
  __device__ __forceinline__ int index(int r) const { return tile_index(r, int(blockIdx.x), int(gridDim.x)); }
  __device__ __forceinline__ WorkTile work(int tile) const { return decode(list_, tile); }
  TileList list_;
  std::uint64_t* q_full_;
  int r_ = 0;  // the current tile is the CTA's r-th
#endif  // LADDER_SM90A
};

// Tiles c, c + G, c + 2G, ...: each row of the list left to right. With the causal mask CTA 0
// takes the heaviest tile of every row and finishes last.
template <bool kCausal>
struct RowWalk : StaticSchedule<kCausal, false> {
  using StaticSchedule<kCausal, false>::StaticSchedule;
};

// Causal only (without a mask every tile weighs the same: use RowWalk): rows walked alternately
// left to right and right to left, so each CTA gets the heavy end of one row and the light end of
// the next.
struct Snake : StaticSchedule<true, true> {
  using StaticSchedule<true, true>::StaticSchedule;
};

// No mask, GQA: the group's heads innermost (TileList::group), so a row of the list holds the
// group's heads for the same query blocks and the CTAs that read one K/V head run together.
struct GroupWalk : StaticSchedule<false, false, true> {
  using StaticSchedule<false, false, true>::StaticSchedule;
};

// ---- The dynamic schedule (causal) ----------------------------------------------------------------
// The producer fetches the CTA's next tile from a counter in global memory (workspace word 0) as
// soon as it has issued the current tile's Q copy, so the atomic's round trip hides under the K/V
// loads. Its first tile is blockIdx.x (the counter hands out G, G + 1, ...).
//
// The handoff: the producer writes the decoded tile (head, query block) into the CTA's slot of
// the workspace before its q_full arrival, and the consumers read it after waiting for that
// phase: the arrive releases the stores, the wait acquires them, wherever the slot lives. It
// lives in global memory, not shared, because compute-sanitizer's racecheck does not model that
// ordering for ordinary shared-memory accesses and reports every handoff as a race. The producer
// rewrites the slot only after q_empty says every consumer is done with the tile, so no consumer
// reads a newer value than its own. After the last tile one more q_full phase, with no copy,
// carries "stop" (head -1).
//
// The counter must be 0 at every launch: the host clears it (a 4-byte memset on the launch's
// stream, inside the timed interval). A self-resetting counter (the CTA whose fetch is the
// launch's last resets it) would save the memset, but it relies on the workspace being 0 before
// the first launch and after any launch that died midway, which the harness does not promise.
struct Dynamic {
  static constexpr int kMaxCtas = 1024;  // workspace slots (one CTA per SM: 132 on an H200)
  struct Params {
    TileList list;
    int heads_per_window;
    int* counter;  // workspace word 0; the CTAs' slots (int2) start at word 2
  };
  static constexpr bool kKnowsLast = false;
  static std::size_t workspace_bytes() { return 2 * sizeof(int) + kMaxCtas * sizeof(int2); }
  static int grid_size(const ScheduleArgs& a) {
    const int grid = persistent_grid(a);
    if (grid > kMaxCtas) throw std::logic_error("the dynamic scheduler has " + std::to_string(kMaxCtas) +
                                                " slots, fewer than the grid's " + std::to_string(grid) + " CTAs");
    return grid;
  }
  static Params make_params(const ScheduleArgs& a) {
    if (a.workspace == nullptr) throw std::logic_error("the dynamic scheduler runs without its workspace (the tile counter)");
    if (a.l2_bytes == 0) throw std::logic_error("the dynamic scheduler needs the L2 size (AttentionArgs::l2_bytes)");
    auto* counter = static_cast<int*>(a.workspace);
    CUDA_CHECK(cudaMemsetAsync(counter, 0, sizeof(int), a.stream));
    return {a.list, window_heads(a.l2_bytes, a.kv_head_bytes, a.list.bh_count), counter};
  }
  // As many heads per window as have K and V fitting in half of the L2 (at least 1, at most all).
  static int window_heads(std::size_t l2_bytes, std::size_t kv_head_bytes, int bh_count) {
    return int(std::clamp<std::size_t>(l2_bytes / 2 / kv_head_bytes, 1, std::size_t(bh_count)));
  }

  // Windows of heads_per_window heads (the last may be narrower), heaviest query block first
  // inside each: the CTAs running together share a few heads' K and V in L2; the counter balances
  // whatever the order. (Host and device: tests/cpu/test_tile_scheduler.cpp walks it.)
  __host__ __device__ __forceinline__ static WorkTile decode(const TileList& list, int heads_per_window,
                                                             int tile) {
    const int per_window = heads_per_window * list.m_blocks;
    const int full_windows = list.bh_count / heads_per_window;
    const bool in_full = tile < full_windows * per_window;
    const int window = in_full ? tile / per_window : full_windows;
    const int j = in_full ? tile % per_window : tile - full_windows * per_window;
    const int width = in_full ? heads_per_window : list.bh_count - full_windows * heads_per_window;
    return {window * heads_per_window + j % width, list.m_blocks - 1 - j / width, tile < list.n_tiles};
  }

#if LADDER_SM90A
  __device__ __forceinline__ Dynamic(const Params& p, std::uint64_t* q_full, std::uint64_t* q_empty)
      : list_(p.list), heads_per_window_(p.heads_per_window), counter_(p.counter),
        slot_(reinterpret_cast<volatile int2*>(p.counter + 2) + blockIdx.x), q_full_(q_full),
        q_empty_(q_empty) {}

  __device__ __forceinline__ WorkTile producer_first() { return current_ = work(int(blockIdx.x)); }
  __device__ __forceinline__ WorkTile producer_next() { return current_ = work(next_); }
  // Before the q_full arrival of the current tile (and after its q_empty wait).
  __device__ __forceinline__ void publish() const {
    slot_->x = current_.bh;
    slot_->y = current_.m_block;
  }
  __device__ __forceinline__ void prefetch_next() { next_ = int(gridDim.x) + atomicAdd(counter_, 1); }
  // After the last tile: a q_full phase that carries no Q, only "stop".
  __device__ __forceinline__ void producer_done(int tiles) const {
    mbarrier_wait(q_empty_, (tiles & 1) ^ 1);
    slot_->x = -1;
    mbarrier_arrive(q_full_);
  }

  __device__ __forceinline__ WorkTile consumer_first() { return received(r_ = 0); }
  __device__ __forceinline__ WorkTile consumer_next() { return received(++r_); }
  __device__ __forceinline__ void wait_q() const {}  // done: the tile itself came with q_full
  __device__ __forceinline__ bool may_have_next() const { return true; }  // not known until the producer says

 private:
  __device__ __forceinline__ WorkTile received(int r) const {
    mbarrier_wait(q_full_, r & 1);
    const int bh = slot_->x;
    return {bh, slot_->y, bh >= 0};
  }
  __device__ __forceinline__ WorkTile work(int tile) const { return decode(list_, heads_per_window_, tile); }

  TileList list_;
  int heads_per_window_;
  int* counter_;
  volatile int2* slot_;
  std::uint64_t* q_full_;
  std::uint64_t* q_empty_;
  WorkTile current_{};  // producer: the current tile
  int next_ = 0;        // producer: the prefetched tile index
  int r_ = 0;           // consumers: the current tile is the CTA's r-th
#endif  // LADDER_SM90A
};

}  // namespace ladder::hopper
