// A disk cache of the fp64 references, for the test suite.
//
// Every GPU test entry (one per step) checks its variants on the same grid of shapes with the same
// seeds, so every entry would recompute the same CPU references: most of the suite's time. With
// LADDER_REFERENCE_CACHE naming a folder (scripts/test.sh sets it, inside the build folder), the
// first process to need a reference computes it and stores it; the others read it.
//
// Hazards, and what answers them:
//   * a stale entry: the key hashes every input the reference reads (shape, rows, precision and
//     the input values' bits) and the build's tree hash (build_info.hpp), which changes with any
//     edit of the code that computes it; without a tree hash the cache is off;
//   * parallel test processes that need the same entry at once: the first takes a lock file and
//     computes, the others wait for the entry (or compute it themselves when the lock is older
//     than kStaleLock, its owner having died);
//   * a torn write: an entry is written to a temporary name and renamed into place, and read back
//     only if its size matches what its header announces.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "common/problem.hpp"
#include "common/reference.hpp"

namespace ladder {

// FNV-1a over bytes, chained: the key of a cache entry.
class KeyHash {
 public:
  KeyHash& bytes(const void* data, std::size_t size);
  template <class T>
  KeyHash& values(std::span<const T> s) { return bytes(s.data(), s.size_bytes()); }
  template <class T>
  KeyHash& value(const T& v) { return bytes(&v, sizeof v); }
  KeyHash& shape(const AttentionShape& s);
  std::uint64_t get() const { return state_; }

 private:
  std::uint64_t state_ = 0xcbf29ce484222325ull;
};

// The cached value of compute() under `key`, or compute()'s when the cache is off or unreadable.
AttentionRows cached_reference(std::uint64_t key, const std::function<AttentionRows()>& compute);
BackwardRows cached_reference(std::uint64_t key, const std::function<BackwardRows()>& compute);

}  // namespace ladder
