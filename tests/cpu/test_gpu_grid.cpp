// The GPU tests' grid (tests/gpu/gpu_support.hpp), checked without a GPU: LADDER_TEST_GRID picks
// quick or full and refuses anything else, and the quick grid keeps what it promises against the
// kernels this build registers — its lengths ragged for every tile any kernel's name gives, one of
// them a whole number of each, one long enough to wrap every forward kernel's K/V ring — so that a
// step added with a new tile size or a deeper ring fails here until the quick grid covers it.
#include <cstdlib>
#include <optional>
#include <regex>
#include <set>
#include <string>

#include "common/registry.hpp"
#include "tests/catch.hpp"
#include "tests/gpu/gpu_support.hpp"

using namespace ladder;

namespace {

// LADDER_TEST_GRID set (or unset, nullopt) for one scope, then put back as it was.
class GridEnv {
 public:
  explicit GridEnv(std::optional<std::string> value) {
    if (const char* old = std::getenv("LADDER_TEST_GRID")) old_ = old;
    if (value) setenv("LADDER_TEST_GRID", value->c_str(), 1);
    else unsetenv("LADDER_TEST_GRID");
  }
  ~GridEnv() {
    if (old_) setenv("LADDER_TEST_GRID", old_->c_str(), 1);
    else unsetenv("LADDER_TEST_GRID");
  }
  GridEnv(const GridEnv&) = delete;
  GridEnv& operator=(const GridEnv&) = delete;

 private:
  std::optional<std::string> old_;
};

constexpr int kFullSeqlens[] = {1, 17, 64, 113, 128, 1000, 1023, 2048};

std::vector<VariantRef> variants_of_step(int number) {
  const Step* step = Registry::instance().find(number);
  REQUIRE(step != nullptr);
  std::vector<VariantRef> out;
  for (std::size_t i = 0; i < step->variants.size(); ++i) out.push_back({step, i});
  return out;
}

std::set<int> lengths(const std::vector<testing::HeadsSeqlen>& grid, int heads) {
  std::set<int> out;
  for (const auto& p : grid)
    if (p.heads == heads) out.insert(p.seqlen);
  return out;
}

// The tiles a kernel's name gives: "persistent_kernel<D=64,128x128,3 stages>" (query rows x keys,
// and the K/V ring's depth), "fa2_bwd_kernel<D=64,Bc=128,Br=128>", "fa_v2_2_kernel<D=64,Bc=64/32>".
struct NamedTiles {
  std::vector<int> sizes;  // every tile edge named, rows and keys
  int keys = 0;            // "RxK, S stages": the K/V block of a forward kernel with a ring
  int stages = 0;
};
NamedTiles tiles_of(const std::string& name) {
  NamedTiles t;
  static const std::regex box(R"((\d+)x(\d+))"), edge(R"(B[rc]=(\d+)(?:/(\d+))?)"), ring(R"((\d+) stages)");
  std::smatch m;
  if (std::regex_search(name, m, box)) {
    t.sizes = {std::stoi(m[1]), std::stoi(m[2])};
    t.keys = std::stoi(m[2]);
  }
  for (auto it = std::sregex_iterator(name.begin(), name.end(), edge); it != std::sregex_iterator(); ++it)
    for (std::size_t g = 1; g < it->size(); ++g)
      if ((*it)[g].matched) t.sizes.push_back(std::stoi((*it)[g]));
  if (std::regex_search(name, m, ring)) t.stages = std::stoi(m[1]);
  return t;
}

}  // namespace

TEST_CASE("LADDER_TEST_GRID: quick when unset or empty, full on request, anything else refused") {
  const auto lessons = variants_of_step(20);
  {
    GridEnv env(std::nullopt);
    CHECK_FALSE(testing::full_grid());
    CHECK(testing::long_seqlen() == 600);
  }
  {
    GridEnv env(std::string(""));
    CHECK_FALSE(testing::full_grid());
  }
  {
    GridEnv env(std::string("quick"));
    CHECK_FALSE(testing::full_grid());
    CHECK(lengths(testing::ragged_grid(kFullSeqlens, lessons), 3) ==
          std::set<int>(std::begin(testing::kQuickSeqlens), std::end(testing::kQuickSeqlens)));
  }
  {
    GridEnv env(std::string("full"));
    CHECK(testing::full_grid());
    CHECK(testing::long_seqlen() == 1000);
    const auto grid = testing::ragged_grid(kFullSeqlens, lessons);
    CHECK(grid.size() == 2 * std::size(kFullSeqlens));
    CHECK(lengths(grid, 1) == std::set<int>(std::begin(kFullSeqlens), std::end(kFullSeqlens)));
    CHECK(lengths(grid, 3) == lengths(grid, 1));
    // The peers get every combination in the full grid, as before the quick grid existed.
    CHECK(testing::ragged_grid(kFullSeqlens, variants_of_step(99)).size() == grid.size());
  }
  for (const char* typo : {"Full", "fulll", "quick ", "1"}) {
    GridEnv env(std::string{typo});
    INFO("LADDER_TEST_GRID=" << typo);
    CHECK_THROWS_AS(testing::full_grid(), std::invalid_argument);
  }
}

TEST_CASE("the quick grid: one and three heads, every length ragged for every named tile but one "
          "whole, and a length that wraps every K/V ring") {
  GridEnv env(std::nullopt);
  const auto grid = testing::ragged_grid(kFullSeqlens, variants_of_step(20));
  CHECK(lengths(grid, 1) == lengths(grid, 3));
  const std::set<int> quick = lengths(grid, 1);
  REQUIRE(quick.count(1));
  // Every tile edge the registered kernels name, and every forward kernel's ring.
  std::set<int> edges;
  std::vector<std::pair<NamedTiles, std::string>> rings;
  for (const auto& step : Registry::instance().steps()) {
    if (step.kind != Kind::Attention && step.kind != Kind::Backward) continue;
    for (const auto& v : step.variants) {
      if (!v.kernels) continue;
      for (int d : v.constraints.head_dims.empty() ? std::vector<int>{64, 128} : v.constraints.head_dims)
        for (const auto& k : v.kernels(d)) {
          const NamedTiles t = tiles_of(k.name);
          edges.insert(t.sizes.begin(), t.sizes.end());
          if (step.kind == Kind::Attention && t.stages > 0) rings.push_back({t, k.name});
        }
    }
  }
  // The names did give tiles and rings (the Hopper steps name "RxK, S stages"), so the checks
  // below check something.
  REQUIRE(edges.size() >= 4);
  REQUIRE(rings.size() >= 10);
  int whole = 0;
  for (int n : quick) {
    if (n == 1) continue;
    int divides = 0;
    for (int e : edges) divides += n % e == 0;
    INFO("N = " << n << ": a whole number of " << divides << " of the " << edges.size() << " tile edges");
    CHECK((divides == 0 || divides == int(edges.size())));  // ragged for every tile, or for none
    whole += divides == int(edges.size());
  }
  CHECK(whole == 1);
  const int longest = *quick.rbegin();
  for (const auto& [t, name] : rings) {
    INFO(name << " at N = " << longest << ": " << (longest + t.keys - 1) / t.keys << " blocks of " << t.keys
              << " keys");
    CHECK((longest + t.keys - 1) / t.keys > t.stages);
  }
}

TEST_CASE("the quick grid of a library peer: one and three heads, a short ragged length and one "
          "that wraps a ring; a lesson in the same list keeps the whole grid") {
  GridEnv env(std::nullopt);
  const auto peers = variants_of_step(99);
  REQUIRE(testing::only_peers(peers));
  const auto grid = testing::ragged_grid(kFullSeqlens, peers);
  CHECK(grid.size() < 2 * std::size(testing::kQuickSeqlens));
  CHECK_FALSE(lengths(grid, 1).empty());
  CHECK_FALSE(lengths(grid, 3).empty());
  bool short_ragged = false, wraps = false;
  for (const auto& p : grid) {
    short_ragged = short_ragged || (p.seqlen > 1 && p.seqlen < 128 && p.seqlen % 16 != 0);
    wraps = wraps || (p.seqlen + 127) / 128 >= 5;
  }
  CHECK(short_ragged);
  CHECK(wraps);
  auto mixed = peers;
  for (const auto& ref : variants_of_step(20)) mixed.push_back(ref);
  CHECK_FALSE(testing::only_peers(mixed));
  CHECK(testing::ragged_grid(kFullSeqlens, mixed).size() == 2 * std::size(testing::kQuickSeqlens));
  CHECK_FALSE(testing::only_peers({}));
}

TEST_CASE("each dtype's grid runs on the variants that declare it: fp8 on fp8 variants only") {
  auto launch = [](const AttentionArgs&, cudaStream_t) {};
  Step step = attention_step(45, "fp8_forward", "FP8 forward");
  step.add(attention_variant("fp16", "", launch))
      .add(attention_variant("both", "", launch).for_dtypes({DType::F16, DType::BF16}))
      .add(attention_variant("fp8", "", launch).for_dtypes({DType::E4M3}))
      .add(attention_variant("all", "", launch).for_dtypes({DType::BF16, DType::E4M3}));
  std::vector<VariantRef> refs;
  for (std::size_t i = 0; i < step.variants.size(); ++i) refs.push_back({&step, i});
  auto names = [](const std::vector<VariantRef>& v) {
    std::vector<std::string> out;
    for (const auto& r : v) out.push_back(r.variant().name);
    return out;
  };
  CHECK(names(testing::declaring(refs, DType::F16)) == std::vector<std::string>{"fp16", "both"});
  CHECK(names(testing::declaring(refs, DType::BF16)) == std::vector<std::string>{"both", "all"});
  CHECK(names(testing::declaring(refs, DType::E4M3)) == std::vector<std::string>{"fp8", "all"});
  // An fp8 grid gets the whole ragged grid (it is a lesson's, not a peer's).
  GridEnv env(std::nullopt);
  CHECK(testing::ragged_grid(kFullSeqlens, testing::declaring(refs, DType::E4M3)).size() ==
        2 * std::size(testing::kQuickSeqlens));
}
