// Online softmax, the invariant every FlashAttention step relies on.
#include <cmath>
#include <random>
#include <vector>

#include "common/reference.hpp"
#include "tests/catch.hpp"

using namespace ladder;

TEST_CASE("online softmax of [2, 1, 0] as [2, 1] then [0]", "[online-softmax]") {
  const std::vector<double> x = {2, 1, 0};
  OnlineSoftmaxState state;
  online_softmax_update(state, std::span<const double>(x).first(2));
  CHECK(state.m == 2.0);
  CHECK(state.l == Approx(1.0 + std::exp(-1.0)).epsilon(1e-15));
  online_softmax_update(state, std::span<const double>(x).subspan(2));
  CHECK(state.m == 2.0);  // 0 does not raise the maximum, so nothing is rescaled
  CHECK(state.l == Approx(1.0 + std::exp(-1.0) + std::exp(-2.0)).epsilon(1e-15));

  const std::vector<int> blocks = {2, 1};
  const auto p = online_softmax(x, blocks);
  const auto one_shot = softmax(x);
  for (int j = 0; j < 3; ++j) CHECK(p[j] == Approx(one_shot[j]).epsilon(1e-14));
  CHECK(one_shot[0] == Approx(1.0 / (1.0 + std::exp(-1.0) + std::exp(-2.0))).epsilon(1e-14));
}

TEST_CASE("a later, larger block rescales the history", "[online-softmax]") {
  OnlineSoftmaxState state;
  const std::vector<double> first = {0, 0}, second = {3};
  online_softmax_update(state, first);
  CHECK(state.l == 2.0);
  online_softmax_update(state, second);
  CHECK(state.m == 3.0);
  CHECK(state.l == Approx(2.0 * std::exp(-3.0) + 1.0).epsilon(1e-15));
}

TEST_CASE("online softmax equals one-shot softmax for random blockings", "[online-softmax]") {
  std::mt19937 rng(12345);
  std::normal_distribution<double> logit(0.0, 8.0);  // wide logits: rescaling matters
  for (int trial = 0; trial < 200; ++trial) {
    const int n = 1 + int(rng() % 300);
    std::vector<double> x(n);
    for (auto& v : x) v = logit(rng);
    std::vector<int> blocks;
    for (int left = n; left > 0;) {
      const int size = 1 + int(rng() % 64);
      blocks.push_back(size);
      left -= size;
    }
    const auto online = online_softmax(x, blocks);
    const auto exact = softmax(x);
    for (int j = 0; j < n; ++j) REQUIRE(online[j] == Approx(exact[j]).margin(1e-15).epsilon(1e-12));
  }
}

TEST_CASE("a block of only -inf leaves the state alone", "[online-softmax]") {
  OnlineSoftmaxState state;
  const std::vector<double> masked = {-INFINITY, -INFINITY};
  online_softmax_update(state, masked);
  CHECK(state.l == 0.0);
  CHECK(std::isinf(state.m));
  const std::vector<double> real = {1.0};
  online_softmax_update(state, real);
  CHECK(state.m == 1.0);
  CHECK(state.l == 1.0);  // no NaN from exp(-inf - -inf)
}
