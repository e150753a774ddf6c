// The polynomial 2^x of step 32 (common/exp2_poly.hpp), measured on the header's own arithmetic
// (host and device compile the same operations; fmaf is correctly rounded on both, and the host's
// floor is the device's FADD.RM trick to the bit).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "common/exp2_poly.hpp"
#include "tests/catch.hpp"

namespace {

constexpr double kUnitRoundoff = 0x1p-24;  // float's
constexpr double kFp16UnitRoundoff = 0x1p-11;
constexpr double kBf16UnitRoundoff = 0x1p-8;
// The bound: the real cubic's minimax error, plus the float evaluation: three FMAs on positive
// terms (each rounding at most u of a partial sum that is at most p) and, for −1 < x < 0, the
// rounding of f = 1 + x (at most u of f, scaled by f·p'(f)/p(f) < 1): at most 4u in all.
constexpr double kBound = double(ladder::kExp2CubicFitError) + 4 * kUnitRoundoff;
constexpr int kMinNormalExp = -126;  // 2^-126: below it the result is a subnormal
constexpr int kSweepTop = 8;         // the lazy rescale's arguments reach τ = 8
constexpr int kSamplesPerUnit = 1 << 16;

double rel_error(float x, ladder::Exp2Cubic c = ladder::exp2_cubic()) {
  const double exact = std::exp2(double(x));
  return std::abs(double(ladder::exp2_poly(x, c)) - exact) / exact;
}

// Every integer's two neighbours and kSamplesPerUnit evenly spaced points of each unit interval
// [k, k + 1) for k in [kMinNormalExp, kSweepTop), ascending.
std::vector<float> sweep() {
  std::vector<float> xs;
  for (int k = kMinNormalExp; k < kSweepTop; ++k) {
    xs.push_back(std::nextafter(float(k), -INFINITY));
    for (int i = 0; i < kSamplesPerUnit; ++i) xs.push_back(float(k + double(i) / kSamplesPerUnit));
    xs.push_back(std::nextafter(float(k), INFINITY));
  }
  std::vector<float> sorted;
  for (float x : xs)
    if (x >= float(kMinNormalExp) && (sorted.empty() || x > sorted.back())) sorted.push_back(x);
  return sorted;
}

double max_rel_error(const std::vector<float>& xs, ladder::Exp2Cubic c) {
  double worst = 0;
  for (float x : xs) worst = std::max(worst, rel_error(x, c));
  return worst;
}

}  // namespace

TEST_CASE("exp2_poly: relative error below its derived bound on [-126, 8]", "[exp2_poly]") {
  const auto xs = sweep();
  const double worst = max_rel_error(xs, ladder::exp2_cubic());
  INFO("max relative error " << worst << ", bound " << kBound);
  CHECK(worst <= kBound);
  // The fit is tight: the sweep reaches the minimax level, not some fraction of it.
  CHECK(worst >= 0.95 * double(ladder::kExp2CubicFitError));
  // Against the formats P is stored in: a fifth of fp16's rounding, a fortieth of bf16's.
  CHECK(kBound < 0.25 * kFp16UnitRoundoff);
  CHECK(kBound < 0.03 * kBf16UnitRoundoff);
}

TEST_CASE("exp2_poly: every reduced argument of one binade, exhaustively", "[exp2_poly]") {
  // All floats in [-2, -1]: j = -2 and every f in [0, 1] that a float of this binade can give.
  float prev = 0.f;
  double worst = 0;
  bool monotone = true;
  for (float x = -2.f; x <= -1.f; x = std::nextafter(x, INFINITY)) {
    worst = std::max(worst, rel_error(x));
    const float y = ladder::exp2_poly(x);
    if (y < prev) monotone = false;
    prev = y;
  }
  CHECK(worst <= kBound);
  CHECK(monotone);
}

TEST_CASE("exp2_poly: exact at the integers, 0 at -inf, monotone", "[exp2_poly]") {
  CHECK(ladder::exp2_poly(0.f) == 1.f);
  for (int k = kMinNormalExp; k <= kSweepTop; ++k) {
    INFO("k = " << k);
    CHECK(ladder::exp2_poly(float(k)) == std::ldexp(1.f, k));
  }
  const float zero = ladder::exp2_poly(-INFINITY);
  CHECK(zero == 0.f);
  CHECK(!std::signbit(zero));
  CHECK(ladder::exp2_poly(-127.f) == 0.f);
  CHECK(ladder::exp2_poly(-1000.f) == 0.f);
  CHECK(ladder::exp2_poly(-std::numeric_limits<float>::max()) == 0.f);
  // Below 2^-126 the result is a subnormal within 2^-126 of 2^x (ex2.approx.ftz gives 0 there).
  for (float x = -127.f; x < -126.f; x += 1.f / 1024) {
    const float y = ladder::exp2_poly(x);
    CHECK(y >= 0.f);
    CHECK(std::abs(double(y) - std::exp2(double(x))) <= 0x1p-126);
  }
  // Monotone over the whole sweep (the pieces meet at the integers because p(1) = 2 exactly).
  const auto xs = sweep();
  float prev = 0.f;
  std::size_t decreases = 0;
  for (float x : xs) {
    const float y = ladder::exp2_poly(x);
    if (y < prev) ++decreases;
    prev = y;
  }
  CHECK(decreases == 0);
}

TEST_CASE("exp2_poly: the bound catches a perturbed coefficient", "[exp2_poly]") {
  // A planted bug: each coefficient off by one part in a thousand (a digit dropped in the
  // header) must break the bound, or the bound tests nothing.
  const auto xs = sweep();
  const ladder::Exp2Cubic c = ladder::exp2_cubic();
  constexpr float kPerturbation = 1e-3f;
  const ladder::Exp2Cubic wrong[] = {
      {c.c1 * (1 + kPerturbation), c.c2, c.c3},
      {c.c1, c.c2 * (1 + kPerturbation), c.c3},
      {c.c1, c.c2, c.c3 * (1 + kPerturbation)},
      {c.c1, c.c2, c.c3 * (1 - kPerturbation)},
  };
  for (const auto& w : wrong) {
    INFO("c1 " << w.c1 << " c2 " << w.c2 << " c3 " << w.c3);
    CHECK(max_rel_error(xs, w) > kBound);
  }
}
