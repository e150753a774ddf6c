// What the CPU references share (common/reference.cpp, the forward's and the tensors' layouts;
// common/reference_backward.cpp, the backward's): the rows spread over the cores, and one fp64
// attention row. Internal to the references; reference.hpp is the interface.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <thread>
#include <vector>

#include "common/problem.hpp"

namespace ladder::reference_detail {

// Run fn(i) for i in [0, count) on all cores; results go to disjoint slots, so no locking.
template <typename Fn>
void parallel_rows(std::size_t count, Fn fn) {
  const std::size_t threads = std::clamp<std::size_t>(std::thread::hardware_concurrency(), 1, 64);
  if (count < 4 || threads == 1) {
    for (std::size_t i = 0; i < count; ++i) fn(i);
    return;
  }
  std::vector<std::thread> pool;
  for (std::size_t t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      for (std::size_t i = t; i < count; i += threads) fn(i);
    });
  for (auto& th : pool) th.join();
}

// One query row against keys 0 .. n_keys - 1, key j at k_head + j · key_stride (V alike):
// key_stride is D in the dense layouts and Hkv · D in the packed variable-length one. O (D
// values) and the row's log-sum-exp, in fp64. With `flip_floor`, also the fp8 row's flip floor
// (AttentionRows::floor): one rounding of P to the neighbouring e4m3 code moves O by
// p̂_j · (that code's gap) · v_j (the row sum is taken from the unrounded P, so only the numerator
// moves); the largest such move over the row's keys, with the largest gap (kE4M3RoundingStep).
void attention_row_fp64(const AttentionShape& s, const float* q_row, const float* k_head,
                        const float* v_head, std::int64_t key_stride, int n_keys, double* o,
                        double* lse, double* flip_floor = nullptr);

}  // namespace ladder::reference_detail
