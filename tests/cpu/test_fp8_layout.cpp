// Step 45's V transposes on the CPU: common/fp8_layout.hpp's lane maps (the kernel's own
// functions) driven through an emulation of what a warp's ldmatrix.x4.trans, PRMT, stmatrix.x4 and
// 32-bit loads and stores do, on a 128 × 128 byte tile of distinct-enough bytes. Checked: every Vᵀ
// byte written exactly once and holding the V byte that P's key order wants there, and every
// shared-memory access of a warp one wavefront (no two lanes or rows on one bank). A planted
// mistake in each map is caught.
#include <array>
#include <cstdint>
#include <functional>
#include <set>
#include <vector>

#include "common/fp8_layout.hpp"
#include "tests/catch.hpp"

using namespace ladder::fp8;

namespace {

constexpr int kLanes = 32;
constexpr int kBanks = 32;

// __byte_perm(x, y, s): byte n of the result is byte (s >> 4n) & 7 of the pair {y:x}.
std::uint32_t byte_perm(std::uint32_t x, std::uint32_t y, std::uint32_t s) {
  const std::uint64_t pair = (std::uint64_t(y) << 32) | x;
  std::uint32_t out = 0;
  for (int n = 0; n < 4; ++n) out |= std::uint32_t((pair >> (8 * ((s >> (4 * n)) & 7))) & 0xFF) << (8 * n);
  return out;
}

std::uint32_t word_at(const std::vector<std::uint8_t>& tile, std::uint32_t offset) {
  return tile[offset] | tile[offset + 1] << 8 | tile[offset + 2] << 16 | std::uint32_t(tile[offset + 3]) << 24;
}

// V[key][d] at its swizzled place; a byte that differs between neighbouring keys and head dims.
// block_n keys: 128, or step 47's 192 (its Vᵀ in two 128-key tiles, fp8_layout.hpp's vt_offset);
// head_dim bytes a row: 128, or 64 (the 64-byte swizzle).
std::vector<std::uint8_t> make_v(int block_n = kRowBytes, int head_dim = kRowBytes) {
  std::vector<std::uint8_t> v(std::size_t(block_n) * head_dim);
  for (int key = 0; key < block_n; ++key)
    for (int d = 0; d < head_dim; ++d)
      v[swizzled_offset(key, d, head_dim)] = std::uint8_t((key * 37 + d * 11 + (key ^ d)) & 0xFF);
  return v;
}

struct Result {
  explicit Result(int block_n = kRowBytes) : vt(vt_tiles(block_n) * kVtTileBytes, 0), writes(vt.size(), 0) {}
  std::vector<std::uint8_t> vt;
  std::vector<int> writes;
  int conflicted_accesses = 0;
};

// The eight 16-byte rows of one ldmatrix/stmatrix phase: one wavefront iff they sit on eight
// different 4-bank groups (and each is 16-byte aligned).
bool rows_conflict_free(const std::array<std::uint32_t, 8>& rows) {
  std::set<std::uint32_t> groups;
  for (auto r : rows) {
    if (r % kChunkBytes != 0) return false;
    groups.insert((r / kChunkBytes) % 8);
  }
  return groups.size() == 8;
}

bool words_conflict_free(const std::array<std::uint32_t, kLanes>& words) {
  std::set<std::uint32_t> banks;
  for (auto w : words) banks.insert((w / 4) % kBanks);
  return banks.size() == kLanes;
}

using Selector = std::function<std::uint32_t(int sigma, int lane)>;
using StoreOffset = std::function<std::uint32_t(int unit, int lane)>;
using LoadOffset = std::function<std::uint32_t(int unit, int lane)>;
// The kernel's own store map at D = 128 (its head_dim argument left at the default).
const StoreOffset store_128 = [](int unit, int lane) { return matrix_store_offset(unit, lane); };

Result matrix_transpose(const std::vector<std::uint8_t>& v, const Selector& selector, const StoreOffset& store_offset,
                        int block_n = kRowBytes, int head_dim = kRowBytes, LoadOffset load_offset = nullptr) {
  if (!load_offset) load_offset = [head_dim](int unit, int lane) { return matrix_load_offset(unit, lane, head_dim); };
  Result res(block_n);
  for (int unit = 0; unit < matrix_units(block_n, head_dim); ++unit) {
    // ldmatrix.x4.trans: lane 8i + r names row r of matrix i.
    std::array<std::array<std::uint32_t, 8>, 4> load_rows{}, store_rows{};
    for (int lane = 0; lane < kLanes; ++lane) {
      load_rows[lane / 8][lane % 8] = load_offset(unit, lane);
      store_rows[lane / 8][lane % 8] = store_offset(unit, lane);
    }
    for (int i = 0; i < 4; ++i) res.conflicted_accesses += !rows_conflict_free(load_rows[i]) + !rows_conflict_free(store_rows[i]);
    for (int lane = 0; lane < kLanes; ++lane) {
      const int q = lane / 4, t = lane % 4;
      std::uint32_t in[4];
      for (int i = 0; i < 4; ++i) {  // transposed: rows 2t, 2t + 1, 16-bit element q of each
        const std::uint32_t r0 = load_rows[i][2 * t] + 2 * q, r1 = load_rows[i][2 * t + 1] + 2 * q;
        in[i] = v[r0] | v[r0 + 1] << 8 | v[r1] << 16 | std::uint32_t(v[r1 + 1]) << 24;
      }
      const std::uint32_t out[4] = {byte_perm(in[0], in[1], selector(0, lane)), byte_perm(in[0], in[1], selector(1, lane)),
                                    byte_perm(in[2], in[3], selector(0, lane)), byte_perm(in[2], in[3], selector(1, lane))};
      for (int i = 0; i < 4; ++i)  // stmatrix: register i to row q of matrix i, bytes 4t .. 4t + 3
        for (int b = 0; b < 4; ++b) {
          const std::uint32_t at = store_rows[i][q] + 4 * t + b;
          res.vt[at] = std::uint8_t(out[i] >> (8 * b));
          ++res.writes[at];
        }
    }
  }
  return res;
}

using WordMap = std::function<WordUnit(int it, int lane)>;

Result word_transpose(const std::vector<std::uint8_t>& v, const WordMap& map) {
  Result res;
  for (int it = 0; it < kWordIterations; ++it) {
    std::array<std::array<std::uint32_t, kLanes>, 4> loads{}, stores{};
    for (int lane = 0; lane < kLanes; ++lane)
      for (int f = 0; f < 4; ++f) {
        loads[f][lane] = word_load_offset(map(it, lane), f);
        stores[f][lane] = word_store_offset(map(it, lane), f);
      }
    for (int f = 0; f < 4; ++f) res.conflicted_accesses += !words_conflict_free(loads[f]) + !words_conflict_free(stores[f]);
    for (int lane = 0; lane < kLanes; ++lane) {
      std::uint32_t in[4];
      for (int f = 0; f < 4; ++f) in[f] = word_at(v, loads[f][lane]);
      const std::uint32_t x0 = byte_perm(in[0], in[1], kWordBytesLow), x1 = byte_perm(in[0], in[1], kWordBytesHigh);
      const std::uint32_t y0 = byte_perm(in[2], in[3], kWordBytesLow), y1 = byte_perm(in[2], in[3], kWordBytesHigh);
      const std::uint32_t out[4] = {byte_perm(x0, y0, kWordHalvesLow), byte_perm(x0, y0, kWordHalvesHigh),
                                    byte_perm(x1, y1, kWordHalvesLow), byte_perm(x1, y1, kWordHalvesHigh)};
      for (int i = 0; i < 4; ++i)
        for (int b = 0; b < 4; ++b) {
          const std::uint32_t at = stores[i][lane] + b;
          res.vt[at] = std::uint8_t(out[i] >> (8 * b));
          ++res.writes[at];
        }
    }
  }
  return res;
}

// Every Vᵀ byte written once, holding V[key][d] for the key P's order puts in that slot, and no
// byte written outside the block's slots.
int wrong_bytes(const std::vector<std::uint8_t>& v, const Result& res, int block_n = kRowBytes,
                int head_dim = kRowBytes, bool packed = false) {
  int wrong = 0, writes = 0;
  for (int d = 0; d < head_dim; ++d)
    for (int slot = 0; slot < block_n; ++slot) {
      const int key = kK * (slot / kK) + permuted_key(slot % kK);
      const std::uint32_t at = packed ? vt_offset_packed(d, slot) : vt_offset(d, slot);
      wrong += res.writes[at] != 1 || res.vt[at] != v[swizzled_offset(key, d, head_dim)];
      writes += res.writes[at];
    }
  int all_writes = 0;
  for (int w : res.writes) all_writes += w;
  return wrong + (all_writes - writes);
}

}  // namespace

TEST_CASE("fp8 layout: permuted_key is a permutation of each k32 slice, pairs kept together", "[fp8_layout]") {
  std::set<int> keys;
  for (int k = 0; k < kK; ++k) keys.insert(permuted_key(k));
  CHECK(keys.size() == std::size_t(kK));
  CHECK(*keys.begin() == 0);
  CHECK(*keys.rbegin() == kK - 1);
  // Slots 4t .. 4t + 3 of half h hold S's accumulator pairs (2t, 2t + 1) of n8 tiles 2h and 2h + 1.
  for (int h = 0; h < 2; ++h)
    for (int t = 0; t < 4; ++t) {
      CHECK(permuted_key(16 * h + 4 * t + 0) == 16 * h + 2 * t);
      CHECK(permuted_key(16 * h + 4 * t + 1) == 16 * h + 2 * t + 1);
      CHECK(permuted_key(16 * h + 4 * t + 2) == 16 * h + 8 + 2 * t);
      CHECK(permuted_key(16 * h + 4 * t + 3) == 16 * h + 8 + 2 * t + 1);
    }
}

TEST_CASE("fp8 layout: the matrix transpose (ldmatrix.trans, PRMT, stmatrix) writes Vt exactly, conflict-free",
          "[fp8_layout]") {
  const auto v = make_v();
  const Result res = matrix_transpose(v, prmt_selector, store_128);
  CHECK(wrong_bytes(v, res) == 0);
  CHECK(res.conflicted_accesses == 0);
}

TEST_CASE("fp8 layout: a 192-key block's transpose fills two Vt tiles exactly, conflict-free", "[fp8_layout]") {
  constexpr int kWide = 192;  // step 47's key block
  const auto v = make_v(kWide);
  const Result res = matrix_transpose(v, prmt_selector, store_128, kWide);
  CHECK(wrong_bytes(v, res, kWide) == 0);
  CHECK(res.conflicted_accesses == 0);
  // Planted: the slices past 128 keys stored as if a Vt row were 192 bytes long (no second tile).
  const StoreOffset one_tile = [](int unit, int lane) {
    const int i = lane / 8, r = lane % 8;
    const int row = matrix_store_row(unit, i % 2, r), slot = kK * matrix_unit_slice(unit) + 16 * (i / 2);
    return std::uint32_t(row) * (kWide / 32 * kK) + ((std::uint32_t(slot) / kChunkBytes) ^ (row % 8)) * kChunkBytes;
  };
  CHECK(wrong_bytes(v, matrix_transpose(v, prmt_selector, one_tile, kWide), kWide) > 0);
}

TEST_CASE("fp8 layout: a 192-key block packed (the last 64 keys in a 64-byte-swizzled tile) is written exactly, conflict-free",
          "[fp8_layout]") {
  constexpr int kWide = 192;  // step 47's three_stages
  const auto v = make_v(kWide);
  const StoreOffset packed = [](int unit, int lane) { return matrix_store_offset(unit, lane, kRowBytes, true); };
  const Result res = matrix_transpose(v, prmt_selector, packed, kWide);
  CHECK(wrong_bytes(v, res, kWide, kRowBytes, true) == 0);
  CHECK(res.conflicted_accesses == 0);
  // The packed Vt ends at 16 KB + 8 KB: nothing written past it.
  std::size_t last = 0;
  for (std::size_t at = 0; at < res.writes.size(); ++at)
    if (res.writes[at]) last = at;
  CHECK(last == kVtTileBytes + std::size_t(kRowBytes) * kTailKeys - 1);
  // Planted: the tail tile read as 128-byte-swizzled rows of 64 bytes (its swizzle left at 128).
  const StoreOffset tail_as_128 = [](int unit, int lane) {
    const int i = lane >> 3, r = lane & 7;
    const int row = matrix_store_row(unit, i % 2, r), slot = kK * matrix_unit_slice(unit) + 16 * (i / 2);
    if (slot < kRowBytes) return swizzled_offset(row, slot);
    return kVtTileBytes + std::uint32_t(row * kTailKeys) + ((std::uint32_t(slot - kRowBytes) / kChunkBytes) ^ (row % 4)) * kChunkBytes;
  };
  CHECK(wrong_bytes(v, matrix_transpose(v, prmt_selector, tail_as_128, kWide), kWide, kRowBytes, true) > 0);
}

TEST_CASE("fp8 layout: at D = 64 (64-byte rows, the 64-byte swizzle) the transpose fills 64 Vt rows exactly, conflict-free",
          "[fp8_layout]") {
  constexpr int kD = 64;
  // The rule reproduces the 64-byte swizzle's pattern: chunk c of row r at c ^ (r / 2 % 4), and
  // the 128-byte one's as before.
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < kD / kChunkBytes; ++c) {
      CHECK(swizzled_offset(r, kChunkBytes * c, kD) == std::uint32_t(r * kD + kChunkBytes * (c ^ (r / 2 % 4))));
      CHECK(swizzled_offset(r, kChunkBytes * c) == std::uint32_t(r * kRowBytes + kChunkBytes * (c ^ (r % 8))));
    }
  CHECK(matrix_units(kRowBytes, kD) == 16);
  const auto v = make_v(kRowBytes, kD);
  const Result res = matrix_transpose(v, prmt_selector, [](int unit, int lane) { return matrix_store_offset(unit, lane, kD); },
                                      kRowBytes, kD);
  CHECK(wrong_bytes(v, res, kRowBytes, kD) == 0);
  CHECK(res.conflicted_accesses == 0);
  // Planted: V's rows read as if swizzled at 128 bytes: wrong bytes (and conflicts).
  const LoadOffset as_128 = [](int unit, int lane) {
    const int i = lane >> 3, r = lane & 7;
    const int key = kK * matrix_unit_slice(unit, kD) + 16 * (i / 2) + 8 * (i % 2) + r;
    return std::uint32_t(key * kD) + ((std::uint32_t(matrix_unit_chunk(unit, kD)) ^ (key % 8)) % 4) * kChunkBytes;
  };
  const Result planted = matrix_transpose(v, prmt_selector, [](int unit, int lane) { return matrix_store_offset(unit, lane, kD); },
                                          kRowBytes, kD, as_128);
  CHECK(wrong_bytes(v, planted, kRowBytes, kD) > 0);
}

TEST_CASE("fp8 layout: the word transpose (32-bit loads, PRMT, 32-bit stores) writes Vt exactly, conflict-free",
          "[fp8_layout]") {
  const auto v = make_v();
  const Result res = word_transpose(v, word_unit);
  CHECK(wrong_bytes(v, res) == 0);
  CHECK(res.conflicted_accesses == 0);
}

TEST_CASE("fp8 layout: planted mistakes in the maps are caught", "[fp8_layout]") {
  const auto v = make_v();
  SECTION("the upper lanes' selector swap forgotten: wrong bytes") {
    const Selector no_swap = [](int sigma, int) { return sigma ? kSelectOdd : kSelectEven; };
    CHECK(wrong_bytes(v, matrix_transpose(v, no_swap, store_128)) > 0);
  }
  SECTION("stmatrix rows 16c + 2q + sigma, without the swap: right bytes, 2-way conflicts") {
    const Selector no_swap = [](int sigma, int) { return sigma ? kSelectOdd : kSelectEven; };
    const StoreOffset plain = [](int unit, int lane) {
      const int i = lane / 8, r = lane % 8;
      return swizzled_offset(16 * matrix_unit_chunk(unit) + 2 * r + i % 2, kK * matrix_unit_slice(unit) + 16 * (i / 2));
    };
    const Result res = matrix_transpose(v, no_swap, plain);
    CHECK(wrong_bytes(v, res) == 0);
    CHECK(res.conflicted_accesses == kMatrixUnits * 4);  // every store phase of every unit
  }
  SECTION("the word map without its bank-spreading XORs: right bytes, conflicts") {
    const WordMap straight = [](int it, int lane) {
      WordUnit u = word_unit(it, lane);
      const int dg0 = (lane >> 2) & 1, dg34 = it >> 3;
      u.dg = dg0 | (((it & 1)) << 1) | (((it >> 1) & 1) << 2) | (dg34 << 3);  // dg1, dg2 from `it` only
      return u;
    };
    const Result res = word_transpose(v, straight);
    CHECK(wrong_bytes(v, res) == 0);
    CHECK(res.conflicted_accesses > 0);
  }
}
