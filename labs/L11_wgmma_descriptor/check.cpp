// Lab 11's checker (given, do not edit): your descriptor.hpp in the CPU model first (every
// element's offset, the descriptor's fields at five addresses, the k-step advance; no GPU needed),
// then one chain of wgmma.m64n64k16 on the GPU that reads tiles staged by your offset through your
// descriptors, against a CPU product, element by element.
#include <cuda_fp16.h>
#include <fmt/format.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

// <>, not "": your answers or the solution's, whichever folder the build put on the include path
// (labs/part4_labs.cmake) — the same file the kernel was compiled with.
#include <descriptor.hpp>

#include "labs/L11_wgmma_descriptor/lab11.hpp"
#include "labs/L11_wgmma_descriptor/model.hpp"
#include "labs/common/lab.hpp"

namespace {

using namespace lab11;

model::Answers yours() { return {wgdesc::swizzled_offset, wgdesc::make_desc, wgdesc::k_step_advance}; }

void show_answers() {
  const model::Answers a = yours();
  fmt::print("\nyour answers (descriptor.hpp):\n  where logical chunk c (cols 8c..8c+7) of each row lands "
             "(its chunk position, 16 bytes each; -1: not a whole chunk of that row)\n          c =");
  for (int c = 0; c < kChunksPerRow; ++c) fmt::print("{:>3}", c);
  fmt::print("\n");
  for (int r = 0; r < 10; ++r) {
    fmt::print("    row {:>2}   ", r);
    for (int c = 0; c < kChunksPerRow; ++c) fmt::print("{:>3}", model::chunk_position(a, r, c));
    fmt::print("\n");
  }
  fmt::print("  make_desc(0x2400)  {}\n", model::describe(a.desc(0x2400)));
  fmt::print("  k_step_advance()   {}\n", a.advance());
}

// fp16 values in ±[0.25, 1]: never zero, so a misplaced chunk always changes the product.
std::vector<__half> random_tile(std::mt19937& rng) {
  std::uniform_real_distribution<float> mag(0.25f, 1.0f);
  std::bernoulli_distribution sign(0.5);
  std::vector<__half> t(std::size_t(kRows) * kCols);
  for (auto& x : t) x = __float2half(sign(rng) ? mag(rng) : -mag(rng));
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  const lab::Options options = lab::parse(argc, argv, "L11", "the wgmma shared-memory descriptor with the 128-byte swizzle");
  lab::Verdict verdict("L11");
  show_answers();

  // ---- The model (CPU) ----
  fmt::print("\nthe model: the offset of all {}×{} elements (inside the tile, one place each, an 8-row atom without "
             "bank conflicts, the hardware's swizzle), the descriptor at {} addresses, the advance over {} k steps\n",
             kRows, kCols, std::size(model::kTryAddresses), kKSteps);
  const model::Finding finding = model::check(yours());
  if (finding.check) {
    fmt::print("model: FAIL, check {} ({}): {}\n", finding.check, model::check_name(finding.check), finding.what);
    verdict.fail(fmt::format("the model, check {} ({}): {}", finding.check, model::check_name(finding.check), finding.what));
  } else {
    fmt::print("model: PASS (the layout, the descriptor's five fields, the advance)\n");
  }
  if (options.cpu_only) return verdict.finish_cpu_only();

  // ---- The GPU run ----
  std::string why_not;
  auto session = lab::open_gpu(why_not);
  if (!session) return verdict.finish_without_gpu(why_not);
  if (session->gpu.sm != 90)
    return verdict.finish_without_gpu(fmt::format("the kernel is sm_90a code (wgmma) and this GPU is sm_{}", session->gpu.sm));
  if (finding.check) fmt::print("\n(the GPU run uses your answers as they are, though the model found a mistake)\n");

  std::mt19937 rng(1011);
  const std::vector<__half> a = random_tile(rng), b = random_tile(rng);
  std::vector<float> d;
  int stray = 0;
  bool issued = false;
  const std::string error = run_tile(a, b, d, stray, issued);
  if (!error.empty()) {
    verdict.fail("the GPU run: " + error);
    return verdict.finish();
  }
  fmt::print("\nthe GPU run: D = A·Bᵀ (64×64, K = 64) by 4 × wgmma.m64n64k16, both tiles staged by your offset, "
             "read through your descriptors; against fp64 on the CPU\n");
  if (stray) verdict.fail(fmt::format("{} elements had an offset outside the tile and were not staged", stray));
  if (!issued) {
    const std::string why = "the wgmma chain was not issued: a descriptor (at some k step) starts below the first tile "
                            "or reaches past the tiles (start + 7·SBO + LBO + 1024 bytes), where it would read memory "
                            "the kernel does not own";
    fmt::print("  FAIL  {}\n", why);
    verdict.fail("the GPU run: " + why);
    return verdict.finish();
  }
  int wrong = 0, nan = 0;
  double worst = 0;
  std::vector<int> wrong_in_row(kRows, 0), wrong_in_col(kRows, 0);
  std::string first;
  for (int m = 0; m < kRows; ++m)
    for (int n = 0; n < kRows; ++n) {
      double ref = 0;
      for (int k = 0; k < kCols; ++k)
        ref += double(__half2float(a[m * kCols + k])) * double(__half2float(b[n * kCols + k]));
      const double got = d[m * kRows + n];
      const double err = std::fabs(got - ref);
      const bool bad = !std::isfinite(got) || err > 1e-3 * (1.0 + std::fabs(ref));
      if (!std::isfinite(got)) ++nan;
      if (bad) {
        if (!wrong) first = fmt::format("D[{}][{}] = {:.6g}, expected {:.6g}", m, n, got, ref);
        ++wrong;
        ++wrong_in_row[m];
        ++wrong_in_col[n];
      } else if (err > worst) {
        worst = err;
      }
    }
  if (wrong) {
    auto list = [](const std::vector<int>& count) {
      std::string s;
      for (std::size_t i = 0; i < count.size(); ++i)
        if (count[i]) s += fmt::format("{}{}", s.empty() ? "" : " ", i);
      return s;
    };
    fmt::print("  FAIL  {} of {} elements wrong ({} NaN: never written); first {}\n"
               "        rows of D with a wrong element (rows of A): {}\n"
               "        columns of D with a wrong element (rows of B): {}\n",
               wrong, kRows * kRows, nan, first, list(wrong_in_row), list(wrong_in_col));
    verdict.fail(fmt::format("the GPU run: {} of {} elements of D wrong, first {}", wrong, kRows * kRows, first));
  } else {
    fmt::print("  ok    all {} elements of D match (worst error {:.2e})\n", kRows * kRows, worst);
  }
  return verdict.finish();
}
