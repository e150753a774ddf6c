// Lab 11's CPU side (given, do not edit): your three answers checked against the rules of the
// 128-byte swizzle and of the wgmma matrix descriptor (PTX ISA, "Matrix Descriptor Format";
// common/device/hopper/wgmma.cuh), with a diagnosis for each classic mistake. Used by the checker
// (your answers, then the GPU run) and by model_selftest.cpp (the reference passes; each classic
// mistake is caught with its diagnosis).
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <string>
#include <vector>

#include "labs/L11_wgmma_descriptor/lab11.hpp"

namespace lab11::model {

struct Answers {
  std::uint32_t (*offset)(int row, int col);
  std::uint64_t (*desc)(std::uint32_t smem_addr);
  std::uint64_t (*advance)();
};

// What went wrong, one name per classic mistake (model_selftest.cpp checks each is recognised).
enum class Mistake {
  kNone,
  // the offset (checks 1-3)
  kOutsideTile, kMisaligned, kNotBijective, kNoXor, kWrongRowBits, kOtherLayout,
  // the descriptor (check 4)
  kStartNotShifted, kStartWrong, kStrayBits, kSwizzleTensorMapEnum, kSwizzleNone, kSwizzleOther,
  kLboSboSwapped, kSboOneRow, kSboWrong, kLboWrong, kBaseOffset,
  // the advance (check 5)
  kAdvanceBytes, kAdvanceElements, kAdvanceHalfStep, kAdvanceOneRow, kAdvanceTouchesFields, kAdvanceWrong,
};

struct Finding {
  int check = 0;  // 0: every check passed
  Mistake mistake = Mistake::kNone;
  std::string what;
};

inline const char* check_name(int check) {
  switch (check) {
    case 1: return "the offset: inside the tile, one byte pair per element";
    case 2: return "the offset: an 8-row atom without bank conflicts";
    case 3: return "the offset: the hardware's 128-byte swizzle";
    case 4: return "the descriptor's fields";
    case 5: return "the k-step advance";
    default: return "passed";
  }
}

// The layout the hardware reads (TMA writes it with CU_TENSOR_MAP_SWIZZLE_128B): address bits 4-6
// (the chunk) XOR address bits 7-9 (the row within the atom), on a 1024-byte-aligned tile.
inline std::uint32_t hardware_offset(int row, int col) {
  const std::uint32_t plain = std::uint32_t(row * kRowBytes + col * kElementBytes);
  return plain ^ (((plain >> 7) & 7u) << 4);
}

// The decoded fields of a descriptor.
struct Fields {
  std::uint32_t start, lbo, sbo, base, swizzle;  // start/lbo/sbo in 16-byte units, as stored
  std::uint64_t stray;                           // bits outside every field
};
inline Fields decode(std::uint64_t d) {
  constexpr std::uint64_t kFieldBits = 0x3FFFull | (0x3FFFull << 16) | (0x3FFFull << 32) | (7ull << 49) | (3ull << 62);
  return {std::uint32_t(d & 0x3FFF), std::uint32_t((d >> 16) & 0x3FFF), std::uint32_t((d >> 32) & 0x3FFF),
          std::uint32_t((d >> 49) & 7), std::uint32_t(d >> 62), d & ~kFieldBits};
}
inline std::string describe(std::uint64_t d) {
  const Fields f = decode(d);
  return fmt::format("0x{:016x} = start {} (×16 = {} bytes), LBO {} (×16 = {} bytes), SBO {} (×16 = {} bytes), "
                     "base offset {}, swizzle mode {}{}",
                     d, f.start, f.start * 16, f.lbo, f.lbo * 16, f.sbo, f.sbo * 16, f.base, f.swizzle,
                     f.stray ? fmt::format(", stray bits 0x{:016x}", f.stray) : std::string());
}

// Where logical chunk `chunk` of `row` was put: its chunk position in the row, or -1 if the
// offset does not keep the row at row·128 or the 16-byte chunk in one piece.
inline int chunk_position(const Answers& a, int row, int chunk) {
  const std::uint32_t off = a.offset(row, chunk * 8);
  if (off / kRowBytes != std::uint32_t(row) || off % kChunkBytes != 0) return -1;
  for (int i = 1; i < 8; ++i)
    if (a.offset(row, chunk * 8 + i) != off + std::uint32_t(i * kElementBytes)) return -1;
  return int(off % kRowBytes) / kChunkBytes;
}
inline std::string positions_of_chunk0(const Answers& a, int rows) {
  std::string s;
  for (int r = 0; r < rows; ++r) s += fmt::format("{}{}", r ? " " : "", chunk_position(a, r, 0));
  return s;
}

// Checks 1-3: the offset of every element.
inline Finding check_offset(const Answers& a) {
  std::vector<int> owner(kTileBytes / kElementBytes, -1);
  for (int r = 0; r < kRows; ++r)
    for (int c = 0; c < kCols; ++c) {
      const std::uint32_t off = a.offset(r, c);
      if (off >= std::uint32_t(kTileBytes))
        return {1, Mistake::kOutsideTile,
                fmt::format("element (row {}, col {}) is at byte {}, outside the {}-byte tile", r, c, off, kTileBytes)};
      if (off % kElementBytes)
        return {1, Mistake::kMisaligned,
                fmt::format("element (row {}, col {}) is at byte {}: a half must start on an even byte", r, c, off)};
      int& o = owner[off / kElementBytes];
      if (o >= 0)
        return {1, Mistake::kNotBijective,
                fmt::format("elements (row {}, col {}) and (row {}, col {}) are both at byte {}: two elements, one "
                            "place (is the chunk index counted in 16-byte chunks, col / 8?)",
                            o / kCols, o % kCols, r, c, off)};
      o = r * kCols + c;
    }
  // Check 2: in each atom, a logical chunk of the eight rows must land in eight different 16-byte
  // bank groups (offset / 16 mod 8): else a read of that chunk column is a bank conflict.
  for (int atom = 0; atom < kRows / kAtomRows; ++atom)
    for (int chunk = 0; chunk < kChunksPerRow; ++chunk) {
      int seen[8] = {-1, -1, -1, -1, -1, -1, -1, -1};
      for (int i = 0; i < kAtomRows; ++i) {
        const int r = atom * kAtomRows + i;
        const int group = int(a.offset(r, chunk * 8) / kChunkBytes) % 8;
        if (seen[group] >= 0) {
          for (int rr = atom * kAtomRows; rr < (atom + 1) * kAtomRows; ++rr)
            for (int cc = 0; cc < kChunksPerRow; ++cc)
              if (chunk_position(a, rr, cc) < 0)
                return {2, Mistake::kOtherLayout,
                        fmt::format("rows {} and {} put chunk {} in the same bank group {}: a bank conflict. And the "
                                    "layout is not rows of 128 bytes with whole 16-byte chunks: chunk {} of row {} "
                                    "(cols {}..{}) is not 8 consecutive halves inside bytes {}..{}",
                                    seen[group], r, chunk, group, cc, rr, cc * 8, cc * 8 + 7, rr * kRowBytes,
                                    rr * kRowBytes + kRowBytes - 1)};
          bool same_everywhere = true;
          for (int rr = 1; rr < kRows; ++rr) same_everywhere = same_everywhere && chunk_position(a, rr, 0) == chunk_position(a, 0, 0);
          if (same_everywhere)
            return {2, Mistake::kNoXor,
                    fmt::format("rows {} and {} put chunk {} in the same bank group {}, and so do all eight rows "
                                "of the atom: an 8-way bank conflict. The chunk index is not XORed with anything "
                                "that changes from row to row (chunk 0 of rows 0..15 is at chunk positions {})",
                                seen[group], r, chunk, group, positions_of_chunk0(a, 16))};
          return {2, Mistake::kWrongRowBits,
                  fmt::format("rows {} and {} of one atom put chunk {} in the same bank group {}: a bank conflict. "
                              "The XOR uses the wrong bits of the row: chunk 0 of rows 0..15 is at chunk positions "
                              "{} (the eight rows of an atom need eight different ones)",
                              seen[group], r, chunk, group, positions_of_chunk0(a, 16))};
        }
        seen[group] = r;
      }
    }
  // Check 3: exactly the layout the hardware reads.
  for (int r = 0; r < kRows; ++r)
    for (int c = 0; c < kCols; ++c)
      if (a.offset(r, c) != hardware_offset(r, c)) {
        // An XOR with some other function of the row (every chunk of a row moved by the same mask)?
        bool xor_of_row = true;
        for (int rr = 0; rr < kRows && xor_of_row; ++rr)
          for (int cc = 0; cc < kChunksPerRow && xor_of_row; ++cc)
            xor_of_row = chunk_position(a, rr, cc) >= 0 && (chunk_position(a, rr, cc) ^ cc) == chunk_position(a, rr, 0);
        return {3, xor_of_row ? Mistake::kWrongRowBits : Mistake::kOtherLayout,
                fmt::format("element (row {}, col {}) is at byte {}, the hardware reads it at byte {}. Conflict-free, "
                            "but not the 128-byte swizzle: chunk 0 of rows 0..15 is at chunk positions {}; the "
                            "swizzle puts chunk c of row r at chunk position c XOR (r mod 8)",
                            r, c, a.offset(r, c), hardware_offset(r, c), positions_of_chunk0(a, 16))};
      }
  return {};
}

// The shared addresses the descriptor is tried at: 1024-byte aligned, below the 256 KiB its
// 14-bit start field can name.
inline constexpr std::uint32_t kTryAddresses[] = {0x0, 0x400, 0x2400, 0x10000, 0x30c00};

inline Finding check_desc(const Answers& a) {
  for (std::uint32_t addr : kTryAddresses) {
    const std::uint64_t d = a.desc(addr);
    const Fields f = decode(d);
    const std::string at = fmt::format("make_desc(0x{:x}) = {}", addr, describe(d));
    if (f.start != ((addr >> 4) & 0x3FFF)) {
      if (f.start == (addr & 0x3FFF) && addr != 0)
        return {4, Mistake::kStartNotShifted,
                at + fmt::format(": the start address field holds the address itself; it counts 16-byte units "
                                 "(0x{:x} >> 4 = 0x{:x})", addr, addr >> 4)};
      return {4, Mistake::kStartWrong,
              at + fmt::format(": the start address field should be 0x{:x} >> 4 = 0x{:x}", addr, addr >> 4)};
    }
    if (f.stray) {
      const bool swizzle_low = (f.stray >> 60) & 3;
      return {4, Mistake::kStrayBits,
              at + (swizzle_low ? ": bits 60-61 are set; the swizzle mode is bits 62-63 (a shift of 62)"
                                : ": bits are set outside every field (bits 14-15, 30-31, 46-48 and 52-61 are 0)")};
    }
    if (f.swizzle != 1) {
      if (f.swizzle == 3)
        return {4, Mistake::kSwizzleTensorMapEnum,
                at + ": swizzle mode 3 is the 32-byte swizzle in the descriptor's numbering (1 = 128-byte, 2 = "
                     "64-byte, 3 = 32-byte). 3 is CU_TENSOR_MAP_SWIZZLE_128B in the tensor map's enum: a "
                     "different numbering"};
      if (f.swizzle == 0)
        return {4, Mistake::kSwizzleNone,
                at + ": swizzle mode 0 says the tile is not swizzled; wgmma would read the chunks where the "
                     "plain layout has them. 128-byte is mode 1 (bits 62-63)"};
      return {4, Mistake::kSwizzleOther, at + ": swizzle mode 2 is the 64-byte swizzle; 128-byte is mode 1"};
    }
    if (f.lbo == kAtomBytes / 16 && f.sbo == 1)
      return {4, Mistake::kLboSboSwapped,
              at + ": LBO and SBO are swapped. SBO (bits 32-45) is the stride from one 8-row group to the next, "
                   "1024 bytes; LBO (bits 16-29) is unused here and set to 16 bytes"};
    if (f.sbo != kAtomBytes / 16) {
      if (f.sbo == kRowBytes / 16)
        return {4, Mistake::kSboOneRow,
                at + ": SBO of 128 bytes is one row. The hardware walks rows inside an 8-row atom itself; SBO is "
                     "the stride from one 8-row group to the next: 1024 bytes, encoded 64"};
      return {4, Mistake::kSboWrong,
              at + fmt::format(": SBO should be 1024 bytes (one 8-row atom), encoded 1024 >> 4 = 64, not {}", f.sbo)};
    }
    if (f.lbo > 1)
      return {4, Mistake::kLboWrong,
              at + ": LBO is unused by a swizzled K-major tile whose K extent is one 128-byte row; the PTX ISA "
                   "says it is assumed to be 1 (16 bytes). A larger value reads as a stride the layout does not have"};
    if (f.base != 0)
      return {4, Mistake::kBaseOffset,
              at + ": the base offset corrects a start that is not on the swizzle pattern's 1024-byte boundary; "
                   "this tile starts on one, so it is 0"};
  }
  return {};
}

inline Finding check_advance(const Answers& a) {
  const std::uint64_t adv = a.advance();
  const std::uint32_t addr = 0x2400;
  for (int kk = 1; kk < kKSteps; ++kk) {
    const std::uint64_t d = a.desc(addr) + std::uint64_t(kk) * adv;
    const Fields f = decode(d), f0 = decode(a.desc(addr));
    const std::uint32_t want = (addr + std::uint32_t(kk * kK * kElementBytes)) >> 4;
    const std::string at = fmt::format("k step {}: make_desc(0x{:x}) + {} × {} = {}", kk, addr, kk, adv, describe(d));
    if (f.lbo != f0.lbo || f.sbo != f0.sbo || f.base != f0.base || f.swizzle != f0.swizzle || f.stray != f0.stray)
      return {5, Mistake::kAdvanceTouchesFields,
              at + ": the advance changes fields other than the start address; only bits 0-13 move"};
    if (f.start != want) {
      const std::string step = fmt::format(": k step {} starts {} halves = {} bytes along the row, so the start field "
                                           "grows by {} per step ({} bytes >> 4)",
                                           kk, kk * kK, kk * kK * kElementBytes, (kK * kElementBytes) >> 4,
                                           kK * kElementBytes);
      if (adv == std::uint64_t(kK * kElementBytes))
        return {5, Mistake::kAdvanceBytes, at + step + ": an advance of 32 counts bytes, the field counts 16-byte units"};
      if (adv == std::uint64_t(kK))
        return {5, Mistake::kAdvanceElements, at + step + ": an advance of 16 counts halves, the field counts 16-byte units"};
      if (adv == 1)
        return {5, Mistake::kAdvanceHalfStep, at + step + ": an advance of 1 is 16 bytes, 8 halves: half a k16 step"};
      if (adv == std::uint64_t(kRowBytes >> 4) || adv == std::uint64_t(kRowBytes))
        return {5, Mistake::kAdvanceOneRow,
                at + step + ": that advance is one 128-byte row: it moves down the rows, not along K"};
      return {5, Mistake::kAdvanceWrong, at + step};
    }
  }
  return {};
}

inline Finding check(const Answers& a) {
  if (Finding f = check_offset(a); f.check) return f;
  if (Finding f = check_desc(a); f.check) return f;
  return check_advance(a);
}

}  // namespace lab11::model
