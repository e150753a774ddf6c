// Lab 14's CPU model (given, do not edit): your lane map driven through the three instructions of
// one unit, lane by lane, on one 128 × 128 tile, for all 32 units. Used by the checker (your map,
// then the GPU run) and by model_selftest.cpp (the reference passes; each classic mistake is
// caught with its diagnosis).
//
// The model does not move byte values, it moves names: every byte of V is labelled with the
// element it is, (key, d), so a byte that arrives in the wrong place says exactly which element
// it is and which lane and register put it there. The instructions, as the PTX ISA defines them
// (lab14.hpp has the lane roles):
//   ldmatrix.x4.trans.b16   lane 4q + t receives in register i element q (bytes 2q, 2q + 1) of
//                           rows 2t and 2t + 1 of matrix i, each row at the address lane 8i + r gave;
//   __byte_perm(x, y, s)    byte n of the result is byte (s >> 4n) & 7 of {y : x} (the upper 16
//                           bits of s and bit 3 of each nibble are not used);
//   stmatrix.x4.b16         register i of lane 4q + t goes to bytes 4t .. 4t + 3 of row q of
//                           matrix i, at the address lane 8i + q gave.
// The banks: a 16-byte row of an ldmatrix or stmatrix phase (8 rows, one 8-lane group of
// addresses) covers four banks, the four of its chunk position (address / 16) % 8 in a tile that
// starts on a 1024-byte boundary. A phase is one wavefront when its 8 rows sit at 8 different chunk
// positions; n different rows at one position cost n wavefronts (n-way).
//
// The ground truth is the kernel's own: common/fp8_layout.hpp's swizzle and key order, which the
// lab's given helpers (lab14.hpp) must equal (checked below, at compile time).
#pragma once

#include <fmt/format.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "common/fp8_layout.hpp"
#include "labs/L14_fp8_transpose/lab14.hpp"

namespace lab14::model {

constexpr bool given_helpers_agree() {
  for (int row = 0; row < kRows; ++row)
    for (int byte = 0; byte < kRowBytes; ++byte)
      if (swizzled_offset(row, byte) != ladder::fp8::swizzled_offset(row, byte)) return false;
  for (int slot = 0; slot < kSliceKeys; ++slot)
    if (permuted_key(slot) != ladder::fp8::permuted_key(slot)) return false;
  return true;
}
static_assert(given_helpers_agree(), "lab14.hpp's swizzle and key order must be step 45's (common/fp8_layout.hpp)");

// The truth: where byte (row, byte) of either tile lives, and which key Vᵀ's slot wants.
inline std::uint32_t place(int row, int byte) { return ladder::fp8::swizzled_offset(row, byte); }
inline int wanted_key(int slot) { return kSliceKeys * (slot / kSliceKeys) + ladder::fp8::permuted_key(slot % kSliceKeys); }

// A map as the model sees it.
struct Map {
  std::uint32_t (*load)(int unit, int lane);
  std::uint32_t (*store)(int unit, int lane);
  std::uint32_t (*select)(int sigma, int lane);
};

inline constexpr int kNothing = -1;  // a byte no store wrote
inline int element(int key, int d) { return key * kRowBytes + d; }
inline int key_of(int e) { return e / kRowBytes; }
inline int dim_of(int e) { return e % kRowBytes; }

// Who wrote a byte of Vᵀ: which unit, lane, store register and byte of it.
struct Writer {
  int unit = -1, lane = -1, reg = -1, byte = -1;
};
inline std::string describe(const Writer& w) {
  return fmt::format("unit {}, lane {} = (q {}, t {}), store register {}, byte {}", w.unit, w.lane, group_of(w.lane),
                     quad_lane(w.lane), w.reg, w.byte);
}
inline std::string describe_unit(int unit) {
  const int c = unit_chunk(unit), kk = unit_slice(unit);
  return fmt::format("unit {} (head dims {}-{}, keys {}-{})", unit, 16 * c, 16 * c + 15, kSliceKeys * kk,
                     kSliceKeys * kk + kSliceKeys - 1);
}

// What the 32 units put where in Vᵀ (indexed by Vᵀ's byte offset in shared memory).
struct Emulation {
  std::vector<int> element = std::vector<int>(kTileBytes, kNothing);  // V's element the byte holds
  std::vector<int> writes = std::vector<int>(kTileBytes, 0);
  std::vector<Writer> first = std::vector<Writer>(kTileBytes), second = std::vector<Writer>(kTileBytes);
};

using Word = std::array<int, 4>;  // a register's four bytes, each named by its V element
inline Word byte_perm(const Word& x, const Word& y, std::uint32_t s) {
  constexpr int kByteIndexBits = 0x7, kNibbleBits = 4, kWordBytes = 4;
  Word out{};
  for (int n = 0; n < kWordBytes; ++n) {
    const int pick = int(s >> (kNibbleBits * n)) & kByteIndexBits;
    out[n] = pick < kWordBytes ? x[pick] : y[pick - kWordBytes];
  }
  return out;
}

// Runs the map on one tile. Every address must have passed check 1 (aligned, inside the tile).
inline Emulation emulate(const Map& m) {
  std::vector<int> v(kTileBytes);  // V in shared memory, each byte named
  for (int key = 0; key < kRows; ++key)
    for (int d = 0; d < kRowBytes; ++d) v[place(key, d)] = element(key, d);
  Emulation e;
  for (int unit = 0; unit < kUnits; ++unit) {
    std::array<std::uint32_t, kLanes> load{}, store{};
    for (int lane = 0; lane < kLanes; ++lane) {
      load[lane] = m.load(unit, lane);
      store[lane] = m.store(unit, lane);
    }
    for (int lane = 0; lane < kLanes; ++lane) {
      const int q = group_of(lane), t = quad_lane(lane);
      std::array<Word, kMatrices> r{};
      for (int i = 0; i < kMatrices; ++i)
        for (int half = 0; half < 2; ++half) {  // rows 2t (the low 16 bits) and 2t + 1
          const std::uint32_t row = load[kMatrixRows * i + 2 * t + half];
          r[i][2 * half] = v[row + 2 * q];
          r[i][2 * half + 1] = v[row + 2 * q + 1];
        }
      for (int h = 0; h < 2; ++h)
        for (int sigma = 0; sigma < 2; ++sigma) {
          const int reg = 2 * h + sigma;
          const Word w = byte_perm(r[2 * h], r[2 * h + 1], m.select(sigma, lane));
          for (int b = 0; b < 4; ++b) {
            const std::uint32_t at = store[kMatrixRows * reg + q] + 4 * t + b;
            const Writer who{unit, lane, reg, b};
            (e.writes[at] == 0 ? e.first[at] : e.second[at]) = who;
            ++e.writes[at];
            e.element[at] = w[b];
          }
        }
    }
  }
  return e;
}

// ---- The checks ---------------------------------------------------------------------------------
inline const char* check_name(int check) {
  switch (check) {
    case 1: return "the addresses";
    case 2: return "each byte once";
    case 3: return "the bytes";
    case 4: return "bank conflicts";
    default: return "passed";
  }
}

// Check 1: every row address a lane gives is 16-byte aligned and inside its 16,384-byte tile.
inline std::string check_addresses(const Map& m) {
  for (int unit = 0; unit < kUnits; ++unit)
    for (int lane = 0; lane < kLanes; ++lane)
      for (bool is_load : {true, false}) {
        const std::uint32_t off = is_load ? m.load(unit, lane) : m.store(unit, lane);
        const char* why = off % kChunkBytes ? "not a multiple of 16: a row address of ldmatrix and stmatrix must be 16-byte aligned"
                          : off >= std::uint32_t(kTileBytes) ? "outside the 16384-byte tile"
                                                             : nullptr;
        if (why)
          return fmt::format("{}, lane {} (row {} of {} matrix {}): {} = {}: {}", describe_unit(unit), lane, row_of(lane),
                             is_load ? "load" : "store", matrix_of(lane), is_load ? "load_offset" : "store_offset", off, why);
      }
  return {};
}

// Check 2: every byte of Vᵀ written by exactly one lane's store.
inline std::string check_once(const Emulation& e) {
  int never = 0, again = 0;
  std::string first;
  for (int d = 0; d < kRows; ++d)
    for (int slot = 0; slot < kRowBytes; ++slot) {
      const std::uint32_t at = place(d, slot);
      const int n = e.writes[at];
      never += n == 0;
      again += n > 1;
      if (n != 1 && first.empty())
        first = n == 0 ? fmt::format("Vᵀ[{}][{}] (byte {} of Vᵀ) is never written", d, slot, at)
                       : fmt::format("Vᵀ[{}][{}] (byte {} of Vᵀ) is written {} times: by {} and by {}", d, slot, at, n,
                                     describe(e.first[at]), describe(e.second[at]));
    }
  if (first.empty()) return {};
  return fmt::format("{} ({} bytes never written, {} written more than once: where two stores meet, another place is "
                     "missed)", first, never, again);
}

// Which slot of Vᵀ's row the element of `key` belongs in.
inline int slot_of_key(int key) {
  for (int slot = 0; slot < kRowBytes; ++slot)
    if (wanted_key(slot) == key) return slot;
  return -1;
}

// What a wrong byte most likely says about the map (a question, not a verdict: the model sees
// only where the bytes went).
inline std::string hint(int d, int slot, int got) {
  const int key = wanted_key(slot), k2 = key_of(got), d2 = dim_of(got);
  if (k2 != key && d2 != d && (k2 ^ 1) == key && (d2 ^ 1) == d)
    return fmt::format("V[{}][{}] and V[{}][{}] are the two bytes of one 16-bit element of the loaded register: the "
                       "word kept ldmatrix's 16-bit elements whole, two head dims of one key. A Vᵀ row is ONE head dim: "
                       "which bytes of R[2h] and R[2h + 1] hold head dim {}? (the selector)",
                       k2, d2, k2, d2 ^ 1, d);
  if (k2 == key && (d2 ^ 1) == d)
    return fmt::format("the right key, the other head dim of its pair ({} for {}): bytes 0 and 2 of a loaded register are "
                       "head dim 16c + 2q, bytes 1 and 3 head dim 16c + 2q + 1. The row this register goes to "
                       "(store_offset: row q of store matrix 2h + σ) and the head dim its selector picks "
                       "(selector(σ, lane), lane group q) must agree, for every q",
                       d2, d);
  if (k2 == key && d2 % kChunkBytes == d % kChunkBytes)
    return fmt::format("the right key, head dim {} for {}: the same byte of another 16-byte chunk of key {}'s row of V. "
                       "V is stored in the 128-byte swizzle: chunk x of key k's row sits at chunk position x ^ (k % 8). "
                       "Does the load row's address follow it?",
                       d2, d, key);
  const int slot2 = slot_of_key(k2);
  if (d2 == d && slot2 % kChunkBytes == slot % kChunkBytes)
    return fmt::format("the right head dim, but key {} belongs at slot {}: the same byte of another 16-byte chunk of Vᵀ's "
                       "row {}. Vᵀ must be in the 128-byte swizzle too (wgmma's descriptor reads it so): chunk x of row d "
                       "at chunk position x ^ (d % 8). Does the store row's address follow it?",
                       k2, slot2, d);
  if (d2 == d)
    return fmt::format("the right head dim, but key {} belongs at slot {}: a store register's four bytes are slots "
                       "16h + 4t .. 16h + 4t + 3 in P's order, keys 16h + 2t, 16h + 2t + 1, 16h + 8 + 2t, 16h + 9 + 2t of "
                       "the slice. Lane (q, t) receives rows 2t and 2t + 1 of matrices 2h and 2h + 1: are those rows the "
                       "right keys (load_offset), and does the selector take their bytes in slot order?",
                       k2, slot2);
  if (k2 == key)
    return fmt::format("the right key, head dim {} for {}: after the load lane group q holds head dims 16c + 2q and "
                       "16c + 2q + 1 only. Which row of the store matrix does group q's register go to (store_offset, "
                       "row r = q), and is it one of those two head dims?",
                       d2, d);
  return "another key and another head dim: which Vᵀ row and slots does this register go to (store_offset), and which of "
         "the loaded bytes does its selector pick?";
}

// Check 3: every byte of Vᵀ holds the V element P's order wants there. Returns the diagnosis and
// counts the wrong bytes.
inline std::string check_bytes(const Emulation& e, int& wrong) {
  wrong = 0;
  std::string first, why;
  for (int d = 0; d < kRows; ++d)
    for (int slot = 0; slot < kRowBytes; ++slot) {
      const std::uint32_t at = place(d, slot);
      const int want = element(wanted_key(slot), d), got = e.element[at];
      if (got == want) continue;
      ++wrong;
      if (got == kNothing) continue;  // check 2 names it
      if (first.empty())
        first = fmt::format("Vᵀ[{}][{}] holds V[{}][{}] where V[{}][{}] belongs (written by {}", d, slot, key_of(got),
                            dim_of(got), wanted_key(slot), d, describe(e.first[at])),
        why = hint(d, slot, got);
    }
  if (!wrong) return {};
  if (first.empty()) return fmt::format("{} of the {} bytes are wrong, each one that no store wrote (check 2)", wrong, kTileBytes);
  return fmt::format("{}; {} of the {} bytes are wrong). {}", first, wrong, kTileBytes, why);
}

// Check 4: the phases of every ldmatrix and stmatrix. Counts each kind's wavefronts (ideal: one a
// phase, 4 an instruction, 128 for the 32 units).
struct Banks {
  int load_wavefronts = 0, store_wavefronts = 0, ideal = 0;
  int conflicted_loads = 0, conflicted_stores = 0;  // phases
  std::string first;
};
inline Banks check_banks(const Map& m) {
  Banks b;
  for (int unit = 0; unit < kUnits; ++unit)
    for (bool is_load : {true, false})
      for (int i = 0; i < kMatrices; ++i) {
        std::array<std::uint32_t, kMatrixRows> rows{};
        for (int r = 0; r < kMatrixRows; ++r) {
          const int lane = kMatrixRows * i + r;
          rows[r] = is_load ? m.load(unit, lane) : m.store(unit, lane);
        }
        // Distinct rows at each chunk position: one lane repeating another's row is a broadcast.
        std::array<std::vector<int>, kChunksPerRow> at{};
        for (int r = 0; r < kMatrixRows; ++r) {
          auto& lanes = at[(rows[r] / kChunkBytes) % kChunksPerRow];
          bool repeat = false;
          for (int other : lanes) repeat = repeat || rows[other] == rows[r];
          if (!repeat) lanes.push_back(r);
        }
        int ways = 1, worst = 0;
        for (int p = 0; p < kChunksPerRow; ++p)
          if (int(at[p].size()) > ways) ways = int(at[p].size()), worst = p;
        (is_load ? b.load_wavefronts : b.store_wavefronts) += ways;
        b.ideal += is_load;
        if (ways == 1) continue;
        ++(is_load ? b.conflicted_loads : b.conflicted_stores);
        if (!b.first.empty()) continue;
        const int la = kMatrixRows * i + at[worst][0], lb = kMatrixRows * i + at[worst][1];
        std::string listed, mods;
        for (int r = 0; r < kMatrixRows; ++r) {
          listed += fmt::format("{}{}", r ? " " : "", rows[r] / kRowBytes);
          mods += fmt::format("{}{}", r ? " " : "", (rows[r] / kRowBytes) % kSwizzleRows);
        }
        const char* tile = is_load ? "V" : "Vᵀ";
        const std::uint32_t ra = rows[at[worst][0]] / kRowBytes, rb = rows[at[worst][1]] / kRowBytes;
        // Two rows with one r % 8 collide under the swizzle whatever the chunk; two with different
        // r % 8 collide only if their addresses are not swizzled the same way.
        const std::string why =
            ra % kSwizzleRows == rb % kSwizzleRows
                ? std::string("the swizzle moves row r's chunks by r % 8, so two rows with the same r % 8 put the same "
                              "chunk at the same position")
                : fmt::format("rows {} and {} differ in r % 8, so in the swizzle one chunk of each sits at two different "
                              "positions: are these addresses swizzled with their rows?", ra, rb);
        b.first = fmt::format(
            "{}, {} matrix {}: rows of lanes {} and {} ({} rows {} and {}) share swizzled chunk {} (banks {}-{}): {}-way. "
            "The matrix's eight {} rows are {}, row % 8 = {}: {}",
            describe_unit(unit), is_load ? "load" : "store", i, la, lb, tile, ra, rb, worst, 4 * worst, 4 * worst + 3,
            ways, tile, listed, mods, why);
      }
  return b;
}

// Everything the checker prints about the map: the first failed check and each check's line.
struct Report {
  int failed = 0;  // the first check that failed (1-4), 0 if none
  std::string what;
  std::array<std::string, 5> line;  // line[1..4]: each check's result ("" = not run)
  bool emulated = false;
  Emulation emulation;
};

inline Report check(const Map& m) {
  Report rep;
  auto fail = [&](int check, const std::string& what) {
    rep.line[check] = "FAIL  " + what;
    if (!rep.failed) rep.failed = check, rep.what = what;
  };
  if (const std::string a = check_addresses(m); !a.empty()) {
    fail(1, a);
    rep.line[2] = rep.line[3] = rep.line[4] = "not run (check 1 failed: the instructions would read or write outside the tiles)";
    return rep;
  }
  rep.line[1] = fmt::format("ok    all {} row addresses of {} ldmatrix and {} stmatrix aligned and inside their tiles",
                            2 * kUnits * kLanes, kUnits, kUnits);
  rep.emulation = emulate(m);
  rep.emulated = true;
  if (const std::string once = check_once(rep.emulation); !once.empty()) fail(2, once);
  else rep.line[2] = fmt::format("ok    each of the {} bytes of Vᵀ written once", kTileBytes);
  int wrong = 0;
  if (const std::string bytes = check_bytes(rep.emulation, wrong); !bytes.empty()) fail(3, bytes);
  else rep.line[3] = fmt::format("ok    every Vᵀ[d][slot] holds V[32·(slot / 32) + permuted_key(slot % 32)][d]");
  const Banks b = check_banks(m);
  const std::string counts = fmt::format("ldmatrix {} wavefronts, stmatrix {}, where {} each would do ({} of the {} load "
                                         "phases and {} of the {} store phases conflicted)",
                                         b.load_wavefronts, b.store_wavefronts, b.ideal, b.conflicted_loads, b.ideal,
                                         b.conflicted_stores, b.ideal);
  if (!b.first.empty()) fail(4, counts + "; the first: " + b.first);
  else rep.line[4] = "ok    " + counts;
  return rep;
}

// What the GPU must write for one tile, per the emulation: Vᵀ row-major [d][slot], each entry the
// byte of `v` (row-major [key][d]) it holds, the poison for a byte never written, or kNothing where
// two stores raced for the byte (the hardware's order is not the model's).
inline std::vector<int> predicted(const Emulation& e, const std::uint8_t* v, int poison) {
  std::vector<int> out(kTileBytes);
  for (int d = 0; d < kRows; ++d)
    for (int slot = 0; slot < kRowBytes; ++slot) {
      const std::uint32_t at = place(d, slot);
      const int n = e.writes[at];
      out[d * kRowBytes + slot] = n == 0 ? poison : n > 1 ? kNothing : v[e.element[at]];
    }
  return out;
}

}  // namespace lab14::model
