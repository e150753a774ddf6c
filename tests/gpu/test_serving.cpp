// Part VI: every variant that declares GQA, decode, a variable-length batch or a paged K/V cache
// (Variant::serves) against the fp64 reference on a grid of ragged shapes of that property.
#include <algorithm>
#include <random>
#include <vector>

#include "common/runner.hpp"
#include "tests/catch.hpp"
#include "tests/gpu/check_attention_run.hpp"
#include "tests/gpu/gpu_support.hpp"

using namespace ladder;

namespace {

// The variants of the step under test that handle every property in `needed` (Feature bits).
std::vector<VariantRef> serving(unsigned needed) {
  std::vector<VariantRef> out;
  for (const auto& ref : testing::variants_of(Kind::Attention))
    if ((ref.variant().constraints.features & needed) == needed) out.push_back(ref);
  return out;
}

// Runs `shape` in fp16 and, for the variants that declare them, in bf16 and in fp8 (where an fp8
// problem of that layout exists: validate() admits GQA, and refuses decode, varlen and paged).
void check_every_type(const std::vector<VariantRef>& variants, AttentionShape shape,
                      const RunOptions& options = testing::check_options()) {
  for (DType dtype : {DType::F16, DType::BF16, DType::E4M3}) {
    shape.dtype = dtype;
    if (dtype == DType::E4M3 && validate(shape)) continue;
    const std::vector<VariantRef> these = dtype == DType::F16 ? variants : testing::declaring(variants, dtype);
    if (these.empty()) continue;
    testing::check_attention_run(run_attention(testing::session(), shape, these, options), these, shape);
    REQUIRE_FALSE(testing::session().context_lost);
  }
}

constexpr int kHeadDims[] = {64, 128};
constexpr unsigned kGqa = unsigned(Feature::Gqa), kDecode = unsigned(Feature::Decode),
                   kVarlen = unsigned(Feature::Varlen), kPaged = unsigned(Feature::Paged);

}  // namespace

TEST_CASE("GQA: group sizes 1, 4 and 8 on a ragged grid", "[gpu][serving][gqa]") {
  const auto variants = serving(kGqa);
  if (variants.empty()) return;
  // Quick grid: the group's head map at a single row, one past a tile and over three 128-key
  // blocks and tiles (the K/V ring's wrap is the dense grid's); a library peer gets each group
  // size once, at one head dim and one length (testing::only_peers says why).
  struct Point {
    int kv_heads, head_dim, seqlen;
  };
  std::vector<Point> points;
  if (!testing::full_grid() && testing::only_peers(variants)) {
    points = {{8, 64, 17}, {2, 128, 129}, {1, 128, 384}};
  } else {
    const std::vector<int> lengths = testing::full_grid() ? std::vector<int>{1, 17, 128, 129, 1000}
                                                          : std::vector<int>{1, 17, 129, 384};
    for (int kv_heads : {8, 2, 1})
      for (int d : kHeadDims)
        for (int n : lengths) points.push_back({kv_heads, d, n});
  }
  for (const auto& [kv_heads, d, n] : points)
    for (bool causal : {false, true}) {
      const AttentionShape shape{.batch = 2, .heads = 8, .seqlen = n, .head_dim = d,
                                 .causal = causal, .kv_heads = kv_heads};
      check_every_type(variants, shape);
    }
}

TEST_CASE("decode: 1, 7 and 16 queries against caches of 1 to 4097 keys (2049 in the quick grid)",
          "[gpu][serving][decode]") {
  const auto variants = serving(kDecode);
  if (variants.empty()) return;
  // A decode shape has a few hundred query rows: its cost is the cache's random K and V. The quick
  // grid's longest cache is 2049 keys (16 blocks of 128 and one key: still split across CTAs, the
  // last block ragged), the full grid's 4097; a library peer gets each query count and cache
  // length once.
  const int longest = testing::full_grid() ? 4097 : 2049;
  struct Point {
    int kv_heads, head_dim, nq, nk;
  };
  std::vector<Point> points;
  if (!testing::full_grid() && testing::only_peers(variants)) {
    points = {{8, 128, 1, longest}, {2, 64, 7, 17}, {2, 128, 16, 128}, {8, 64, 1, 1}};
  } else {
    for (int kv_heads : {8, 2})
      for (int d : kHeadDims)
        for (int nq : {1, 7, 16})
          for (int nk : {1, 17, 128, longest}) points.push_back({kv_heads, d, nq, nk});
  }
  for (const auto& [kv_heads, d, nq, nk] : points)
    for (bool causal : {false, true}) {
      if (causal && nq > nk) continue;  // aligned to the end, the first queries see no key
      AttentionShape shape{.batch = 3, .heads = 8, .seqlen = nq, .head_dim = d,
                           .causal = causal, .kv_heads = kv_heads, .kv_seqlen = nk};
      std::vector<VariantRef> these;  // a decode variant without GQA runs group 1 only
      for (const auto& ref : variants)
        if (!shape.gqa() || (ref.variant().constraints.features & kGqa)) these.push_back(ref);
      if (!these.empty()) check_every_type(these, shape);
    }
}

TEST_CASE("decode: speculative 2-16 queries at groups 5 and 8, up to 128 packed rows a K/V head",
          "[gpu][serving][decode]") {
  const auto variants = serving(kDecode | kGqa);
  if (variants.empty()) return;
  // A K/V head's packed rows (group · Nq) decide a decode CTA's shape: 10 to 128 here, so that
  // step 44 runs both its instances (32 and 64 rows), a CTA with idle warps (35 rows: 48), and two
  // row blocks meeting at the splits' counters (80 rows: 48 + 32; 128: 64 + 64). Caches of one
  // key, one past step 44's 64-key tile, and the decode grid's longest.
  const int longest = testing::full_grid() ? 4097 : 2049;
  struct Point {
    int heads, head_dim, nq, nk;
  };
  std::vector<Point> points;
  if (!testing::full_grid() && testing::only_peers(variants)) {
    points = {{10, 128, 16, longest}, {16, 64, 4, 65}};
  } else {
    for (int heads : {10, 16})  // groups 5 and 8 on 2 K/V heads
      for (int d : kHeadDims)
        for (int nq : {2, 4, 7, 16})
          for (int nk : {1, 65, longest}) points.push_back({heads, d, nq, nk});
  }
  for (const auto& [heads, d, nq, nk] : points)
    for (bool causal : {false, true}) {
      if (causal && nq > nk) continue;  // aligned to the end, the first queries see no key
      check_every_type(variants, {.batch = 2, .heads = heads, .seqlen = nq, .head_dim = d,
                                  .causal = causal, .kv_heads = 2, .kv_seqlen = nk});
    }
}

TEST_CASE("decode: large logits and a second seed", "[gpu][serving][decode]") {
  const auto variants = serving(kDecode);
  if (variants.empty()) return;
  RunOptions options = testing::check_options();
  options.q_scale = 5.0f;
  options.k_scale = 3.0f;
  for (bool causal : {false, true}) {
    const AttentionShape shape{.batch = 2, .heads = 4, .seqlen = 7, .head_dim = 128,
                               .causal = causal, .kv_heads = 4, .kv_seqlen = 3001};
    check_every_type(variants, shape, options);
  }
  options = testing::check_options();
  options.seed = 7;
  check_every_type(variants, {.batch = 5, .heads = 4, .seqlen = 1, .head_dim = 64, .kv_heads = 4,
                              .kv_seqlen = 20000}, options);
}

TEST_CASE("varlen: a packed batch of ragged lengths", "[gpu][serving][varlen]") {
  const auto variants = serving(kVarlen);
  if (variants.empty()) return;
  // Every tile edge of every step: 1, one short of a tile, a tile, one past; shuffled, seeded. The
  // longest sequences (the CPU reference's cost: it grows with the square of a length) are 1000
  // and 2049 in the full grid; the quick one has one of 600 (5 K/V blocks of 128: the ring wraps).
  std::vector<int> lens = testing::full_grid() ? std::vector<int>{1, 17, 127, 128, 129, 1000, 64, 1, 255, 2049}
                                               : std::vector<int>{1, 17, 127, 128, 129, 600, 64, 1, 255};
  std::shuffle(lens.begin(), lens.end(), std::mt19937_64(20261201));
  const bool peer_quick = !testing::full_grid() && testing::only_peers(variants);
  for (int kv_heads : {4, 1})
    for (int d : kHeadDims)
      for (bool causal : {false, true}) {
        // A library peer, quick: each K/V head count at one head dim (4 at 64, 1 at 128).
        if (peer_quick && d != (kv_heads == 4 ? 64 : 128)) continue;
        AttentionShape shape{.batch = int(lens.size()), .heads = 4,
                             .seqlen = *std::max_element(lens.begin(), lens.end()), .head_dim = d,
                             .causal = causal, .kv_heads = kv_heads, .q_lens = lens};
        std::vector<VariantRef> these;
        for (const auto& ref : variants)
          if (!shape.gqa() || (ref.variant().constraints.features & kGqa)) these.push_back(ref);
        if (these.empty()) continue;
        check_every_type(these, shape);
      }
  // One sequence alone, of one token: the smallest batch there is.
  check_every_type(variants, {.batch = 1, .heads = 4, .seqlen = 1, .head_dim = 64, .kv_heads = 4,
                              .q_lens = {1}});
}

TEST_CASE("paged: pages of 16, 64 and 256 rows, scattered", "[gpu][serving][paged]") {
  const auto variants = serving(kPaged);
  if (variants.empty()) return;
  // The quick grid is the full one (with two K/V heads the pools are small), except for a library
  // peer, which gets each page size once (a cache inside one page, across a few, across many).
  struct Point {
    int page, head_dim, nq, nk;
  };
  std::vector<Point> points;
  if (!testing::full_grid() && testing::only_peers(variants)) {
    points = {{16, 64, 7, 300}, {64, 128, 1, 4097}, {256, 64, 7, 17}};
  } else {
    for (int page : {16, 64, 256})
      for (int d : kHeadDims)
        for (int nq : {1, 7})
          // One key, one key past the first page, a few pages, many pages with a ragged last.
          for (int nk : {1, page + 1, 300, 4097}) points.push_back({page, d, nq, nk});
  }
  for (const auto& [page, d, nq, nk] : points)
    for (bool causal : {false, true}) {
      if (causal && nk < nq) continue;  // aligned to the end, the first queries would see no key
      const AttentionShape shape{.batch = 3, .heads = 8, .seqlen = nq, .head_dim = d,
                                 .causal = causal, .kv_heads = 2, .kv_seqlen = nk,
                                 .page_size = page};
      std::vector<VariantRef> these;
      for (const auto& ref : variants)
        if ((ref.variant().constraints.features & (kGqa | kDecode)) == (kGqa | kDecode))
          these.push_back(ref);
      if (these.empty()) continue;
      check_every_type(these, shape);
    }
}
