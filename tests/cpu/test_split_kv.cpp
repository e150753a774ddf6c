// The split rule of split-KV decoding (common/split_kv.hpp): the fewest splits that fill the GPU,
// ranges that cover every key tile once, and a workspace bound that holds for any GPU.
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <vector>

#include "common/split_kv.hpp"
#include "tests/catch.hpp"

using namespace ladder::split_kv;

namespace {
constexpr int kH200Sms = 132;
constexpr int kCtasPerSm = 2;  // steps 28 and 29
constexpr int kMinTiles = 12;  // their kMinTilesPerSplit at D = 128 (4 warps × 3 stages)
// CTAs of one split and key tiles (16 keys) of Part VI's four decode targets, Nq = 1, D = 128:
// B·Hkv·ceil(group·Nq / 16) and Nk / 16.
struct Target {
  std::int64_t ctas;
  int tiles;
  int splits;  // what the rule must pick on the H200
};
constexpr Target kTargets[] = {
    {8 * 8, 32768 / 16, 4},      // B=8 Hq=32 Hkv=8 Nk=32768: 256 CTAs, 0.97 of 264 slots
    {64 * 8, 4096 / 16, 1},      // B=64 Hkv=8 Nk=4096: 512 CTAs are 1.94 waves already
    {1 * 8, 131072 / 16, 32},    // B=1 Hq=64 Hkv=8 Nk=131072: 8 CTAs alone fill 3% of the GPU
    {128 * 32, 2048 / 16, 1},    // B=128 Hkv=32 Nk=2048: 4096 CTAs, 15.5 waves
    {3 * 8, 772, 11},            // B=3 Hq=40 Hkv=8 Nk=12345 (772 tiles): 24 CTAs, 11 splits are one full wave
};
}  // namespace

TEST_CASE("the split rule fills the H200 at the decode targets", "[split_kv]") {
  const std::int64_t slots = std::int64_t(kH200Sms) * kCtasPerSm;
  for (const auto& t : kTargets) {
    INFO("ctas " << t.ctas << " tiles " << t.tiles);
    const int s = plan_splits(t.ctas, max_splits_for(t.tiles, kMinTiles), kH200Sms, kCtasPerSm);
    CHECK(s == t.splits);
    CHECK(wave_fill(t.ctas * s, slots) >= kMinWaveFill);
    // The fewest: one split fewer does not fill.
    if (s > 1) CHECK(wave_fill(t.ctas * (s - 1), slots) < kMinWaveFill);
  }
}

TEST_CASE("the split rule respects the keys and the wave cap", "[split_kv]") {
  // A short cache cannot be cut below kMinTiles tiles per split, however idle the GPU.
  CHECK(plan_splits(1, max_splits_for(24, kMinTiles), kH200Sms, kCtasPerSm) == 2);
  CHECK(plan_splits(1, max_splits_for(5, kMinTiles), kH200Sms, kCtasPerSm) == 1);
  // 290 CTAs (1.1 waves) never become more than kMaxWaves waves to round a tail.
  const int s = plan_splits(290, kMaxSplits, kH200Sms, kCtasPerSm);
  CHECK(290 * s <= kMaxWaves * kH200Sms * kCtasPerSm);
  CHECK(wave_fill(290 * s, 264) >= wave_fill(290, 264));
}

TEST_CASE("the key ranges cover every tile once, none empty", "[split_kv]") {
  for (int tiles = 1; tiles <= 300; ++tiles)
    for (int want = 1; want <= 64; ++want) {
      const Partition p = partition(tiles, want);
      INFO("tiles " << tiles << " splits " << want);
      REQUIRE(p.splits >= 1);
      CHECK(p.splits <= want);
      CHECK(std::int64_t(p.splits) * p.tiles_per_split >= tiles);        // every tile in a range
      CHECK(std::int64_t(p.splits - 1) * p.tiles_per_split < tiles);     // the last range not empty
      if (want > 1) CHECK(partition(tiles, want - 1).splits <= p.splits);  // monotone: the bound holds
    }
}

TEST_CASE("the workspace bound holds for every GPU size", "[split_kv]") {
  for (std::int64_t ctas : {1, 3, 8, 64, 290, 512, 4096})
    for (int tiles : {1, 17, 256, 2048, 8192}) {
      const int limit = max_splits_for(tiles, kMinTiles);
      const int most = max_planned_splits(ctas, limit, kCtasPerSm);
      for (int sms = 1; sms <= kMaxSms + 8; ++sms)
        CHECK(plan_splits(ctas, limit, sms, kCtasPerSm) <= most);
    }
  CHECK(partial_bytes(64, 1, 128) == 0);  // one split writes O directly
  CHECK(partial_bytes(64, 32, 128) == sizeof(float) * 64 * 32 * 129);
}

TEST_CASE("LADDER_SPLITS forces the split count, within what the keys allow", "[split_kv]") {
  const int rule = plan_splits(8, max_splits_for(8192, kMinTiles), kH200Sms, kCtasPerSm);
  ::setenv("LADDER_SPLITS", "5", 1);
  CHECK(plan_splits(8, max_splits_for(8192, kMinTiles), kH200Sms, kCtasPerSm) == 5);
  CHECK(plan_splits(8, max_splits_for(24, kMinTiles), kH200Sms, kCtasPerSm) == 2);  // 24 tiles: at most 2
  CHECK(max_planned_splits(8, max_splits_for(8192, kMinTiles), kCtasPerSm) == 5);   // the workspace follows
  ::setenv("LADDER_SPLITS", "0", 1);
  CHECK(plan_splits(8, max_splits_for(8192, kMinTiles), kH200Sms, kCtasPerSm) == rule);
  ::unsetenv("LADDER_SPLITS");
  CHECK(plan_splits(8, max_splits_for(8192, kMinTiles), kH200Sms, kCtasPerSm) == rule);
  CHECK(rule == 32);
}

TEST_CASE("plan_fused: the rule's splits, and the workspace's parts where fused_workspace_for sized them",
          "[split_kv]") {
  // Step 44 at the serving grid's Nq = 16 shapes (64-key tiles, a split keeps 3): B = 8, Hq = 32,
  // Hkv = 8 is one row block of 64 rows, 64 CTAs a split, 4 splits as at Nq = 1; B = 3, Hq = 40 is
  // two row blocks (48 + 32), 48 CTAs a split, 11 splits.
  constexpr int kKeys = 64, kStages = 3, kD = 128;
  struct Shape {
    std::int64_t ctas, rows;
    int nk, splits;
  };
  for (const auto& s : {Shape{8 * 8, 8 * 32 * 16, 32768, 4}, Shape{3 * 8 * 2, 3 * 40 * 16, 12345, 11}}) {
    const int tiles = (s.nk + kKeys - 1) / kKeys, limit = max_splits_for(tiles, kStages);
    const std::size_t bytes = fused_workspace_for(s.ctas, limit, tiles, kCtasPerSm, s.rows, kD);
    std::vector<unsigned char> ws(bytes);
    const FusedPlan plan = plan_fused("test", ws.data(), s.ctas, limit, tiles, kH200Sms, kCtasPerSm, s.rows, kD);
    CHECK(plan.splits == s.splits);
    CHECK(std::int64_t(plan.splits) * plan.tiles_per_split >= tiles);
    CHECK(reinterpret_cast<unsigned char*>(plan.o_partial) == ws.data());
    CHECK(plan.lse2_partial == plan.o_partial + partial_o_floats(s.rows, plan.splits, kD));
    CHECK(reinterpret_cast<unsigned char*>(plan.counters + s.ctas) <= ws.data() + bytes);  // the counters fit
    CHECK_THROWS_AS(plan_fused("test", nullptr, s.ctas, limit, tiles, kH200Sms, kCtasPerSm, s.rows, kD),
                    std::logic_error);
  }
  // One split: no workspace needed, none used.
  const FusedPlan one = plan_fused("test", nullptr, 4096, 1, 64, kH200Sms, kCtasPerSm, 4096, kD);
  CHECK(one.splits == 1);
  CHECK(one.o_partial == nullptr);
  CHECK(one.counters == nullptr);
}
