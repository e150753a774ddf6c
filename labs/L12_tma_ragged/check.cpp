// Lab 12's checker (given, do not edit): your tensor_map.hpp against the rules on the CPU first
// (the map's arguments at six row counts, expect_tx box by box; no GPU needed), then on the GPU:
// every box of tensors of 1 to 4097 rows loaded with your map, every element compared (inside the
// tensor: equal; past its end: zero), every barrier's wait bounded.
#include <cuda_fp16.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

// <>, not "": your answers or the solution's, whichever folder the build put on the include path
// (labs/part4_labs.cmake).
#include <tensor_map.hpp>

#include "labs/L12_tma_ragged/lab12.hpp"
#include "labs/L12_tma_ragged/model.hpp"
#include "labs/common/lab.hpp"

namespace {

using namespace lab12;

model::Answers yours() { return {tmamap::tensor_map_args, tmamap::expect_tx_bytes}; }

unsigned short bits(__half h) {
  unsigned short u;
  std::memcpy(&u, &h, sizeof u);
  return u;
}

// One tensor's GPU run, judged element by element; failures go to `verdict`.
void gpu_case(int rows, lab::Verdict& verdict) {
  std::mt19937 rng(1200 + rows);
  std::uniform_real_distribution<float> mag(0.25f, 1.0f);
  std::bernoulli_distribution sign(0.5);
  std::vector<__half> tensor(std::size_t(rows) * kD);
  for (auto& x : tensor) x = __float2half(sign(rng) ? mag(rng) : -mag(rng));  // never 0, never the poison
  std::vector<std::uint32_t> expect(boxes(rows));
  for (int b = 0; b < boxes(rows); ++b) expect[b] = tmamap::expect_tx_bytes(rows, b);

  const BoxRun run = run_boxes(tmamap::tensor_map_args(rows), rows, tensor, expect);
  const std::string name = fmt::format("rows = {:>4} ({:>2} box{})", rows, boxes(rows), boxes(rows) == 1 ? "" : "es");
  if (!run.error.empty()) {
    fmt::print("  {}  FAIL  {}\n", name, run.error);
    verdict.fail(fmt::format("{}: {}", name, run.error));
    return;
  }
  int timeouts = 0, wrong = 0, not_zero = 0, poison = 0, permuted_rows = 0;
  std::string first;
  for (int b = 0; b < boxes(rows); ++b) {
    if (run.status[b] != 1) {
      if (!timeouts)
        first = fmt::format("box {}'s barrier did not complete in {} ms: it waits for {} bytes, the copy brought {}",
                            b, stall_ms(), expect[b], kBoxRows * kRowBytes);
      ++timeouts;
    }
  }
  for (int r = 0; r < boxes(rows) * kBoxRows; ++r) {
    bool row_wrong = false;
    for (int c = 0; c < kD; ++c) {
      const __half got = run.out[std::size_t(r) * kD + c];
      if (bits(got) == kPoison) {
        if (first.empty())
          first = fmt::format("row {} col {} was never written, though box {}'s barrier said it had landed", r, c, r / kBoxRows);
        ++poison;
      } else if (r >= rows && bits(got) != 0 && bits(got) != 0x8000) {
        if (first.empty()) first = fmt::format("row {} (past the end) col {} is {}, not 0", r, c, __half2float(got));
        ++not_zero;
      } else if (r < rows && bits(got) != bits(tensor[std::size_t(r) * kD + c])) {
        if (first.empty())
          first = fmt::format("row {} col {} is {}, the tensor has {}", r, c, __half2float(got),
                              __half2float(tensor[std::size_t(r) * kD + c]));
        ++wrong;
        row_wrong = true;
      }
    }
    if (row_wrong) {  // the row's values, in another order? (a swizzle the kernel does not read)
      std::vector<unsigned short> want(kD), have(kD);
      for (int c = 0; c < kD; ++c) {
        want[c] = bits(tensor[std::size_t(r) * kD + c]);
        have[c] = bits(run.out[std::size_t(r) * kD + c]);
      }
      std::sort(want.begin(), want.end());
      std::sort(have.begin(), have.end());
      permuted_rows += want == have;
    }
  }
  if (!timeouts && !wrong && !not_zero && !poison) {
    fmt::print("  {}  ok    every element: {} rows equal, {} rows past the end 0; every barrier completed\n", name, rows,
               boxes(rows) * kBoxRows - rows);
    return;
  }
  std::string line = fmt::format("{} timeout{}, {} wrong, {} not zero past the end, {} never written; first: {}", timeouts,
                                 timeouts == 1 ? "" : "s", wrong, not_zero, poison, first);
  if (permuted_rows)
    line += fmt::format(" ({} rows hold the right values in another order: the box landed in another layout than "
                        "the 128-byte swizzle the kernel reads)", permuted_rows);
  fmt::print("  {}  FAIL  {}\n", name, line);
  verdict.fail(fmt::format("{}: {}", name, line));
}

}  // namespace

int main(int argc, char** argv) {
  const lab::Options options = lab::parse(argc, argv, "L12", "a TMA tensor map for a ragged tile");
  lab::Verdict verdict("L12");
  fmt::print("\nyour answers (tensor_map.hpp), for rows = 1000:\n  {}\n  expect_tx: ",
             model::args_line(tmamap::tensor_map_args(1000)));
  for (int b = 0; b < boxes(1000); ++b) fmt::print("{}{}", b ? ", " : "", tmamap::expect_tx_bytes(1000, b));
  fmt::print(" bytes for boxes 0..{} (the last holds {} rows of the tensor)\n", boxes(1000) - 1, 1000 - (boxes(1000) - 1) * kBoxRows);

  // ---- The rules (CPU) ----
  fmt::print("\nthe model: the arguments against the driver's rules and the kernel's, expect_tx against the bytes each "
             "box delivers, at rows = 1, 100, 128, 1000, 1029, 4097\n");
  const model::Finding finding = model::check(yours());
  if (finding.check) {
    fmt::print("model: FAIL, check {} ({}): {}\n", finding.check, model::check_name(finding.check), finding.what);
    verdict.fail(fmt::format("the model, check {} ({}): {}", finding.check, model::check_name(finding.check), finding.what));
  } else {
    fmt::print("model: PASS (rank and dims, strides, box, the enums, expect_tx of every box)\n");
  }
  if (options.cpu_only) return verdict.finish_cpu_only();

  // ---- The GPU run ----
  std::string why_not;
  auto session = lab::open_gpu(why_not);
  if (!session) return verdict.finish_without_gpu(why_not);
  if (session->gpu.sm != 90)
    return verdict.finish_without_gpu(fmt::format("the kernel is sm_90a code (TMA) and this GPU is sm_{}", session->gpu.sm));
  fmt::print("\nthe GPU run: every box loaded with your map (one CTA each), poisoned buffers, waits bounded at {} ms\n",
             stall_ms());
  for (int rows : model::kTryRows) gpu_case(rows, verdict);
  return verdict.finish();
}
