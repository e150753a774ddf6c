// The persistent steps' tile schedulers (common/device/hopper/tile_scheduler.cuh), walked on the
// host: every schedule must hand out every (head, query block) exactly once and nothing else, in
// the order it promises. The device code calls the same tile_index / decode functions.
#include <algorithm>
#include <cstdint>
#include <set>
#include <stdexcept>
#include <utility>
#include <vector>

#include "common/device/hopper/tile_scheduler.cuh"
#include "tests/catch.hpp"

using namespace ladder::hopper;

namespace {

// The (head, query block) pairs a static schedule gives CTA c of g, in its order.
template <class S>
std::vector<WorkTile> walk(const TileList& list, int cta, int grid) {
  std::vector<WorkTile> out;
  for (int r = 0;; ++r) {
    const WorkTile w = S::decode(list, S::tile_index(r, cta, grid));
    if (!w.valid) break;
    out.push_back(w);
  }
  return out;
}

template <class S>
void check_static_cover(const TileList& list, int grid) {
  std::set<std::pair<int, int>> seen;
  std::size_t count = 0;
  for (int c = 0; c < grid; ++c)
    for (const WorkTile& w : walk<S>(list, c, grid)) {
      REQUIRE(w.bh >= 0);
      REQUIRE(w.bh < list.bh_count);
      REQUIRE(w.m_block >= 0);
      REQUIRE(w.m_block < list.m_blocks);
      seen.insert({w.bh, w.m_block});
      ++count;
    }
  CHECK(count == std::size_t(list.n_tiles));  // no tile twice
  CHECK(seen.size() == std::size_t(list.n_tiles));  // every tile
}

const std::vector<std::pair<std::int64_t, int>> kProblems = {  // (B·H, N)
    {1, 1}, {1, 1000}, {3, 113}, {32, 4096}, {7, 8192}, {70000, 64}, {200, 300}};

}  // namespace

TEST_CASE("make_tile_list counts tiles in 64 bits and refuses a list longer than an int", "[scheduler]") {
  const TileList big = make_tile_list(70000, 64, 128);  // B=1 H=70000 N=64: more heads than grid.y allows
  CHECK(big.bh_count == 70000);
  CHECK(big.m_blocks == 1);
  CHECK(big.n_tiles == 70000);
  CHECK(make_tile_list(4 * 8, 4096, 192).m_blocks == 22);
  CHECK_THROWS_AS(make_tile_list(70000, 1 << 22, 128), std::invalid_argument);  // 2.3e9 tiles
}

TEST_CASE("the static schedules hand out every tile exactly once", "[scheduler]") {
  for (const auto& [bh, n] : kProblems)
    for (int block_m : {128, 192})
      for (int grid : {1, 5, 132}) {
        const TileList list = make_tile_list(bh, n, block_m);
        const int g = std::min(grid, list.n_tiles);
        INFO("B·H=" << bh << " N=" << n << " kBlockM=" << block_m << " grid=" << g);
        check_static_cover<RowWalk<false>>(list, g);
        check_static_cover<RowWalk<true>>(list, g);
        check_static_cover<Snake>(list, g);
      }
}

TEST_CASE("the schedules' orders: head-major, heaviest first, the snake's reversed rows", "[scheduler]") {
  const TileList list = make_tile_list(6, 1000, 128);  // 8 query blocks per head, 48 tiles
  const int grid = 5;
  // Without a mask, consecutive tiles stay in one head (head-major).
  for (int t = 0; t + 1 < list.n_tiles; ++t) {
    const WorkTile a = RowWalk<false>::decode(list, t), b = RowWalk<false>::decode(list, t + 1);
    CHECK((a.bh == b.bh ? b.m_block == a.m_block + 1 : b.bh == a.bh + 1 && b.m_block == 0));
  }
  // Causal: the list goes from the heaviest query block (the last) to the lightest.
  for (int t = 0; t + 1 < list.n_tiles; ++t)
    CHECK(RowWalk<true>::decode(list, t).m_block >= RowWalk<true>::decode(list, t + 1).m_block);
  // The snake: CTA c takes tile c in even rows and tile G - 1 - c in odd ones.
  for (int c = 0; c < grid; ++c) {
    CHECK(Snake::tile_index(0, c, grid) == c);
    CHECK(Snake::tile_index(1, c, grid) == 2 * grid - 1 - c);
    CHECK(RowWalk<true>::tile_index(1, c, grid) == grid + c);
  }
}

TEST_CASE("the dynamic schedule's list covers every tile once, heaviest first in each window", "[scheduler]") {
  for (const auto& [bh, n] : kProblems)
    for (int heads : {1, 2, 3, 8, 1000}) {
      const TileList list = make_tile_list(bh, n, 128);
      const int window = std::min(heads, list.bh_count);
      INFO("B·H=" << bh << " N=" << n << " heads per window=" << window);
      std::set<std::pair<int, int>> seen;
      for (int t = 0; t < list.n_tiles; ++t) {
        const WorkTile w = Dynamic::decode(list, window, t);
        REQUIRE(w.valid);
        REQUIRE(w.bh >= 0);
        REQUIRE(w.bh < list.bh_count);
        REQUIRE(w.m_block >= 0);
        REQUIRE(w.m_block < list.m_blocks);
        seen.insert({w.bh, w.m_block});
        if (t + 1 < list.n_tiles) {
          const WorkTile next = Dynamic::decode(list, window, t + 1);
          if (next.bh / window == w.bh / window) CHECK(next.m_block <= w.m_block);  // one window
        }
      }
      CHECK(seen.size() == std::size_t(list.n_tiles));
      CHECK_FALSE(Dynamic::decode(list, window, list.n_tiles).valid);  // the counter ran past the end
    }
  // Windows: K and V of as many heads as fit half the L2, at least one, at most all.
  CHECK(Dynamic::window_heads(50u << 20, 2u << 20, 64) == 12);
  CHECK(Dynamic::window_heads(50u << 20, 64u << 20, 64) == 1);
  CHECK(Dynamic::window_heads(50u << 20, 1u << 10, 64) == 64);
}

TEST_CASE("the group walk covers every tile once, the group's heads innermost", "[scheduler]") {
  for (const auto& [bh, n] : kProblems)
    for (int group : {1, 4, 8}) {
      if (bh % group != 0) continue;
      TileList list = make_tile_list(bh, n, 128);
      list.group = group;
      for (int grid : {1, 5, 132}) check_static_cover<GroupWalk>(list, std::min(grid, list.n_tiles));
      // Consecutive tiles: the next head of the group at the same query block, or the group's
      // first head at the next query block (or the next group's first tile).
      for (int t = 0; t + 1 < list.n_tiles; ++t) {
        const WorkTile a = GroupWalk::decode(list, t), b = GroupWalk::decode(list, t + 1);
        INFO("B·H=" << bh << " N=" << n << " G=" << group << " tile " << t);
        if ((a.bh + 1) % group != 0) CHECK((b.bh == a.bh + 1 && b.m_block == a.m_block));
        else if (a.m_block + 1 < list.m_blocks) CHECK((b.bh == a.bh + 1 - group && b.m_block == a.m_block + 1));
        else CHECK((b.bh == a.bh + 1 && b.m_block == 0));
      }
    }
  // Group 1 is the row walk's head-major order.
  const TileList list = make_tile_list(6, 1000, 128);
  for (int t = 0; t < list.n_tiles; ++t) {
    CHECK(GroupWalk::decode(list, t).bh == RowWalk<false>::decode(list, t).bh);
    CHECK(GroupWalk::decode(list, t).m_block == RowWalk<false>::decode(list, t).m_block);
  }
}
