// A test of lab 10's bank model (a CPU test, label cpu; not part of the lab): the reference
// layout and the padded one pass; the naive layout fails with the counts chapter 07 derives
// (S store 4-way, P read 8-way); each classic mistake is caught by the right check with the right
// diagnosis. A model that passed everything would let any starter through.
#include <fmt/format.h>

#include <string>

#include "labs/L10_staging_layout/lab10.hpp"
#include "labs/L10_staging_layout/model.hpp"
#include "labs/L10_staging_layout/solution/layout.hpp"

namespace {

using lab10::kCols;
using lab10::model::Kind;
using lab10::model::Layout;

int failures = 0;
void expect(bool ok, const std::string& what) {
  fmt::print("{} {}\n", ok ? "ok  " : "FAIL", what);
  if (!ok) ++failures;
}

// A layout must fail with `diagnosis` in its verdict (and `also` among its conflicts, if given).
void expect_caught(const char* name, const Layout& l, const char* diagnosis, const char* also = nullptr) {
  const auto f = lab10::model::check(l);
  bool ok = f.what.find(diagnosis) != std::string::npos;
  if (also) {
    bool found = false;
    for (const auto& c : f.conflicts) found = found || c.find(also) != std::string::npos;
    ok = ok && found;
  }
  expect(ok, fmt::format("{}: {}", name, f.what.empty() ? "passed (it must not)" : f.what));
}

int excess(const Layout& l, Kind k) {
  for (const auto& t : lab10::model::count_all(l))
    if (t.kind == k) return t.wavefronts - t.ideal;
  return -1;
}

int s_solution(int r, int c) { return layout::s_index(r, c); }
int p_solution(int r, int c) { return layout::p_index(r, c); }
int dense(int r, int c) { return r * kCols + c; }
int padded(int r, int c) { return r * (kCols + 8) + c; }
int stride65(int r, int c) { return r * 65 + c; }
int stride68(int r, int c) { return r * 68 + c; }
int stride80(int r, int c) { return r * 80 + c; }
int s_ldsm_swizzle(int r, int c) { return r * kCols + (c ^ ((r & 7) << 2)); }  // 16-byte chunks: the fp16 habit
int s_pair_breaking(int r, int c) { return r * kCols + (c ^ (r & 7)); }      // swaps single floats
int s_half_rows(int r, int c) { return (r % 16) * kCols + c; }              // two rows in one place
int s_interleaved(int r, int c) { return r * kCols + ((c & 31) >> 1) * 4 + (c >> 5) * 2 + (c & 1); }
int p_swizzle4(int r, int c) { return r * kCols + (c ^ ((r & 3) << 3)); }   // only 4 of the 8 rows apart
int p_swizzle_halves(int r, int c) { return r * kCols + (c ^ (r & 7)); }    // breaks ldmatrix's 16-byte rows

constexpr int kDense = lab10::kRows * kCols;
constexpr int kPadded = lab10::kRows * (kCols + 8);

}  // namespace

int main() {
  const Layout solution{s_solution, layout::kSFloats, p_solution, layout::kPHalves};
  const Layout naive{dense, kDense, dense, kDense};
  const Layout pad{padded, kPadded, padded, kPadded};

  expect(lab10::model::check(solution).what.empty(), "the solution (XOR swizzles) passes");
  expect(lab10::model::check(pad).what.empty(), "the padded layout (rows of 72, chapter 07's v5 for S) passes");

  // The naive layout: chapter 07's arithmetic. The S store: a half-warp's 4 rows on the same 8
  // banks, 4 wavefronts per half-warp where 1 would do: 6 extra per instruction × 32 instructions.
  // The P read: each ldmatrix phase's 8 rows in the same 4 banks, 8 wavefronts for 1: 28 extra per
  // ldmatrix.x4 × 16. The S read and the P store are conflict-free in every layout here.
  expect_caught("the naive layout", naive, "check 4 (bank conflicts): the S store", "the P read (ldmatrix.x4");
  expect(lab10::model::check(naive).what.find("4-way") != std::string::npos, "the naive S store is 4-way");
  expect(excess(naive, Kind::kSStore) == 192 && excess(naive, Kind::kPLdsm) == 448 &&
             excess(naive, Kind::kSLoad) == 0 && excess(naive, Kind::kPStore) == 0,
         fmt::format("the naive layout's excess wavefronts per CTA key block: S store {} (192), S read {} (0), "
                     "P store {} (0), P read {} (448)",
                     excess(naive, Kind::kSStore), excess(naive, Kind::kSLoad), excess(naive, Kind::kPStore),
                     excess(naive, Kind::kPLdsm)));
  // Chapter 07 measured the S stores' excess of v4 with Nsight Compute at the series' workload:
  // 6,291,456 = 192 × 32,768 CTA key blocks.
  expect(192L * lab10::model::kSeriesCtaBlocks == 6291456L, "192 × the series' CTA key blocks = 6,291,456");
  expect(excess(solution, Kind::kSStore) == 0 && excess(solution, Kind::kPLdsm) == 0, "the solution's excess is 0");

  const Layout s_naive_only{dense, kDense, p_solution, layout::kPHalves};
  const Layout p_naive_only{s_solution, layout::kSFloats, dense, kDense};
  expect_caught("S dense, P swizzled", s_naive_only, "the S store (st.shared.v2.f32");
  expect_caught("S swizzled, P dense", p_naive_only, "the P read (ldmatrix.x4, 16 bytes a lane)", "8-way");

  expect_caught("S rows of 65 floats", {stride65, lab10::kRows * 65, p_solution, kDense}, "check 3 (vectors): S[1][0] is at 65, not a multiple of 2");
  expect_caught("S rows of 68 floats", {stride68, lab10::kRows * 68, p_solution, kDense}, "the S store", "2-way");
  expect_caught("S rows of 80 floats (over the budget)", {stride80, lab10::kRows * 80, p_solution, kDense}, "check 1 (size): S is 2560 elements");
  expect_caught("S rows of 72 in a buffer of 32 × 64", {padded, kDense, p_solution, kDense}, "check 2 (one-to-one): S[28][32] is at 2048, outside");
  expect_caught("S swizzled by 16-byte chunks (the fp16 swizzle)", {s_ldsm_swizzle, kDense, p_solution, kDense}, "the S store", "2-way");
  expect_caught("S swizzle that splits the float pairs", {s_pair_breaking, kDense, p_solution, kDense}, "check 3 (vectors): S[1][0] is at 65, not a multiple of 2");
  expect_caught("two S rows on one place", {s_half_rows, kDense, p_solution, kDense}, "check 2 (one-to-one): S[0][0] and S[16][0] are both at 0");
  expect_caught("S halves interleaved", {s_interleaved, kDense, p_solution, kDense}, "check 4", "the S read (ld.shared.f32");
  expect_caught("P swizzled by row % 4 only", {s_solution, kDense, p_swizzle4, kDense}, "the P read (ldmatrix.x4", "2-way");
  expect_caught("P swizzled by single halves", {s_solution, kDense, p_swizzle_halves, kDense}, "check 3 (vectors): P[1][0] is at 65, not a multiple of 8");
  expect_caught("P too small", {s_solution, kDense, dense, kDense - 1}, "check 1 (size): P is 2047 elements");

  fmt::print("L10 model selftest: {}\n", failures ? fmt::format("FAIL ({} cases)", failures) : std::string("PASS"));
  return failures ? 1 : 0;
}
