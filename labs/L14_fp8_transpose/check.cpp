// Lab 14's checker (given, do not edit): your transpose_map.hpp in the CPU model first (the three
// instructions of every unit emulated lane by lane on one tile: addresses, each byte once, the
// bytes, the banks; no GPU needed), then on an H100/H200 the kernel (transpose.cu) with the real
// instructions through your map on seven random V blocks, byte for byte against V, and against
// what the model predicted your map would write.
#include <fmt/format.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

// <>, not "": your map or the solution's (labs/CMakeLists.txt), the file the kernel compiled.
#include <transpose_map.hpp>

#include "labs/L14_fp8_transpose/lab14.hpp"
#include "labs/L14_fp8_transpose/model.hpp"
#include "labs/common/lab.hpp"

namespace {

using namespace lab14;

constexpr int kGpuTiles = 7;            // V blocks in the GPU run, one CTA each
constexpr std::uint32_t kSeed = 1445;   // the blocks' random bytes
constexpr int kShownUnit = 0;           // the unit whose map is printed

model::Map yours() { return {load_offset, store_offset, selector}; }

// A row address as "row:chunk" (chunk x: bytes 16x .. 16x + 15 of the row before the swizzle),
// or the raw offset where it is no whole row of the tile.
std::string row_and_chunk(std::uint32_t off) {
  if (off % kChunkBytes || off >= std::uint32_t(kTileBytes)) return fmt::format("@{}?", off);
  const std::uint32_t row = off / kRowBytes, position = (off % kRowBytes) / kChunkBytes;
  return fmt::format("{}:{}", row, position ^ (row % kSwizzleRows));
}

void show_map() {
  const model::Map m = yours();
  fmt::print("\nyour map (transpose_map.hpp) for {}\n", model::describe_unit(kShownUnit));
  fmt::print("  each row address as row:chunk (chunk x = bytes 16x .. 16x + 15 of that row, before the swizzle)\n");
  for (bool is_load : {true, false}) {
    fmt::print("  {} (lane 8i + r names row r of matrix i):\n", is_load ? "ldmatrix rows, V key:head-dim chunk" : "stmatrix rows, Vᵀ head dim:slot chunk");
    for (int i = 0; i < kMatrices; ++i) {
      fmt::print("    matrix {}  ", i);
      for (int r = 0; r < kMatrixRows; ++r) {
        const int lane = kMatrixRows * i + r;
        fmt::print(" {:>6}", row_and_chunk(is_load ? m.load(kShownUnit, lane) : m.store(kShownUnit, lane)));
      }
      fmt::print("\n");
    }
  }
  fmt::print("  selectors by lane group q = lane / 4, σ = 0 / σ = 1 (store registers 2h and 2h + 1):\n   ");
  for (int q = 0; q < kLanes / 4; ++q) {
    bool same = true;
    for (int t = 1; t < 4; ++t)
      for (int sigma = 0; sigma < 2; ++sigma) same = same && m.select(sigma, 4 * q + t) == m.select(sigma, 4 * q);
    if (same)
      fmt::print(" q{} 0x{:04x}/0x{:04x}", q, m.select(0, 4 * q), m.select(1, 4 * q));
    else
      fmt::print(" q{} (differs by lane)", q);
  }
  fmt::print("\n");
}

// e4m3 bytes, never a NaN (0x7F, 0xFF): 0xFF is the kernel's poison for a byte no store wrote.
std::vector<std::uint8_t> random_blocks(int tiles) {
  constexpr int kPositiveNan = 0x7F;
  constexpr int kNonNanValues = 254;
  std::mt19937 rng(kSeed);
  std::uniform_int_distribution<int> draw(0, kNonNanValues - 1);
  std::vector<std::uint8_t> v(std::size_t(tiles) * kTileBytes);
  for (auto& b : v) {
    const int x = draw(rng);
    b = std::uint8_t(x >= kPositiveNan ? x + 1 : x);
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  const lab::Options options = lab::parse(argc, argv, "L14", "the FP8 V transpose (ldmatrix.trans, PRMT, stmatrix)");
  lab::Verdict verdict("L14");
  show_map();

  // ---- The model (CPU) ----
  fmt::print("\nthe model: {} units × (ldmatrix.x4.trans, 4 __byte_perm, stmatrix.x4), every lane, on one {} × {} tile\n",
             kUnits, kRows, kRowBytes);
  const model::Report report = model::check(yours());
  for (int c = 1; c <= 4; ++c)
    fmt::print("  check {} {:<18} {}\n", c, fmt::format("({})", model::check_name(c)), report.line[c]);
  if (report.failed) {
    fmt::print("model: FAIL, check {} ({}): {}\n", report.failed, model::check_name(report.failed), report.what);
    verdict.fail(fmt::format("the model, check {} ({}): {}", report.failed, model::check_name(report.failed), report.what));
  } else {
    fmt::print("model: PASS (every address whole and inside, every Vᵀ byte once and right, every phase one wavefront)\n");
  }
  if (options.cpu_only) return verdict.finish_cpu_only();

  // ---- The GPU run ----
  std::string why_not;
  auto session = lab::open_gpu(why_not);
  if (!session) return verdict.finish_without_gpu(why_not);
  if (session->gpu.sm != 90)
    return verdict.finish_without_gpu(fmt::format("the kernel is sm_90a code and this GPU is sm_{}", session->gpu.sm));
  if (report.failed) fmt::print("\n(the GPU run uses your map as it is, though the model found a mistake)\n");

  const std::vector<std::uint8_t> v = random_blocks(kGpuTiles);
  std::vector<std::uint8_t> vt;
  int refused = 0;
  if (const std::string error = run_tiles(v, vt, refused); !error.empty()) {
    verdict.fail("the GPU run: " + error);
    return verdict.finish();
  }
  fmt::print("\nthe GPU run: {} random V blocks (e4m3 bytes, no NaN), one CTA of 4 warps each; Vᵀ poisoned with 0x{:02x}\n",
             kGpuTiles, kPoison);
  if (refused)
    verdict.fail(fmt::format("the GPU run: {} units were not run: some lane's offset was outside its tile or not 16-byte "
                             "aligned (check 1)", refused));

  const std::size_t total = vt.size();
  long wrong = 0, unwritten = 0, disagree = 0, compared = 0;
  std::string first_wrong, first_disagree;
  for (int tile = 0; tile < kGpuTiles; ++tile) {
    const std::uint8_t* vb = v.data() + std::size_t(tile) * kTileBytes;
    const std::uint8_t* got = vt.data() + std::size_t(tile) * kTileBytes;
    const std::vector<int> predicted =
        report.emulated ? model::predicted(report.emulation, vb, kPoison) : std::vector<int>(kTileBytes, model::kNothing);
    for (int d = 0; d < kRows; ++d)
      for (int slot = 0; slot < kRowBytes; ++slot) {
        const int at = d * kRowBytes + slot, key = model::wanted_key(slot);
        const std::uint8_t want = vb[key * kRowBytes + d];
        if (got[at] != want) {
          ++wrong;
          unwritten += got[at] == kPoison;
          if (first_wrong.empty())
            first_wrong = fmt::format("block {}, Vᵀ[{}][{}] = 0x{:02x} where V[{}][{}] = 0x{:02x} belongs", tile, d, slot,
                                      got[at], key, d, want);
        }
        if (predicted[at] == model::kNothing) continue;
        ++compared;
        if (got[at] != predicted[at]) {
          ++disagree;
          if (first_disagree.empty())
            first_disagree = fmt::format("block {}, Vᵀ[{}][{}]: the GPU wrote 0x{:02x}, the model 0x{:02x}", tile, d, slot,
                                         got[at], predicted[at]);
        }
      }
  }
  if (wrong) {
    fmt::print("  FAIL  {} of {} bytes of Vᵀ wrong ({} never written: still 0x{:02x}); first {}\n", wrong, total, unwritten,
               kPoison, first_wrong);
    verdict.fail(fmt::format("the GPU run: {} of {} bytes of Vᵀ wrong; first {}", wrong, total, first_wrong));
  } else {
    fmt::print("  ok    all {} bytes of Vᵀ right ({} blocks × {})\n", total, kGpuTiles, kTileBytes);
  }
  if (!report.emulated) {
    fmt::print("  (no comparison with the model: check 1 failed, so the model did not emulate your map)\n");
  } else if (disagree) {
    const std::string why = fmt::format(
        "the GPU and the model's emulation of the instructions disagree at {} of {} bytes (first {}): the model's "
        "picture of ldmatrix.trans, __byte_perm or stmatrix is not the hardware's. Your map is not at fault for this line",
        disagree, compared, first_disagree);
    fmt::print("  FAIL  {}\n", why);
    verdict.fail("the GPU run: " + why);
  } else {
    fmt::print("  ok    the GPU wrote what the model predicted for your map, at all {} bytes it predicts\n", compared);
  }
  return verdict.finish();
}
