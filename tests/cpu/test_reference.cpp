// The CPU references against cases computed by hand.
#include <algorithm>
#include <cmath>
#include <vector>

#include "common/dtype.hpp"
#include "common/reference.hpp"
#include "tests/catch.hpp"

using namespace ladder;

TEST_CASE("attention reference, one query and two keys, by hand", "[reference]") {
  // D = 8 (the smallest legal head dimension); only the first component is non-zero, so the
  // logits are q·k·scale = 2·{1, 0}·(1/sqrt 8).
  AttentionShape s{.batch = 1, .heads = 1, .seqlen = 2, .head_dim = 8, .causal = false};
  std::vector<float> q(16, 0.f), k(16, 0.f), v(16, 0.f);
  q[0] = 2.f;           // query 0
  q[8] = 2.f;           // query 1 (same)
  k[0] = 1.f;           // key 0, key 1 is zero
  v[0] = 10.f;          // value 0 = (10, 0, ...)
  v[8 + 1] = 4.f;       // value 1 = (0, 4, 0, ...)
  const std::vector<std::int64_t> rows = {0, 1};
  const auto r = attention_reference(s, q, k, v, rows, Precision::Fp64);

  const double l0 = 2.0 / std::sqrt(8.0);
  const double p0 = std::exp(l0) / (std::exp(l0) + 1.0), p1 = 1.0 - p0;
  CHECK(r.o[0] == Approx(10.0 * p0).epsilon(1e-12));
  CHECK(r.o[1] == Approx(4.0 * p1).epsilon(1e-12));
  CHECK(r.o[2] == 0.0);
  CHECK(r.lse[0] == Approx(std::log(std::exp(l0) + 1.0)).epsilon(1e-12));

  SECTION("causal: the first query sees only the first key") {
    s.causal = true;
    const auto c = attention_reference(s, q, k, v, rows, Precision::Fp64);
    CHECK(c.o[0] == Approx(10.0).epsilon(1e-12));  // softmax over one key is 1
    CHECK(c.o[1] == 0.0);
    CHECK(c.lse[0] == Approx(l0).epsilon(1e-12));
    CHECK(c.o[8] == Approx(10.0 * p0).epsilon(1e-12));  // the second query sees both
  }
}

TEST_CASE("the low-precision reference is close to fp64 but not equal", "[reference]") {
  AttentionShape s{.batch = 1, .heads = 2, .seqlen = 37, .head_dim = 16, .causal = true};
  const std::size_t n = std::size_t(s.elements());
  std::vector<float> q(n), k(n), v(n);
  for (std::size_t i = 0; i < n; ++i) {
    q[i] = std::sin(0.37 * double(i));
    k[i] = std::cos(0.11 * double(i));
    v[i] = std::sin(0.05 * double(i) + 1.0);
  }
  const auto rows = select_rows(s.rows(), s.seqlen, 1000, 1);
  REQUIRE(rows.size() == std::size_t(s.rows()));
  const auto hi = attention_reference(s, q, k, v, rows, Precision::Fp64);
  const auto lo = attention_reference(s, q, k, v, rows, Precision::Low);
  double max_diff = 0;
  for (std::size_t i = 0; i < hi.o.size(); ++i) max_diff = std::max(max_diff, std::fabs(hi.o[i] - lo.o[i]));
  CHECK(max_diff > 0);      // fp16 rounding of P and O happened
  CHECK(max_diff < 2e-3);   // and is of fp16 size
}

TEST_CASE("element types round as the GPU does, and the low-precision reference follows the problem's",
          "[reference][bf16]") {
  CHECK(parse_dtype("bf16") == DType::BF16);
  CHECK(parse_dtype("fp16") == DType::F16);
  CHECK_FALSE(parse_dtype("fp32"));
  // 1 + 2^-8 is an fp16 value (10 fraction bits) but halfway between two bf16 ones (7): it rounds
  // to even, 1.0.
  const float x = 1.0f + std::ldexp(1.0f, -8);
  CHECK(round_to(DType::F16, x) == x);
  CHECK(round_to(DType::BF16, x) == 1.0f);
  CHECK(round_to(DType::BF16, 1.0f + 3 * std::ldexp(1.0f, -8)) == 1.0f + std::ldexp(1.0f, -6));
  CHECK(round_to(DType::BF16, 1e30f) == Approx(1e30f).epsilon(1e-2));  // fp32's range
  CHECK(std::isinf(round_to(DType::F16, 1e30f)));                             // fp16 overflows
  CHECK(std::isnan(from_bits(DType::BF16, 0xFFFF)));  // the harness's poison is NaN in both
  CHECK(std::isnan(from_bits(DType::F16, 0xFFFF)));

  AttentionShape s{.batch = 1, .heads = 1, .seqlen = 64, .head_dim = 16};
  const std::size_t n = std::size_t(s.elements());
  std::vector<float> q(n), k(n), v(n);
  for (std::size_t i = 0; i < n; ++i) {
    q[i] = round_to(DType::BF16, float(std::sin(0.37 * double(i))));
    k[i] = round_to(DType::BF16, float(std::cos(0.11 * double(i))));
    v[i] = round_to(DType::BF16, float(std::sin(0.05 * double(i) + 1.0)));
  }
  const auto rows = select_rows(s.rows(), s.seqlen, 1000, 1);
  const auto hi = attention_reference(s, q, k, v, rows, Precision::Fp64);
  const auto lo16 = attention_reference(s, q, k, v, rows, Precision::Low);
  s.dtype = DType::BF16;
  const auto lobf = attention_reference(s, q, k, v, rows, Precision::Low);
  double err16 = 0, errbf = 0;
  for (std::size_t i = 0; i < hi.o.size(); ++i) {
    err16 = std::max(err16, std::fabs(hi.o[i] - lo16.o[i]));
    errbf = std::max(errbf, std::fabs(hi.o[i] - lobf.o[i]));
    CHECK(float(lobf.o[i]) == round_to(DType::BF16, float(lobf.o[i])));  // outputs are bf16 values
  }
  CHECK(errbf > 3 * err16);  // three fewer fraction bits: about 8 times the error
}

TEST_CASE("matrix product reference by hand", "[reference]") {
  const MatmulShape s{.m = 2, .n = 2, .k = 3};
  const std::vector<float> a = {1, 2, 3, 4, 5, 6}, b = {7, 8, 9, 10, 11, 12};
  const std::vector<std::int64_t> rows = {0, 1};
  const auto c = matmul_reference(s, a, b, rows, Precision::Fp64);
  CHECK(c.c == std::vector<double>{58, 64, 139, 154});
  const auto c32 = matmul_reference(s, a, b, rows, Precision::Low);
  CHECK(c32.c == std::vector<double>{58, 64, 139, 154});  // small integers are exact in fp32
}

TEST_CASE("reduction reference: fp32 in order loses what fp64 keeps", "[reference]") {
  const std::vector<float> x = {1e8f, 1.f, -1e8f, 1.f};
  CHECK(reduction_reference(x, Precision::Fp64) == 2.0);
  CHECK(reduction_reference(x, Precision::Low) == 1.0);  // 1e8 + 1 rounds back to 1e8 in fp32
  CHECK(sum_of_magnitudes(x) == Approx(2e8 + 2));
}

TEST_CASE("row selection: everything when small, a sample with both ends when large", "[reference]") {
  const auto all = select_rows(10, 5, 100, 7);
  CHECK(all.size() == 10);
  const auto some = select_rows(1 << 20, 1 << 18, 64, 7);  // 4 heads of 2048 tiles: coverage wins
  CHECK(some.front() == 0);
  CHECK(some.back() == (1 << 20) - 1);
  CHECK(std::is_sorted(some.begin(), some.end()));
  CHECK(std::adjacent_find(some.begin(), some.end()) == some.end());
  CHECK(select_rows(1 << 20, 1 << 18, 64, 7) == some);  // seeded: the same sample every time
  CHECK(select_rows(1 << 20, 1 << 18, 64, 8) != some);
  const auto budget = select_rows(1 << 20, 1 << 18, 20000, 7);  // more than the tiles: topped up
  CHECK(budget.size() == 20000);
}

TEST_CASE("row selection covers every (head, 128-row tile) at any shape", "[reference]") {
  struct Case { std::int64_t heads, n, budget; };
  for (const Case c : {Case{32, 4096, 2048}, Case{16, 1024, 256}, Case{6 * 9, 4224, 2048},
                       Case{3, 1000, 16}, Case{1, 16384, 2048}, Case{64, 1024, 512}}) {
    const auto rows = select_rows(c.heads * c.n, c.n, c.budget, 20261129);
    const std::int64_t tiles_per_head = (c.n + kCoverageTileRows - 1) / kCoverageTileRows;
    std::vector<int> seen(std::size_t(c.heads * tiles_per_head), 0);
    for (auto r : rows) ++seen[std::size_t((r / c.n) * tiles_per_head + (r % c.n) / kCoverageTileRows)];
    INFO("heads " << c.heads << " N " << c.n << " budget " << c.budget);
    CHECK(std::count(seen.begin(), seen.end(), 0) == 0);
    CHECK(std::int64_t(rows.size()) >= std::min(c.budget, c.heads * c.n));
  }
}
