// A static tile scheduler over a packed variable-length batch (cu_seqlens), for a persistent grid.
//
// Sequence b has Nq_b queries; its tiles are (b, query block, head), ceil(Nq_b / kBlockM) · H of
// them: the list holds Σ_b ceil(Nq_b / kBlockM) · H tiles and not one of padding. Padding the
// batch to its longest sequence would cost B · ceil(max / kBlockM) · H tiles, most of them empty.
//
// The order is longest processing time first (LPT), because the CTAs run the list row by row
// (row r = tiles [rG, rG + G), one per CTA, walked as a snake: Snake's rows, tile_scheduler.cuh)
// and a heavy tile at the end of the list is a tail where the other CTAs idle. A tile's weight is
// the K/V blocks it visits:
//   no mask  every tile of sequence b visits ceil(Nk_b / kBlockN) blocks: the sequences longest
//            first, each sequence's tiles (query block, head) with the head innermost;
//   causal   query block m visits ceil((m + 1)·kBlockM / kBlockN) blocks (m + 1 where the tile's
//            rows equal a block's keys; 192 rows over 128 keys at D = 64), whatever the sequence
//            (or fewer, where the sequence ends first): a weight that grows with m, so the
//            tiles by level, m from the deepest down, and within a level the sequences that reach
//            it (the longest first, so a level's sequences are a prefix of the sorted order), the
//            head innermost.
// The head innermost keeps a GQA group's heads side by side (step 26's lesson).
//
// The plan is computed on the host from the shape's lengths (the harness builds cu_seqlens from
// the same list) and passed by value as a __grid_constant__ kernel parameter: the decode reads it
// from the constant bank, uniform across the role, with no global memory and no extra kernel.
// Its size bounds the batch (kMaxGroups sequences, and causal kMaxGroups query blocks in the
// longest sequence). The kernel still takes each sequence's offsets and lengths from cu_seqlens.
//
// Producer and consumers each walk the same list (static: the r-th tile of CTA c is a function of
// r), with step 20's handoff hooks doing nothing: the same interface as StaticSchedule.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/device/hopper/arch.cuh"
#if LADDER_SM90A
#include "common/device/hopper/mbarrier.cuh"
#endif

namespace ladder::hopper {

struct VarlenTile {
  int b;        // sequence
  int head;     // query head
  int m_block;  // query rows [m_block · kBlockM, (m_block + 1) · kBlockM) of the sequence
  bool valid;   // false: no tile left for this CTA
};

struct VarlenPlan {
  static constexpr int kMaxGroups = 1024;
  int n_tiles;
  int heads;
  int groups;     // entries of start used: sequences (by sequence) or levels (by level)
  bool by_level;  // causal LPT: group k is query block groups - 1 - k of every sequence that has it
  bool descending;  // by sequence: the query blocks of a sequence from the last (causal: heaviest)
  int order[kMaxGroups];        // the sequences, in the list's order
  int start[kMaxGroups + 1];    // group k's tiles are [start[k], start[k + 1])

  // The tile at `tile` of the list (host and device; tests/cpu/test_varlen_scheduler.cpp walks it).
  __host__ __device__ __forceinline__ VarlenTile decode(int tile) const {
    if (tile >= n_tiles) return {0, 0, 0, false};
    int lo = 0, hi = groups;  // the last k with start[k] <= tile (empty groups are skipped)
    while (hi - lo > 1) {
      const int mid = (lo + hi) / 2;
      if (start[mid] <= tile) lo = mid;
      else hi = mid;
    }
    const int j = tile - start[lo];
    if (by_level) return {order[j / heads], j % heads, groups - 1 - lo, true};
    const int blocks = (start[lo + 1] - start[lo]) / heads;
    const int m = j / heads;
    return {order[lo], j % heads, descending ? blocks - 1 - m : m, true};
  }
};

// Why a batch does not fit a plan, or nothing.
inline std::optional<std::string> varlen_plan_refusal(const std::vector<int>& q_lens, int block_m, bool causal) {
  if (q_lens.size() > std::size_t(VarlenPlan::kMaxGroups))
    return "the varlen tile plan holds up to " + std::to_string(VarlenPlan::kMaxGroups) + " sequences, not " +
           std::to_string(q_lens.size());
  const int longest = q_lens.empty() ? 0 : *std::max_element(q_lens.begin(), q_lens.end());
  if (causal && (longest + block_m - 1) / block_m > VarlenPlan::kMaxGroups)
    return "the causal varlen plan holds sequences up to " + std::to_string(VarlenPlan::kMaxGroups * block_m) +
           " tokens, not " + std::to_string(longest);
  return std::nullopt;
}

// longest_first: the LPT order above; otherwise the batch's own order, sequence by sequence (each
// sequence's query blocks heaviest first when causal), the ablation.
inline VarlenPlan make_varlen_plan(const std::vector<int>& q_lens, int heads, int block_m, bool causal,
                                   bool longest_first) {
  if (auto why = varlen_plan_refusal(q_lens, block_m, causal)) throw std::invalid_argument(*why);
  const int batch = int(q_lens.size());
  VarlenPlan p{};
  p.heads = heads;
  p.by_level = causal && longest_first;
  p.descending = causal;
  std::iota(p.order, p.order + batch, 0);
  if (longest_first)
    std::stable_sort(p.order, p.order + batch, [&](int a, int b) { return q_lens[std::size_t(a)] > q_lens[std::size_t(b)]; });
  auto blocks = [&](int b) { return std::int64_t(q_lens[std::size_t(b)] + block_m - 1) / block_m; };
  std::int64_t total = 0;
  if (p.by_level) {
    p.groups = batch > 0 ? int(blocks(p.order[0])) : 0;
    for (int k = 0; k < p.groups; ++k) {
      const int m = p.groups - 1 - k;
      p.start[k] = int(std::min<std::int64_t>(total, std::numeric_limits<int>::max()));
      for (int i = 0; i < batch && blocks(p.order[i]) > m; ++i) total += heads;  // a prefix of the order
    }
  } else {
    p.groups = batch;
    for (int i = 0; i < batch; ++i) {
      p.start[i] = int(std::min<std::int64_t>(total, std::numeric_limits<int>::max()));
      total += blocks(p.order[i]) * heads;
    }
  }
  if (total > std::numeric_limits<int>::max())
    throw std::invalid_argument("a varlen tile list holds up to 2^31 - 1 tiles, not " + std::to_string(total));
  p.start[p.groups] = int(total);
  p.n_tiles = int(total);
  return p;
}

// The persistent kernel's scheduler over a plan (the interface of StaticSchedule, with VarlenTile).
struct VarlenSchedule {
  using Params = VarlenPlan;
  static constexpr bool kKnowsLast = true;

  // Rows walked as a snake (tile_scheduler.cuh's Snake): CTA c's r-th tile.
  __host__ __device__ __forceinline__ static int tile_index(int r, int cta, int grid) {
    return (r & 1) ? r * grid + (grid - 1 - cta) : r * grid + cta;
  }

#if LADDER_SM90A
  __device__ __forceinline__ VarlenSchedule(const Params& p, std::uint64_t* q_full, std::uint64_t*)
      : plan_(p), q_full_(q_full) {}

  __device__ __forceinline__ VarlenTile producer_first() { return plan_.decode(index(r_ = 0)); }
  __device__ __forceinline__ VarlenTile producer_next() { return plan_.decode(index(++r_)); }
  __device__ __forceinline__ void publish() const {}
  __device__ __forceinline__ void prefetch_next() const {}
  __device__ __forceinline__ void producer_done(int) const {}

  __device__ __forceinline__ VarlenTile consumer_first() { return plan_.decode(index(r_ = 0)); }
  __device__ __forceinline__ VarlenTile consumer_next() { return plan_.decode(index(++r_)); }
  __device__ __forceinline__ void wait_q() const { mbarrier_wait(q_full_, r_ & 1); }
  __device__ __forceinline__ bool may_have_next() const { return index(r_ + 1) < plan_.n_tiles; }

 private:
  __device__ __forceinline__ int index(int r) const { return tile_index(r, int(blockIdx.x), int(gridDim.x)); }
  const Params& plan_;  // the __grid_constant__ kernel parameter
  std::uint64_t* q_full_;
  int r_ = 0;
#endif  // LADDER_SM90A
};

}  // namespace ladder::hopper
