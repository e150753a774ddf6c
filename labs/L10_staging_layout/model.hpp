// Lab 10's CPU model (given, do not edit): a layout's shared-memory traffic, counted exactly.
//
// It enumerates every warp-wide shared-memory instruction that touches S or P in one key block of
// one CTA (lab10.hpp: 4 warps × (8 S stores + 16 S reads + 16 P stores + 4 ldmatrix.x4 of P)),
// with the 32 lanes' byte addresses and the access width, and counts the wavefronts each needs.
//
// The bank model (the one chapter 07's arithmetic uses, and Nsight Compute's shared-memory
// wavefront counts agree with it for these instructions): shared memory has 32 banks of 4-byte
// words, word w in bank w mod 32, and serves one 128-byte wavefront at a time. An instruction is
// split into lane groups of 128 bytes of requests: all 32 lanes for 4-byte (and narrower)
// accesses, half-warps for 8-byte accesses, quarter-warps for 16-byte accesses, and each of
// ldmatrix's 8-lane phases (8 rows of 16 bytes). A group needs as many wavefronts as the most
// DIFFERENT words any one bank must deliver to it (lanes asking for the same word share it: a
// broadcast, or two 2-byte halves of one word). The ideal is one wavefront per group; anything
// above is a bank conflict, "n-way" when a bank serves n different words.
//
// Before counting it checks that the layout IS a layout: one-to-one into its buffer, within the
// size allowed, and keeping together what one lane accesses at once (S's float pairs, P's 8-half
// rows of ldmatrix), aligned to the access width.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "labs/L10_staging_layout/lab10.hpp"

namespace lab10::model {

// A layout as the model sees it: the two index functions and the buffers' sizes in elements.
struct Layout {
  int (*s_index)(int row, int col);
  int s_floats;
  int (*p_index)(int row, int col);
  int p_halves;
};

enum class Kind { kSStore, kSLoad, kPStore, kPLdsm };
inline constexpr Kind kKinds[] = {Kind::kSStore, Kind::kSLoad, Kind::kPStore, Kind::kPLdsm};

inline const char* kind_name(Kind k) {
  switch (k) {
    case Kind::kSStore: return "the S store (st.shared.v2.f32, 8 bytes a lane)";
    case Kind::kSLoad: return "the S read (ld.shared.f32, 4 bytes a lane)";
    case Kind::kPStore: return "the P store (st.shared.b16, 2 bytes a lane)";
    case Kind::kPLdsm: return "the P read (ldmatrix.x4, 16 bytes a lane)";
  }
  return "?";
}
inline int per_warp(Kind k) {
  switch (k) {
    case Kind::kSStore: return kSStores;
    case Kind::kSLoad: return kSLoads;
    case Kind::kPStore: return kPStores;
    case Kind::kPLdsm: return kPLdsm;
  }
  return 0;
}
inline int width(Kind k) { return k == Kind::kSStore ? 8 : k == Kind::kSLoad ? 4 : k == Kind::kPStore ? 2 : 16; }
// Which instance i of a kind is, in the kernel's words.
inline std::string instance_name(Kind k, int warp, int i) {
  switch (k) {
    case Kind::kSStore: return fmt::format("warp {}, n8 tile {}, rows g{}", warp, i / 2, i % 2 ? " + 8" : "");
    case Kind::kSLoad:
    case Kind::kPStore: return fmt::format("warp {}, row {}, columns {}", warp, 8 * warp + i / 2, i % 2 ? "32-63" : "0-31");
    case Kind::kPLdsm: return fmt::format("warp {}, k16 slice {}", warp, i);
  }
  return "?";
}

// One lane's access: the logical element it starts at, its byte offset in the buffer.
struct LaneAccess {
  Coord at;
  long byte;
};
inline std::array<LaneAccess, 32> lanes(const Layout& l, Kind k, int warp, int i) {
  std::array<LaneAccess, 32> a{};
  for (int lane = 0; lane < 32; ++lane) {
    Coord c{};
    switch (k) {
      case Kind::kSStore: c = s_store(warp, lane, i); break;
      case Kind::kSLoad: c = s_load(warp, lane, i); break;
      case Kind::kPStore: c = p_store(warp, lane, i); break;
      case Kind::kPLdsm: c = p_ldsm(warp, lane, i); break;
    }
    const bool s = k == Kind::kSStore || k == Kind::kSLoad;
    a[lane] = {c, s ? 4L * l.s_index(c.row, c.col) : 2L * l.p_index(c.row, c.col)};
  }
  return a;
}

// The wavefronts of one instruction, and its worst conflict.
struct Count {
  int wavefronts = 0, ideal = 0;
  int ways = 1;            // the most different words one bank serves in one group (1: none)
  int lane_a = -1, lane_b = -1, bank = -1;  // two lanes of that group whose different words share `bank`
};
inline Count count(const std::array<LaneAccess, 32>& a, int bytes) {
  const int group = bytes == 16 ? 8 : bytes == 8 ? 16 : 32;
  Count c;
  for (int g0 = 0; g0 < 32; g0 += group) {
    std::map<int, std::map<long, int>> bank_words;  // bank -> word -> the first lane asking for it
    for (int lane = g0; lane < g0 + group; ++lane) {
      const long first = a[lane].byte / 4, last = (a[lane].byte + bytes - 1) / 4;
      for (long w = first; w <= last; ++w) bank_words[int(w % 32)].emplace(w, lane);
    }
    int worst = 1;
    for (const auto& [bank, words] : bank_words) {
      const int n = int(words.size());
      worst = std::max(worst, n);
      if (n > c.ways) {
        c.ways = n;
        c.bank = bank;
        c.lane_a = words.begin()->second;
        c.lane_b = std::next(words.begin())->second;
      }
    }
    c.wavefronts += worst;
    c.ideal += 1;
  }
  return c;
}

// The figures of one kind over a CTA's key block (4 warps), and its first conflicted instruction.
struct KindTotal {
  Kind kind;
  int instructions = 0, wavefronts = 0, ideal = 0;
  std::string first_conflict;  // empty: conflict-free
};

struct Finding {
  std::string what;  // empty: the layout passed every check
  std::vector<std::string> conflicts;  // one line per conflicted kind (check 4)
};

// Checks 1-3: the buffers' sizes, one-to-one, the vector accesses kept whole and aligned.
inline std::string check_shape(const Layout& l) {
  struct Buf {
    const char* name;
    int (*index)(int, int);
    int size, max, vec, bytes;
  };
  const Buf bufs[] = {{"S", l.s_index, l.s_floats, kMaxSFloats, 2, 4}, {"P", l.p_index, l.p_halves, kMaxPHalves, 8, 2}};
  for (const Buf& b : bufs) {
    if (b.size < kRows * kCols || b.size > b.max)
      return fmt::format("check 1 (size): {} is {} elements; a layout needs {} to {} ({} rows × {} up to {} × {})", b.name,
                         b.size, kRows * kCols, b.max, kRows, kCols, kRows, b.max / kRows);
  }
  for (const Buf& b : bufs) {
    std::map<int, Coord> seen;
    for (int r = 0; r < kRows; ++r)
      for (int c = 0; c < kCols; ++c) {
        const int at = b.index(r, c);
        if (at < 0 || at >= b.size)
          return fmt::format("check 2 (one-to-one): {}[{}][{}] is at {}, outside the buffer [0, {})", b.name, r, c, at, b.size);
        if (auto [it, fresh] = seen.emplace(at, Coord{r, c}); !fresh)
          return fmt::format("check 2 (one-to-one): {}[{}][{}] and {}[{}][{}] are both at {}", b.name, it->second.row,
                             it->second.col, b.name, r, c, at);
      }
  }
  for (const Buf& b : bufs)
    for (int r = 0; r < kRows; ++r)
      for (int c = 0; c < kCols; c += b.vec) {
        const int at = b.index(r, c);
        if (at % b.vec != 0)
          return fmt::format("check 3 (vectors): {}[{}][{}] is at {}, not a multiple of {}: an access of {} bytes there is "
                             "misaligned", b.name, r, c, at, b.vec, b.vec * b.bytes);
        for (int i = 1; i < b.vec; ++i)
          if (b.index(r, c + i) != at + i)
            return fmt::format("check 3 (vectors): {}[{}][{}] is at {}, not {} = {}[{}][{}] + {}: one lane accesses {}[{}][{} .. {}] "
                               "at once ({} bytes), so they must stay contiguous", b.name, r, c + i, b.index(r, c + i),
                               at + i, b.name, r, c, i, b.name, r, c, c + b.vec - 1, b.vec * b.bytes);
      }
  return {};
}

// Check 4: every instruction's wavefronts. `totals` gets one entry per kind.
inline std::vector<KindTotal> count_all(const Layout& l) {
  std::vector<KindTotal> totals;
  for (Kind k : kKinds) {
    KindTotal t{k};
    for (int warp = 0; warp < kWarps; ++warp)
      for (int i = 0; i < per_warp(k); ++i) {
        const auto a = lanes(l, k, warp, i);
        const Count c = count(a, width(k));
        ++t.instructions;
        t.wavefronts += c.wavefronts;
        t.ideal += c.ideal;
        if (c.ways > 1 && t.first_conflict.empty()) {
          const bool s = k == Kind::kSStore || k == Kind::kSLoad;
          const auto& x = a[c.lane_a];
          const auto& y = a[c.lane_b];
          t.first_conflict = fmt::format(
              "{} ({}): lanes {} and {} hit bank {} ({}[{}][{}] at byte {}, {}[{}][{}] at byte {}), {}-way: {} wavefronts "
              "where {} would do",
              kind_name(k), instance_name(k, warp, i), c.lane_a, c.lane_b, c.bank, s ? "S" : "P", x.at.row, x.at.col, x.byte,
              s ? "S" : "P", y.at.row, y.at.col, y.byte, c.ways, c.wavefronts, c.ideal);
        }
      }
    totals.push_back(t);
  }
  return totals;
}

inline Finding check(const Layout& l) {
  Finding f;
  f.what = check_shape(l);
  if (!f.what.empty()) return f;
  for (const auto& t : count_all(l))
    if (!t.first_conflict.empty()) f.conflicts.push_back(t.first_conflict);
  if (!f.conflicts.empty()) f.what = "check 4 (bank conflicts): " + f.conflicts.front();
  return f;
}

// The series' workload (chapter 07: B = 1, H = 64, N = 1024, non-causal): 32 query blocks × 64
// heads, 16 key blocks each. Excess wavefronts there = this many times a CTA key block's excess.
inline constexpr long kSeriesCtaBlocks = 32L * 64 * 16;

}  // namespace lab10::model
