// The test suite's reference cache (common/reference_cache.hpp): a hit returns exactly what was
// computed, another key computes again, a torn entry is recomputed, and without the variable
// nothing is cached.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "common/build_info.hpp"
#include "common/reference_cache.hpp"
#include "tests/catch.hpp"

using namespace ladder;

namespace {

AttentionRows sample(double x) {
  AttentionRows r;
  r.rows = {3, 7, 11};
  r.o = {x, -x, 0.5 * x, 1e-300, -0.0, 42.0};
  r.lse = {x + 1, x + 2, x + 3};
  r.lse_at = {3, 7, 11};
  return r;
}

void require_same(const AttentionRows& a, const AttentionRows& b) {
  REQUIRE(a.rows == b.rows);
  REQUIRE(a.o == b.o);
  REQUIRE(a.lse == b.lse);
  REQUIRE(a.lse_at == b.lse_at);
}

struct ScratchDir {
  std::filesystem::path path = std::filesystem::temp_directory_path() /
                               ("ladder-refcache-" + std::to_string(::getpid()));
  ScratchDir() { setenv("LADDER_REFERENCE_CACHE", path.c_str(), 1); }
  ~ScratchDir() {
    unsetenv("LADDER_REFERENCE_CACHE");
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

}  // namespace

TEST_CASE("the reference cache returns what was computed, once per key", "[reference][cache]") {
  // The cache keys on the build's tree hash; a build without one (no Python at build time) has
  // the cache off, which the last section checks instead.
  ScratchDir dir;
  int computed = 0;
  auto compute = [&](double x) {
    return [&computed, x] {
      ++computed;
      return sample(x);
    };
  };
  AttentionShape shape{.batch = 1, .heads = 3, .seqlen = 113, .head_dim = 64, .causal = true};
  const std::uint64_t key = KeyHash().shape(shape).get();
  shape.causal = false;
  const std::uint64_t other = KeyHash().shape(shape).get();
  REQUIRE(key != other);

  if (build_info().tree_hash.empty()) {
    cached_reference(key, compute(1.5));
    cached_reference(key, compute(1.5));
    CHECK(computed == 2);  // off: every call computes
    return;
  }
  const AttentionRows first = cached_reference(key, compute(1.5));
  const AttentionRows again = cached_reference(key, compute(9.0));  // a hit: compute is not called
  CHECK(computed == 1);
  require_same(first, sample(1.5));
  require_same(again, sample(1.5));

  cached_reference(other, compute(2.0));
  CHECK(computed == 2);

  SECTION("a torn entry is recomputed, not read") {
    for (const auto& e : std::filesystem::directory_iterator(dir.path)) {
      std::filesystem::resize_file(e.path(), std::filesystem::file_size(e.path()) - 5);
    }
    const AttentionRows fresh = cached_reference(key, compute(3.0));
    CHECK(computed == 3);
    require_same(fresh, sample(3.0));
  }
  SECTION("a stale lock of a dead process does not block forever") {
    // The lock of a key whose owner died an hour ago: the next caller takes it over and computes
    // (a fresh lock would make it wait for the owner's entry instead).
    const std::uint64_t orphan = KeyHash().value(77).get();
    char name[32];
    std::snprintf(name, sizeof name, "%016llx.lock", static_cast<unsigned long long>(orphan));
    const auto lock = dir.path / name;
    std::ofstream(lock) << "";
    std::filesystem::last_write_time(lock, std::filesystem::file_time_type::clock::now() - std::chrono::hours(1));
    const AttentionRows taken = cached_reference(orphan, compute(4.0));
    CHECK(computed == 3);
    require_same(taken, sample(4.0));
    CHECK_FALSE(std::filesystem::exists(lock));
  }
}

TEST_CASE("without LADDER_REFERENCE_CACHE nothing is cached", "[reference][cache]") {
  unsetenv("LADDER_REFERENCE_CACHE");
  int computed = 0;
  auto compute = [&] {
    ++computed;
    return sample(1.0);
  };
  cached_reference(1234, compute);
  cached_reference(1234, compute);
  CHECK(computed == 2);
}
