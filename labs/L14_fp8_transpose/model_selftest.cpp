// A test of lab 14's CPU model (a CPU test, label cpu; not part of the lab): the reference map and
// step 45's own (common/fp8_layout.hpp) pass and are the same map; each classic mistake is caught
// by the right check with the right diagnosis. A model that passed everything would let any
// starter through.
#include <fmt/format.h>

#include <cstdint>
#include <string>

#include "common/fp8_layout.hpp"
#include "labs/L14_fp8_transpose/lab14.hpp"
#include "labs/L14_fp8_transpose/model.hpp"
#include "labs/L14_fp8_transpose/solution/transpose_map.hpp"

namespace {

using lab14::model::Map;
namespace fp8 = ladder::fp8;

int failures = 0;
void expect(bool ok, const std::string& what) {
  fmt::print("{} {}\n", ok ? "ok  " : "FAIL", what);
  if (!ok) ++failures;
}

// A map must fail check `check` first, with `diagnosis` in its verdict (and `also` in the line of
// check `also_check`, if given).
void expect_caught(const char* name, const Map& m, int check, const char* diagnosis, int also_check = 0,
                   const char* also = nullptr) {
  const auto r = lab14::model::check(m);
  bool ok = r.failed == check && r.what.find(diagnosis) != std::string::npos;
  if (also) ok = ok && r.line[also_check].find(also) != std::string::npos;
  expect(ok, fmt::format("{}: {}", name,
                         r.failed ? fmt::format("check {} ({}): {}", r.failed, lab14::model::check_name(r.failed), r.what)
                                  : std::string("passed (it must not)")));
}

// The pieces the mistakes are made of.
constexpr std::uint32_t kEven = 0x6420, kOdd = 0x7531;      // one head dim's four keys
constexpr std::uint32_t kLowHalves = 0x5410, kHighHalves = 0x7632;  // 16-bit elements kept whole
constexpr int kHalfTile = lab14::kTileBytes / 2;
using lab14::kChunkBytes;
using lab14::kRowBytes;
using lab14::kSliceKeys;
using lab14::matrix_of;
using lab14::row_of;
using lab14::unit_chunk;
using lab14::unit_slice;

std::uint32_t ref_load(int u, int l) { return lab14::load_offset(u, l); }
std::uint32_t ref_store(int u, int l) { return lab14::store_offset(u, l); }
std::uint32_t ref_select(int s, int l) { return lab14::selector(s, l); }

int load_key(int u, int l) { return kSliceKeys * unit_slice(u) + 8 * matrix_of(l) + row_of(l); }
std::uint32_t plain_load(int u, int l) { return std::uint32_t(load_key(u, l) * kRowBytes + kChunkBytes * unit_chunk(u)); }
std::uint32_t plain_row_store(int u, int l) {  // head dim 16c + 2r + σ for every r: no flip
  const int i = matrix_of(l);
  return lab14::swizzled_offset(16 * unit_chunk(u) + 2 * row_of(l) + i % 2, kSliceKeys * unit_slice(u) + 16 * (i / 2));
}
std::uint32_t unswizzled_store(int u, int l) {
  const int i = matrix_of(l), r = row_of(l);
  const int row = 16 * unit_chunk(u) + 2 * r + lab14::head_dim_parity(i % 2, r);
  return std::uint32_t(row * kRowBytes + kSliceKeys * unit_slice(u) + 16 * (i / 2));
}
std::uint32_t fixed_select(int s, int) { return s ? kOdd : kEven; }
std::uint32_t starter_select(int s, int) { return s ? kHighHalves : kLowHalves; }
std::uint32_t halves_select(int s, int l) { return lab14::head_dim_parity(s, lab14::group_of(l)) ? kHighHalves : kLowHalves; }

}  // namespace

int main() {
  const Map ref{ref_load, ref_store, ref_select};
  // Step 45's maps at D = 128 (their head-dim argument left at its default).
  const Map step45{[](int u, int l) { return fp8::matrix_load_offset(u, l); },
                   [](int u, int l) { return fp8::matrix_store_offset(u, l); }, fp8::prmt_selector};

  // The reference is step 45's map, written in the lab's words.
  bool same = true;
  for (int u = 0; u < lab14::kUnits; ++u)
    for (int l = 0; l < lab14::kLanes; ++l)
      same = same && ref_load(u, l) == fp8::matrix_load_offset(u, l) && ref_store(u, l) == fp8::matrix_store_offset(u, l) &&
             ref_select(0, l) == fp8::prmt_selector(0, l) && ref_select(1, l) == fp8::prmt_selector(1, l);
  expect(same, "the solution's three functions equal common/fp8_layout.hpp's for every unit and lane");
  const auto r = lab14::model::check(ref);
  expect(r.failed == 0, fmt::format("the solution passes{}", r.failed ? ": " + r.what : std::string()));
  expect(r.line[4].find("ldmatrix 128 wavefronts, stmatrix 128, where 128 each would do") != std::string::npos,
         "the solution: 128 wavefronts for 32 ldmatrix.x4 and for 32 stmatrix.x4, the ideal: " + r.line[4]);
  expect(lab14::model::check(step45).failed == 0, "step 45's map (common/fp8_layout.hpp) passes");

  // The starter: the 16-bit selectors show first (row 0 of V needs no swizzle, so its bytes come
  // through the unswizzled load untouched).
  expect_caught("the starter (plain load, 16-bit selectors, rows without the flip)", {plain_load, plain_row_store, starter_select},
                3, "Vᵀ[0][1] holds V[0][1] where V[1][0] belongs", 3, "one 16-bit element");
  expect_caught("the starter with its selectors fixed", {plain_load, plain_row_store, fixed_select}, 3,
                "Vᵀ[0][1] holds V[1][16] where V[1][0] belongs", 3, "Does the load row's address follow it?");
  expect_caught("the starter with its load and selectors fixed: rows 16c + 2q + σ, no flip",
                {ref_load, plain_row_store, fixed_select}, 4,
                "unit 0 (head dims 0-15, keys 0-31), store matrix 0: rows of lanes 0 and 4 (Vᵀ rows 0 and 8) share swizzled "
                "chunk 0 (banks 0-3): 2-way", 4, "stmatrix 256, where 128 each would do (0 of the 128 load phases and 128 of the 128 store phases");

  // The selectors.
  expect_caught("16-bit halves as selectors", {ref_load, ref_store, halves_select}, 3, "one 16-bit element");
  expect_caught("the selectors of σ = 0 and σ = 1 swapped",
                {ref_load, ref_store, [](int s, int l) { return ref_select(s ^ 1, l); }}, 3,
                "Vᵀ[0][0] holds V[0][1] where V[0][0] belongs", 3, "the other head dim of its pair");
  expect_caught("the rows flipped for q ≥ 4, the selectors not", {ref_load, ref_store, fixed_select}, 3,
                "Vᵀ[8][0] holds V[0][9] where V[0][8] belongs", 3, "the other head dim of its pair");
  expect_caught("the selectors flipped for q ≥ 4, the rows not", {ref_load, plain_row_store, ref_select}, 3,
                "Vᵀ[8][0] holds V[0][9] where V[0][8] belongs", 3, "the other head dim of its pair");
  expect_caught("the selectors' flip keyed on lane % 8 (the address split) instead of lane / 4",
                {ref_load, ref_store, [](int s, int l) { return (s ^ (row_of(l) >= 4 ? 1 : 0)) ? kOdd : kEven; }}, 3,
                "Vᵀ[2][0] holds V[0][3] where V[0][2] belongs", 3, "the other head dim of its pair");
  expect_caught("keys in the wrong order inside the word (x0 y0 x2 y2)",
                {ref_load, ref_store, [](int s, int l) { return ref_select(s, l) == kEven ? 0x6240u : 0x7351u; }}, 3,
                "Vᵀ[0][1] holds V[8][0] where V[1][0] belongs", 3, "in slot order?");

  // The stores.
  expect_caught("the store without the swizzle", {ref_load, unswizzled_store, ref_select}, 3,
                "Vᵀ[1][0] holds V[16][1] where V[0][1] belongs", 3, "Does the store row's address follow it?");
  expect_caught("store rows 16c + r + 8σ (eight consecutive rows, but not the lane group's head dims)",
                {ref_load,
                 [](int u, int l) {
                   const int i = matrix_of(l);
                   return lab14::swizzled_offset(16 * unit_chunk(u) + row_of(l) + 8 * (i % 2), kSliceKeys * unit_slice(u) + 16 * (i / 2));
                 },
                 ref_select},
                3, "Vᵀ[1][0] holds V[0][2] where V[0][1] belongs", 3, "lane group q holds head dims 16c + 2q");
  expect_caught("the store ignores the slice", {ref_load, [](int u, int l) { return ref_store(u % 8, l); }, ref_select}, 2,
                "Vᵀ[0][0] (byte 0 of Vᵀ) is written 4 times");
  expect_caught("the store adds the lane's own word (4t) to its row address",
                {ref_load, [](int u, int l) { return ref_store(u, l) + 4 * std::uint32_t(lab14::quad_lane(l)); }, ref_select}, 1,
                "lane 1 (row 1 of store matrix 0): store_offset = 292: not a multiple of 16");
  expect_caught("the store offset past the tile", {ref_load, [](int u, int l) { return ref_store(u, l) + kHalfTile; }, ref_select}, 1,
                "outside the 16384-byte tile");

  // The loads.
  expect_caught("the load without the swizzle", {plain_load, ref_store, ref_select}, 3,
                "Vᵀ[0][1] holds V[1][16] where V[1][0] belongs", 3, "Does the load row's address follow it?");
  expect_caught("load rows named in P's order", {[](int u, int l) {
                  const int key = kSliceKeys * unit_slice(u) + lab14::permuted_key(8 * matrix_of(l) + row_of(l));
                  return lab14::swizzled_offset(key, kChunkBytes * unit_chunk(u));
                }, ref_store, ref_select},
                3, "Vᵀ[0][2] holds V[4][0] where V[8][0] belongs", 4, "load matrix 0: rows of lanes 0 and 2 (V rows 0 and 8)");
  expect_caught("matrices 1 and 2 swapped (keys 16·(i % 2) + 8·(i / 2) + r)", {[](int u, int l) {
                  const int i = matrix_of(l);
                  const int key = kSliceKeys * unit_slice(u) + 16 * (i % 2) + 8 * (i / 2) + row_of(l);
                  return lab14::swizzled_offset(key, kChunkBytes * unit_chunk(u));
                }, ref_store, ref_select},
                3, "Vᵀ[0][2] holds V[16][0] where V[8][0] belongs");
  expect_caught("load rows strided: keys i + 4r, not eight consecutive keys", {[](int u, int l) {
                  const int key = kSliceKeys * unit_slice(u) + matrix_of(l) + 4 * row_of(l);
                  return lab14::swizzled_offset(key, kChunkBytes * unit_chunk(u));
                }, ref_store, ref_select},
                3, "Vᵀ[0][1] holds V[4][0] where V[1][0] belongs", 4, "4-way");
  expect_caught("the load adds the lane's 16-bit element (2q) to its row address",
                {[](int u, int l) { return ref_load(u, l) + 2 * std::uint32_t(lab14::group_of(l)); }, ref_store, ref_select}, 1,
                "lane 4 (row 4 of load matrix 0): load_offset = 578: not a multiple of 16");

  fmt::print("L14 model selftest: {}\n", failures ? fmt::format("FAIL ({} cases)", failures) : std::string("PASS"));
  return failures ? 1 : 0;
}
