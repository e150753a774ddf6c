// A CPU model of step 32's online softmax on one row (fp32, blocks of 128 keys, the kernel's own
// decision ladder::must_raise_max), with and without the lazy rescale: the normalised rows agree
// within fp32 rounding, the lazy one really skips rescales and keeps P ≤ 2^τ, and a planted bug
// (the new max in the numerator only) is caught.
#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "common/lazy_rescale.hpp"
#include "tests/catch.hpp"

namespace {

constexpr int kBlockN = 128;  // step 32's keys per block
constexpr int kDim = 8;       // V columns: enough to see a wrong weighting
constexpr float kScaleLog2 = 0.125f * 1.44269504f;  // 1/sqrt(64) · log2 e

enum class Mode { Eager, Lazy, LazyNumeratorBug };

struct RowResult {
  std::vector<double> out;  // O / l
  int rescales = 0;         // blocks after the first whose O was rescaled
  float max_p = 0;
};

// The kernel's loop for one row: block max, the reference decision, P against the reference, l
// and O rescaled by the same factor. The bug computes O's P against the block's true running max
// while l (and the kept reference) go on with the old one.
RowResult model_row(const std::vector<float>& s, const std::vector<float>& v, Mode mode) {
  const int n = int(s.size());
  float m_ref = -INFINITY, m_true = -INFINITY, l = 0;
  std::vector<float> o(kDim, 0.f);
  RowResult r;
  for (int k0 = 0, block = 0; k0 < n; k0 += kBlockN, ++block) {
    const int k1 = std::min(n, k0 + kBlockN);
    float m_blk = -INFINITY;
    for (int k = k0; k < k1; ++k) m_blk = std::max(m_blk, s[k]);
    const bool moved = mode == Mode::Eager ? m_blk > m_ref : ladder::must_raise_max(m_ref, m_blk, kScaleLog2);
    const float m = moved ? m_blk : m_ref;
    const float m_scaled = (m == -INFINITY) ? 0.f : m * kScaleLog2;
    const float rescale = std::exp2(m_ref * kScaleLog2 - m_scaled);
    m_ref = m;
    m_true = std::max(m_true, m_blk);
    const float m_num = mode == Mode::LazyNumeratorBug ? m_true * kScaleLog2 : m_scaled;
    if (moved) {
      if (block > 0) ++r.rescales;
      for (float& x : o) x *= rescale;
    }
    float sum = 0;
    for (int k = k0; k < k1; ++k) {
      const float p = std::exp2(std::fma(s[k], kScaleLog2, -m_scaled));
      const float p_num = std::exp2(std::fma(s[k], kScaleLog2, -m_num));
      r.max_p = std::max(r.max_p, p);
      sum += p;
      for (int d = 0; d < kDim; ++d) o[d] += p_num * v[std::size_t(k) * kDim + d];
    }
    l = l * rescale + sum;
  }
  for (float x : o) r.out.push_back(double(x) / l);
  return r;
}

// Scores that drift upward (so the max keeps moving, by less than 2^8 at a time as well as more),
// with large logits: N(0, σ) plus a ramp.
std::vector<float> random_row(std::mt19937& rng, int n, float sigma, float ramp) {
  std::normal_distribution<float> normal(0.f, sigma);
  std::vector<float> s(n);
  for (int k = 0; k < n; ++k) s[k] = normal(rng) + ramp * float(k) / float(n);
  return s;
}

double max_rel_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double worst = 0, scale = 0;
  for (double x : b) scale = std::max(scale, std::abs(x));
  for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]) / scale);
  return worst;
}

}  // namespace

TEST_CASE("lazy rescale: the same normalised rows as the eager one, fewer rescales", "[lazy_rescale]") {
  std::mt19937 rng(20261201);
  std::uniform_real_distribution<float> uniform(-1.f, 1.f);
  constexpr float kRowTolerance = 1e-5f;  // fp32 sums of up to 8192 terms, O(sqrt(N)·u) in practice
  constexpr float kPRounding = 1e-4f;     // m·scale rounds by |m·scale|·2^-24: ~2e-5 at logits of 2000
  int eager_rescales = 0, lazy_rescales = 0;
  for (int n : {1, 127, 128, 129, 1000, 4096, 8191}) {
    for (float sigma : {1.f, 8.f, 40.f}) {
      for (float ramp : {0.f, 100.f, 2000.f}) {
        const auto s = random_row(rng, n, sigma, ramp);
        std::vector<float> v(std::size_t(n) * kDim);
        for (float& x : v) x = uniform(rng);
        const RowResult eager = model_row(s, v, Mode::Eager);
        const RowResult lazy = model_row(s, v, Mode::Lazy);
        INFO("n " << n << " sigma " << sigma << " ramp " << ramp);
        CHECK(max_rel_diff(lazy.out, eager.out) <= kRowTolerance);
        // P ≤ 1 (eager) and ≤ 2^τ (lazy), up to the rounding of m·scale (relative to the logits, not to P).
        CHECK(eager.max_p <= 1.f + kPRounding);
        CHECK(lazy.max_p <= std::exp2(ladder::kLazyRescaleThresholdLog2) * (1.f + kPRounding));
        CHECK(lazy.rescales <= eager.rescales);
        eager_rescales += eager.rescales;
        lazy_rescales += lazy.rescales;
      }
    }
  }
  // The rows do move their max: the eager model rescales, the lazy one skips most of them.
  CHECK(eager_rescales > 100);
  CHECK(lazy_rescales < eager_rescales / 2);
}

TEST_CASE("lazy rescale: the decision's edge cases", "[lazy_rescale]") {
  const float tau = ladder::kLazyRescaleThresholdLog2;
  CHECK(ladder::must_raise_max(-INFINITY, 0.f, kScaleLog2));             // first visible key
  CHECK(!ladder::must_raise_max(-INFINITY, -INFINITY, kScaleLog2));      // nothing visible yet
  CHECK(!ladder::must_raise_max(3.f, -INFINITY, kScaleLog2));            // a fully masked block
  CHECK(!ladder::must_raise_max(0.f, tau / kScaleLog2 * 0.99f, kScaleLog2));  // within 2^τ: kept
  CHECK(ladder::must_raise_max(0.f, tau / kScaleLog2 * 1.01f, kScaleLog2));   // past it: moved
  CHECK(!ladder::must_raise_max(5.f, 1.f, kScaleLog2));                  // a lower block max
}

TEST_CASE("lazy rescale: the new max in the numerator only is caught", "[lazy_rescale]") {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> uniform(-1.f, 1.f);
  const auto s = random_row(rng, 4096, 8.f, 100.f);
  std::vector<float> v(std::size_t(4096) * kDim);
  for (float& x : v) x = uniform(rng);
  const RowResult eager = model_row(s, v, Mode::Eager);
  const RowResult bug = model_row(s, v, Mode::LazyNumeratorBug);
  CHECK(max_rel_diff(bug.out, eager.out) > 1e-2);
}
