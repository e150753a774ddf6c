// Lab 03's checker (given, do not edit): your update() on the puzzle, on the case the puzzle does
// not exercise, on random chunkings, and on logits whose exponentials overflow. CPU only.
#include <fmt/format.h>

#include <cmath>
#include <random>
#include <vector>

#include "labs/L03_online_softmax/online_softmax.hpp"
#include "labs/common/lab.hpp"

namespace {

using lab03::State;

// One-shot stable softmax in double precision: y and the probabilities.
struct Direct {
  double y = 0;
  std::vector<double> p;
};
Direct direct(const std::vector<float>& x, const std::vector<float>& v) {
  double m = -INFINITY, l = 0, o = 0;
  for (float xi : x) m = std::max(m, double(xi));
  for (std::size_t j = 0; j < x.size(); ++j) {
    l += std::exp(x[j] - m);
    o += std::exp(x[j] - m) * v[j];
  }
  Direct d{o / l, {}};
  for (float xi : x) d.p.push_back(std::exp(xi - m) / l);
  return d;
}

// Folds x (and v) in chunks of the given sizes.
State fold(const std::vector<float>& x, const std::vector<float>& v, const std::vector<std::size_t>& chunks) {
  State s;
  std::size_t at = 0;
  for (std::size_t c : chunks) {
    s = lab03::update(s, std::span(x).subspan(at, c), std::span(v).subspan(at, c));
    at += c;
  }
  return s;
}

bool close(double got, double want, double rel = 2e-5) {
  return std::isfinite(got) && std::abs(got - want) <= rel * std::max(1.0, std::abs(want));
}

void expect(lab::Verdict& verdict, bool ok, const std::string& what) {
  fmt::print("  {}  {}\n", ok ? " ok " : "FAIL", what);
  if (!ok) verdict.fail(what);
}

}  // namespace

int main(int argc, char** argv) {
  lab::parse(argc, argv, "L03", "online softmax: the [2, 1, 0] puzzle (CPU)");
  lab::Verdict verdict("L03");

  // ---- The puzzle: [2, 1, 0] as [2, 1] then [0] ------------------------------------------------
  const std::vector<float> x = {2.f, 1.f, 0.f}, v = {1.f, 10.f, 100.f};
  fmt::print("\nthe puzzle: logits [2, 1, 0] folded as [2, 1], then [0] (values v = [1, 10, 100])\n");
  const State s1 = lab03::update({}, std::span(x).first(2), std::span(v).first(2));
  fmt::print("  after [2, 1]:  m = {:.6f}  l = {:.6f}   (puzzle: m = 2, l = 1 + e^-1 = {:.6f})\n", s1.m, s1.l, 1 + std::exp(-1.0));
  expect(verdict, s1.m == 2.f && close(s1.l, 1 + std::exp(-1.0)), "state after the first chunk [2, 1]");
  const State s2 = lab03::update(s1, std::span(x).last(1), std::span(v).last(1));
  fmt::print("  after [0]:     m = {:.6f}  l = {:.6f}   (puzzle: m' = 2, l' = 1 + e^-1 + e^-2 = {:.6f})\n", s2.m, s2.l,
             1 + std::exp(-1.0) + std::exp(-2.0));
  expect(verdict, s2.m == 2.f && close(s2.l, 1 + std::exp(-1.0) + std::exp(-2.0)), "state after the second chunk [0]");
  const Direct d = direct(x, v);
  fmt::print("  probabilities: [{:.6f}, {:.6f}, {:.6f}]   one-shot: [{:.6f}, {:.6f}, {:.6f}]\n",
             lab03::probability(s2, x[0]), lab03::probability(s2, x[1]), lab03::probability(s2, x[2]), d.p[0], d.p[1], d.p[2]);
  bool probs = true;
  for (int j = 0; j < 3; ++j) probs = probs && close(lab03::probability(s2, x[j]), d.p[j]);
  expect(verdict, probs, "probabilities equal the one-shot softmax");
  expect(verdict, close(lab03::result(s2), d.y), fmt::format("y = o/l = {:.6f}, one-shot {:.6f}", lab03::result(s2), d.y));

  // ---- The order the puzzle does not test: the maximum arrives late ------------------------------
  const std::vector<float> rising = {0.f, 1.f, 2.f};
  fmt::print("\nthe same logits rising, [0] then [1, 2]: the maximum changes between chunks\n");
  const State r = fold(rising, v, {1, 2});
  const Direct dr = direct(rising, v);
  fmt::print("  m = {:.6f}  l = {:.6f}  y = {:.6f}   one-shot: l = {:.6f} (against m = 2), y = {:.6f}\n", r.m, r.l,
             lab03::result(r), 1 + std::exp(-1.0) + std::exp(-2.0), dr.y);
  expect(verdict, close(r.l, 1 + std::exp(-1.0) + std::exp(-2.0)) && close(lab03::result(r), dr.y),
         "rising logits in two chunks equal the one-shot softmax");

  // ---- Random logits, random chunkings -------------------------------------------------------------
  fmt::print("\nrandom: 200 rows of 1000 logits ~ N(0, 8²), chunks of 1 to 64\n");
  std::mt19937 rng(20261130);
  std::normal_distribution<float> logit(0.f, 8.f), value(0.f, 1.f);
  std::uniform_int_distribution<std::size_t> chunk(1, 64);
  int bad = 0;
  double worst = 0;
  for (int row = 0; row < 200; ++row) {
    std::vector<float> xr(1000), vr(1000);
    for (auto& e : xr) e = logit(rng);
    for (auto& e : vr) e = value(rng);
    std::vector<std::size_t> chunks;
    for (std::size_t left = xr.size(); left > 0;) {
      const std::size_t c = std::min(left, chunk(rng));
      chunks.push_back(c);
      left -= c;
    }
    const State s = fold(xr, vr, chunks);
    const Direct dd = direct(xr, vr);
    const double err = std::abs(lab03::result(s) - dd.y);
    worst = std::isfinite(err) ? std::max(worst, err) : INFINITY;
    if (!close(lab03::result(s), dd.y, 1e-4)) ++bad;
  }
  expect(verdict, bad == 0, fmt::format("{} of 200 rows differ from the one-shot softmax (worst |Δy| {:.2e})", bad, worst));

  // ---- Logits whose exponentials overflow float ------------------------------------------------
  const std::vector<float> big = {1000.f, 999.f, 998.f}, vb = {1.f, 2.f, 3.f};
  const State b = fold(big, vb, {1, 2});
  fmt::print("\nlarge logits [1000] then [999, 998] (e^1000 overflows float): y = {:.6f}\n", lab03::result(b));
  expect(verdict, close(lab03::result(b), direct(big, vb).y), "large logits: finite and equal to the one-shot softmax");

  return verdict.finish();
}
