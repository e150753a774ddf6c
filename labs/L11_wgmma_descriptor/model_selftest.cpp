// A test of lab 11's CPU model (a CPU test, label cpu; not part of the lab): the reference answers
// must pass, and each classic mistake must be caught by the right check with the right diagnosis.
// A model that passed everything would let any starter through.
#include <fmt/format.h>

#include <cstdint>
#include <string>
#include <vector>

#include "labs/L11_wgmma_descriptor/model.hpp"

namespace {

using lab11::model::Answers;
using lab11::model::Mistake;

constexpr std::uint64_t field(std::uint32_t bytes) { return (bytes >> 4) & 0x3FFF; }

std::uint32_t ref_offset(int r, int c) { return std::uint32_t(r * 128 + (((c / 8) ^ (r % 8)) * 16) + (c % 8) * 2); }
std::uint64_t ref_desc(std::uint32_t a) { return field(a) | (field(16) << 16) | (field(1024) << 32) | (std::uint64_t(1) << 62); }
std::uint64_t ref_advance() { return 2; }

struct Case {
  std::string name;
  Answers answers;
  int check;  // 0: must pass
  Mistake mistake;
};

}  // namespace

int main() {
  const Answers ref{ref_offset, ref_desc, ref_advance};
  std::vector<Case> cases;
  cases.push_back({"the reference answers", ref, 0, Mistake::kNone});
  auto with_offset = [&](std::string name, std::uint32_t (*f)(int, int), int check, Mistake m) {
    Answers a = ref;
    a.offset = f;
    cases.push_back({std::move(name), a, check, m});
  };
  auto with_desc = [&](std::string name, std::uint64_t (*f)(std::uint32_t), Mistake m) {
    Answers a = ref;
    a.desc = f;
    cases.push_back({std::move(name), a, 4, m});
  };
  auto with_advance = [&](std::string name, std::uint64_t (*f)(), Mistake m) {
    Answers a = ref;
    a.advance = f;
    cases.push_back({std::move(name), a, 5, m});
  };
  cases.push_back({"the starter (row-major offset, descriptor 0, advance 0)",
                   {[](int r, int c) { return std::uint32_t(r * 128 + c * 2); }, [](std::uint32_t) -> std::uint64_t { return 0ull; },
                    []() -> std::uint64_t { return 0ull; }},
                   2, Mistake::kNoXor});
  with_offset("no XOR (row-major)", [](int r, int c) { return std::uint32_t(r * 128 + c * 2); }, 2, Mistake::kNoXor);
  with_offset("XOR with the atom index (row / 8) % 8",
              [](int r, int c) { return std::uint32_t(r * 128 + (((c / 8) ^ ((r / 8) % 8)) * 16) + (c % 8) * 2); }, 2,
              Mistake::kWrongRowBits);
  with_offset("XOR with row % 4", [](int r, int c) { return std::uint32_t(r * 128 + (((c / 8) ^ (r % 4)) * 16) + (c % 8) * 2); },
              2, Mistake::kWrongRowBits);
  with_offset("XOR with (row / 2) % 8",
              [](int r, int c) { return std::uint32_t(r * 128 + (((c / 8) ^ ((r / 2) % 8)) * 16) + (c % 8) * 2); }, 2,
              Mistake::kWrongRowBits);
  with_offset("XOR with (row + 1) % 8 (conflict-free, not the hardware's)",
              [](int r, int c) { return std::uint32_t(r * 128 + (((c / 8) ^ ((r + 1) % 8)) * 16) + (c % 8) * 2); }, 3,
              Mistake::kWrongRowBits);
  with_offset("a rotation (chunk + row) % 8 instead of an XOR",
              [](int r, int c) { return std::uint32_t(r * 128 + (((c / 8 + r) % 8) * 16) + (c % 8) * 2); }, 3,
              Mistake::kOtherLayout);
  with_offset("XOR with row % 16 (leaves the row)",
              [](int r, int c) { return std::uint32_t(r * 128 + (((c / 8) ^ (r % 16)) * 16) + (c % 8) * 2); }, 1,
              Mistake::kNotBijective);
  with_offset("chunks of 8 bytes (col / 4)",
              [](int r, int c) { return std::uint32_t(r * 128 + (((c / 4) ^ (r % 8)) * 8) + (c % 4) * 2); }, 2,
              Mistake::kOtherLayout);
  with_offset("col in bytes twice (col * 4)", [](int r, int c) { return std::uint32_t(r * 256 + c * 4); }, 1,
              Mistake::kOutsideTile);
  with_offset("column-major", [](int r, int c) { return std::uint32_t(c * 128 + r * 2); }, 2, Mistake::kOtherLayout);
  with_desc("start address not shifted",
            [](std::uint32_t a) -> std::uint64_t { return std::uint64_t(a & 0x3FFF) | (field(16) << 16) | (field(1024) << 32) | (1ull << 62); },
            Mistake::kStartNotShifted);
  with_desc("swizzle mode 3 (the tensor map's CU_TENSOR_MAP_SWIZZLE_128B)",
            [](std::uint32_t a) -> std::uint64_t { return field(a) | (field(16) << 16) | (field(1024) << 32) | (3ull << 62); },
            Mistake::kSwizzleTensorMapEnum);
  with_desc("swizzle mode 0", [](std::uint32_t a) -> std::uint64_t { return field(a) | (field(16) << 16) | (field(1024) << 32); },
            Mistake::kSwizzleNone);
  with_desc("swizzle mode 2 (64-byte)",
            [](std::uint32_t a) -> std::uint64_t { return field(a) | (field(16) << 16) | (field(1024) << 32) | (2ull << 62); },
            Mistake::kSwizzleOther);
  with_desc("swizzle at bit 61",
            [](std::uint32_t a) -> std::uint64_t { return field(a) | (field(16) << 16) | (field(1024) << 32) | (1ull << 61); },
            Mistake::kStrayBits);
  with_desc("LBO and SBO swapped",
            [](std::uint32_t a) -> std::uint64_t { return field(a) | (field(1024) << 16) | (field(16) << 32) | (1ull << 62); },
            Mistake::kLboSboSwapped);
  with_desc("SBO of one row (128 bytes)",
            [](std::uint32_t a) -> std::uint64_t { return field(a) | (field(16) << 16) | (field(128) << 32) | (1ull << 62); },
            Mistake::kSboOneRow);
  with_desc("SBO of the whole tile (8192 bytes)",
            [](std::uint32_t a) -> std::uint64_t { return field(a) | (field(16) << 16) | (field(8192) << 32) | (1ull << 62); },
            Mistake::kSboWrong);
  with_desc("SBO in bytes, not shifted",
            [](std::uint32_t a) -> std::uint64_t { return field(a) | (field(16) << 16) | (std::uint64_t(1024) << 32) | (1ull << 62); },
            Mistake::kSboWrong);
  with_desc("LBO of 1024 beside the right SBO",
            [](std::uint32_t a) -> std::uint64_t { return field(a) | (field(1024) << 16) | (field(1024) << 32) | (1ull << 62); },
            Mistake::kLboWrong);
  with_desc("base offset 1",
            [](std::uint32_t a) -> std::uint64_t { return field(a) | (field(16) << 16) | (field(1024) << 32) | (1ull << 49) | (1ull << 62); },
            Mistake::kBaseOffset);
  with_advance("advance 32 (bytes)", []() -> std::uint64_t { return 32ull; }, Mistake::kAdvanceBytes);
  with_advance("advance 16 (halves)", []() -> std::uint64_t { return 16ull; }, Mistake::kAdvanceElements);
  with_advance("advance 1 (half a k step)", []() -> std::uint64_t { return 1ull; }, Mistake::kAdvanceHalfStep);
  with_advance("advance 8 (one row)", []() -> std::uint64_t { return 8ull; }, Mistake::kAdvanceOneRow);
  with_advance("advance in the SBO field", []() -> std::uint64_t { return 2ull << 32; }, Mistake::kAdvanceTouchesFields);
  with_advance("advance 0", []() -> std::uint64_t { return 0ull; }, Mistake::kAdvanceWrong);

  int failures = 0;
  for (const auto& c : cases) {
    const auto f = lab11::model::check(c.answers);
    const bool ok = f.check == c.check && f.mistake == c.mistake;
    fmt::print("{} {}: {}\n", ok ? "ok  " : "FAIL", c.name,
               f.check ? fmt::format("check {} ({})", f.check, lab11::model::check_name(f.check)) : std::string("passes"));
    if (!ok || c.name.starts_with("the starter")) fmt::print("      {}\n", f.check ? f.what : std::string("(no finding)"));
    if (!ok) fmt::print("      expected check {} with mistake #{}, got check {} with mistake #{}\n", c.check,
                        int(c.mistake), f.check, int(f.mistake));
    failures += !ok;
  }
  fmt::print("{}\n", failures ? fmt::format("model selftest: {} case(s) FAILED", failures) : "model selftest: PASS");
  return failures ? 1 : 0;
}
