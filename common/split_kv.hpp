// How many pieces a decode kernel cuts each sequence's key range into (flash-decoding, Part VI).
//
// Decode is bound by HBM bandwidth, and a GPU moves its bandwidth only when every SM has bytes in
// flight. One CTA per (batch, K/V head) gives B·Hkv CTAs: 8 at B = 1, Hkv = 8, on a GPU of 132
// SMs. Splitting the keys into `s` ranges gives s times as many CTAs, each writing a partial
// output and its log-sum-exp, merged afterwards (common/device/split_kv.cuh). More splits cost a
// little (the partials, a second kernel), so the rule is the fewest splits that fill the GPU:
//
//   slots  = SMs × CTAs resident per SM (what runs at once);
//   fill(c) = c / (ceil(c / slots) · slots), the fraction of slot-time used if every CTA takes
//            as long as every other (they do: each split has the same number of key tiles);
//   splits = the smallest s with fill(ctas · s) >= kMinWaveFill, among the s the keys allow
//            (each split keeps enough tiles for its pipeline) and that do not multiply the waves
//            past kMaxWaves; if none reaches the fill, the s of the best fill.
//
// No CUDA here: the CPU tests check the rule, and a workspace function (which sees the shape,
// not the GPU) sizes the partials for any GPU up to kMaxSms.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <stdexcept>
#include <string>

namespace ladder::split_kv {

inline constexpr int kMaxSplits = 256;
inline constexpr int kMaxSms = 256;  // workspace bound: a GPU with more SMs is planned as this
inline constexpr double kMinWaveFill = 0.95;
inline constexpr std::int64_t kMaxWaves = 8;

// The fraction of `slots`-wide waves that `ctas` equal CTAs keep busy.
inline double wave_fill(std::int64_t ctas, std::int64_t slots) {
  const std::int64_t waves = (ctas + slots - 1) / slots;
  return double(ctas) / double(waves * slots);
}

// ctas: CTAs of one split (B·Hkv·row blocks); max_splits: the most the key range allows;
// slots: CTAs the GPU runs at once.
inline int choose_splits(std::int64_t ctas, int max_splits, std::int64_t slots) {
  ctas = std::max<std::int64_t>(ctas, 1);
  slots = std::max<std::int64_t>(slots, 1);
  max_splits = std::clamp(max_splits, 1, kMaxSplits);
  int best = 1;
  double best_fill = wave_fill(ctas, slots);
  const std::int64_t wave_cap = std::max(ctas, kMaxWaves * slots);
  for (int s = 1; s <= max_splits && ctas * s <= wave_cap; ++s) {
    const double fill = wave_fill(ctas * s, slots);
    if (fill >= kMinWaveFill) return s;
    if (fill > best_fill) best = s, best_fill = fill;
  }
  return best;
}

// The key range of `tiles` tiles in pieces of at least `min_tiles` each: at most this many splits.
inline int max_splits_for(int tiles, int min_tiles) {
  return std::clamp(tiles / std::max(min_tiles, 1), 1, kMaxSplits);
}

// A sweep's override (scripts/decode_sweep.sh): LADDER_SPLITS=N in the environment plans N splits
// (clamped to 1..max_splits) instead of the rule, for every decode step; unset or 0: the rule.
inline int forced_splits() {
  const char* e = std::getenv("LADDER_SPLITS");
  return e ? std::max(0, std::atoi(e)) : 0;
}

// The splits a kernel with `ctas_per_sm` resident CTAs plans on a GPU of `sm_count` SMs.
inline int plan_splits(std::int64_t ctas, int max_splits, int sm_count, int ctas_per_sm) {
  if (const int forced = forced_splits(); forced > 0) return std::clamp(forced, 1, std::clamp(max_splits, 1, kMaxSplits));
  sm_count = std::clamp(sm_count, 1, kMaxSms);
  return choose_splits(ctas, max_splits, std::int64_t(sm_count) * ctas_per_sm);
}

// The most splits plan_splits picks on any GPU of 1..kMaxSms SMs: what a workspace must hold.
inline int max_planned_splits(std::int64_t ctas, int max_splits, int ctas_per_sm) {
  int most = 1;
  for (int sms = 1; sms <= kMaxSms; ++sms)
    most = std::max(most, plan_splits(ctas, max_splits, sms, ctas_per_sm));
  return most;
}

// The pieces themselves: `splits` ranges of ceil(tiles / splits) tiles; the count is recomputed
// so that no range is empty by rounding (10 tiles in 4 splits are 3 + 3 + 3 + 1; in 6, 2 × 5).
struct Partition {
  int splits;
  int tiles_per_split;
};
inline Partition partition(int tiles, int splits) {
  tiles = std::max(tiles, 1);
  const int per = (tiles + splits - 1) / std::max(splits, 1);
  return {(tiles + per - 1) / per, per};
}

// The partials (common/device/split_kv.cuh): per query row, `splits` fp32 outputs of head_dim
// and `splits` fp32 log-sum-exps, the outputs first.
inline std::size_t partial_o_floats(std::int64_t rows, int splits, int head_dim) {
  return std::size_t(rows) * std::size_t(splits) * std::size_t(head_dim);
}
inline std::size_t partial_bytes(std::int64_t rows, int splits, int head_dim) {
  if (splits <= 1) return 0;
  return sizeof(float) * (partial_o_floats(rows, splits, head_dim) + std::size_t(rows) * std::size_t(splits));
}

// A fused decode (steps 41, 42) keeps one int counter per (batch, K/V head, row block) after the
// partials, 16-byte aligned: where they start, and the workspace with `counters` of them.
inline constexpr std::size_t kCounterAlign = 16;
inline std::size_t counters_offset(std::int64_t rows, int splits, int head_dim) {
  return (partial_bytes(rows, splits, head_dim) + kCounterAlign - 1) / kCounterAlign * kCounterAlign;
}
inline std::size_t fused_workspace_bytes(std::int64_t rows, int splits, int head_dim, std::int64_t counters) {
  return counters_offset(rows, splits, head_dim) + sizeof(int) * std::size_t(counters);
}

// A fused decode's launch and workspace, once (steps 41-43 spell them out; 44 calls these):
// `ctas` CTAs a split (one counter each), `tiles` key tiles of which a split keeps at least what
// max_splits allows. The plan: the rule's splits on this GPU, their key ranges, and where the
// partials, their LSEs and the counters lie in the workspace (null with one split).
struct FusedPlan {
  int splits, tiles_per_split;
  float* o_partial = nullptr;
  float* lse2_partial = nullptr;
  int* counters = nullptr;
};
inline FusedPlan plan_fused(const char* who, void* workspace, std::int64_t ctas, int max_splits, int tiles,
                            int sm_count, int ctas_per_sm, std::int64_t rows, int head_dim) {
  const Partition part = partition(tiles, plan_splits(ctas, max_splits, sm_count, ctas_per_sm));
  FusedPlan plan{part.splits, part.tiles_per_split};
  if (ctas * plan.splits > std::numeric_limits<int>::max())
    throw std::invalid_argument(std::string(who) + ": more CTAs than one grid holds");
  if (plan.splits == 1) return plan;
  if (workspace == nullptr) throw std::logic_error(std::string(who) + ": launched without its workspace");
  plan.o_partial = static_cast<float*>(workspace);
  plan.lse2_partial = plan.o_partial + partial_o_floats(rows, plan.splits, head_dim);
  plan.counters = reinterpret_cast<int*>(static_cast<unsigned char*>(workspace) +
                                         counters_offset(rows, plan.splits, head_dim));
  return plan;
}
// The workspace for the most splits any GPU (up to kMaxSms SMs) is planned with.
inline std::size_t fused_workspace_for(std::int64_t ctas, int max_splits, int tiles, int ctas_per_sm,
                                       std::int64_t rows, int head_dim) {
  const int splits = partition(tiles, max_planned_splits(ctas, max_splits, ctas_per_sm)).splits;
  return fused_workspace_bytes(rows, splits, head_dim, ctas);
}

}  // namespace ladder::split_kv
