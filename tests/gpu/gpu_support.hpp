// Shared by the GPU tests: the session (created once in main), which step to test, and which grid.
#pragma once

#include <algorithm>
#include <cstdlib>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "common/registry.hpp"
#include "common/runner.hpp"

namespace ladder::testing {

Session& session();

// Variants of the registered steps of `kind`, restricted to the step named by LADDER_TEST_STEP
// (ctest runs one step per test entry) when it is set.
inline std::vector<VariantRef> variants_of(Kind kind) {
  const char* only = std::getenv("LADDER_TEST_STEP");
  std::vector<VariantRef> out;
  for (const auto& step : Registry::instance().steps()) {
    if (step.kind != kind) continue;
    if (only && *only && step.number != std::atoi(only)) continue;
    for (std::size_t i = 0; i < step.variants.size(); ++i) out.push_back({&step, i});
  }
  return out;
}

// The variants among `variants` that declare `dtype` (Variant::for_dtypes): only they run a problem
// of that type, so a grid in bf16 or fp8 is run on them alone (the others refuse it unrun).
inline std::vector<VariantRef> declaring(std::span<const VariantRef> variants, DType dtype) {
  std::vector<VariantRef> out;
  for (const auto& ref : variants) {
    const auto& types = ref.variant().constraints.dtypes;
    if (std::find(types.begin(), types.end(), dtype) != types.end()) out.push_back(ref);
  }
  return out;
}

// Check-only options: no timing, every row against the reference where affordable.
inline RunOptions check_options() {
  RunOptions o;
  o.time = false;
  o.check = true;
  o.max_reference_rows = 1 << 20;
  return o;
}

// ---- The grid: LADDER_TEST_GRID=quick (the default: scripts/test.sh) or full (scripts/test.sh
// --full, and scripts/round.sh's test stage) --------------------------------------------------
// Every ctest entry recomputes the fp64 CPU reference of each shape it runs (and the cuDNN peers
// build a graph per shape), so the grid is what the suite's time is made of. The quick grid keeps
// every property the full one checks — ragged N for every tile, both masks, both head dims, every
// dtype, B·H of 1 and 3, the K/V ring wrapping — at a fraction of its cost; the full grid is the
// one the rounds run. An unknown value throws (a failed test): a typo must not run the quick grid
// while its caller believes it ran the full one.
inline bool full_grid() {
  const char* value = std::getenv("LADDER_TEST_GRID");
  const std::string_view grid = value ? value : "";
  if (grid.empty() || grid == "quick") return false;
  if (grid == "full") return true;
  throw std::invalid_argument("LADDER_TEST_GRID must be quick or full, not '" + std::string(grid) + "'");
}

// Query lengths of the quick grid, ragged for every tile the steps use (16, 32, 48, 64, 128 and
// 192 query rows; 32-, 64- and 128-key blocks): 1; 113, inside one 128- or 192-row tile and across
// several smaller ones; 384, a whole number of every tile and block (3 K/V blocks of 128, 2 tiles
// of 192: no ragged edge at all); 600, 5 K/V blocks of 128 — more than any Hopper step's ring of
// 2 to 4 stages holds, so the ring wraps — and ragged for every tile (600 = 4·128 + 88 = 3·192 + 24).
inline constexpr int kQuickSeqlens[] = {1, 113, 384, 600};
// The long side of the quick grid's fixed-size problems (large logits, B = 2, H = 3): 1000 in the
// full grid.
inline int long_seqlen() { return full_grid() ? 1000 : 600; }

// A library peer's ctest entry (steps 98, 99: cuDNN through its frontend). cuDNN builds and
// compiles a graph for every shape (a few tenths of a second each, against milliseconds for a
// kernel of the ladder), and what the grid checks there is the wiring — layout, strides, mask,
// dtype — not a lesson's tile edges: the quick grid gives it each property once, not every
// combination.
inline bool only_peers(std::span<const VariantRef> variants) {
  if (variants.empty()) return false;
  for (const auto& ref : variants)
    if (!ref.variant().peer) return false;
  return true;
}

// The (heads, N) pairs of the dense ragged grids (B = 1): the full grid is {1, 3} × full_seqlens;
// the quick one {1, 3} × kQuickSeqlens; the quick one of a library peer a heads-1 ragged short
// problem and a heads-3 long one whose K/V ring wraps.
struct HeadsSeqlen {
  int heads;
  int seqlen;
};
inline std::vector<HeadsSeqlen> ragged_grid(std::span<const int> full_seqlens,
                                            std::span<const VariantRef> variants) {
  const bool full = full_grid();
  if (!full && only_peers(variants)) return {{1, 113}, {3, 600}};
  std::vector<HeadsSeqlen> out;
  for (int heads : {1, 3})
    for (int n : full ? full_seqlens : std::span<const int>(kQuickSeqlens)) out.push_back({heads, n});
  return out;
}

}  // namespace ladder::testing
