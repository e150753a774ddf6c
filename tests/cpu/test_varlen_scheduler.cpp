// Step 27's varlen tile plan (common/device/hopper/varlen_scheduler.cuh), walked on the host: the
// list must hold every (sequence, head, query block) of the packed batch exactly once and nothing
// else — no padding tiles — and in the order it promises. The device decodes with the same code.
#include <algorithm>
#include <cstdint>
#include <set>
#include <stdexcept>
#include <tuple>
#include <vector>

#include "common/device/hopper/varlen_scheduler.cuh"
#include "tests/catch.hpp"

using namespace ladder::hopper;

namespace {

constexpr int kBlockM = 128;
int blocks(int n) { return (n + kBlockM - 1) / kBlockM; }

// Every tile once, through the CTAs' snake rows as the kernel walks them; returns the list in order.
std::vector<VarlenTile> check_cover(const VarlenPlan& p, const std::vector<int>& lens, int heads, int grid) {
  std::int64_t expected = 0;
  for (int n : lens) expected += std::int64_t(blocks(n)) * heads;
  REQUIRE(p.n_tiles == expected);  // Σ ceil(Nq_b / kBlockM) · H: no padding
  std::set<std::tuple<int, int, int>> seen;
  for (int c = 0; c < grid; ++c)
    for (int r = 0;; ++r) {
      const int t = VarlenSchedule::tile_index(r, c, grid);
      const VarlenTile w = p.decode(t);
      if (t >= p.n_tiles) {
        CHECK_FALSE(w.valid);
        break;
      }
      REQUIRE(w.valid);
      REQUIRE(w.b >= 0);
      REQUIRE(w.b < int(lens.size()));
      REQUIRE(w.head >= 0);
      REQUIRE(w.head < heads);
      REQUIRE(w.m_block >= 0);
      REQUIRE(w.m_block < blocks(lens[std::size_t(w.b)]));
      seen.insert({w.b, w.head, w.m_block});
    }
  CHECK(seen.size() == std::size_t(expected));
  std::vector<VarlenTile> list;
  for (int t = 0; t < p.n_tiles; ++t) list.push_back(p.decode(t));
  return list;
}

const std::vector<std::vector<int>> kBatches = {
    {1}, {1, 17, 127, 128, 129, 1000}, {8192, 1, 4097, 1, 300}, {5, 5, 5}, {0, 7, 0}, {256, 128, 384, 1}};

}  // namespace

TEST_CASE("the varlen plan covers every tile of the packed batch once", "[scheduler][varlen]") {
  for (const auto& lens : kBatches)
    for (int heads : {1, 3, 32})
      for (bool causal : {false, true})
        for (bool lpt : {false, true})
          for (int grid : {1, 7, 132}) {
            INFO("batch of " << lens.size() << " heads=" << heads << " causal=" << causal << " lpt=" << lpt);
            const VarlenPlan p = make_varlen_plan(lens, heads, kBlockM, causal, lpt);
            check_cover(p, lens, heads, std::max(1, std::min(grid, p.n_tiles)));
          }
}

TEST_CASE("the varlen plan's orders: longest first, heads innermost", "[scheduler][varlen]") {
  const std::vector<int> lens = {300, 8192, 1, 4097, 129};
  const int heads = 4;
  auto weight = [&](const VarlenTile& w, bool causal) {  // K/V blocks the tile visits (kBlockN = 128)
    return causal ? std::min(blocks(lens[std::size_t(w.b)]), w.m_block + 1) : blocks(lens[std::size_t(w.b)]);
  };
  for (bool causal : {false, true}) {
    const auto list = check_cover(make_varlen_plan(lens, heads, kBlockM, causal, true), lens, heads, 1);
    for (std::size_t t = 0; t + 1 < list.size(); ++t) {
      INFO("causal=" << causal << " tile " << t);
      CHECK(weight(list[t], causal) >= weight(list[t + 1], causal));  // heaviest first
      // The heads of one (sequence, query block) are consecutive, in order.
      if (list[t].head + 1 < heads)
        CHECK((list[t + 1].b == list[t].b && list[t + 1].m_block == list[t].m_block &&
               list[t + 1].head == list[t].head + 1));
    }
  }
  // The ablation keeps the batch's order, sequence by sequence (causal: heaviest block first).
  const auto in_order = check_cover(make_varlen_plan(lens, heads, kBlockM, true, false), lens, heads, 1);
  CHECK(in_order.front().b == 0);
  CHECK(in_order.front().m_block == blocks(lens[0]) - 1);
  CHECK(in_order.back().b == int(lens.size()) - 1);
  CHECK(in_order.back().m_block == 0);
}

TEST_CASE("the varlen plan refuses batches it cannot hold", "[scheduler][varlen]") {
  CHECK(varlen_plan_refusal(std::vector<int>(VarlenPlan::kMaxGroups, 1), kBlockM, true) == std::nullopt);
  CHECK(varlen_plan_refusal(std::vector<int>(VarlenPlan::kMaxGroups + 1, 1), kBlockM, false).has_value());
  CHECK(varlen_plan_refusal({VarlenPlan::kMaxGroups * kBlockM}, kBlockM, true) == std::nullopt);
  CHECK(varlen_plan_refusal({VarlenPlan::kMaxGroups * kBlockM + 1}, kBlockM, true).has_value());
  CHECK(varlen_plan_refusal({VarlenPlan::kMaxGroups * kBlockM + 1}, kBlockM, false) == std::nullopt);
  CHECK_THROWS_AS(make_varlen_plan(std::vector<int>(VarlenPlan::kMaxGroups + 1, 1), 8, kBlockM, false, true),
                  std::invalid_argument);
}
