// The tensor-core ceiling of the attention tables: cuBLAS's fp16 GEMM, timed by the harness.
//
// Attention's FLOPs are matrix-product FLOPs (4·B·H·N²·D counts the two products), so the rate
// at which the GPU's tensor cores run one large fp16 GEMM is the natural yardstick: "% of GEMM"
// says how much of that an attention kernel reaches. The ceiling is cuBLAS's fp16 × fp16 → fp16
// GEMM with fp32 accumulation (the precision of the attention products) at M = N = K = 8192,
// on seeded N(0,1) inputs (never zeros: the tensor cores draw less power, and clock higher, on
// zeros), timed with time_launch() and the L2 flushed between repetitions, like every row.
//
// The runner calls it once per process (it does not depend on the attention shape) and adds
// a row from it, e.g.
//
//   if (auto g = time_gemm_ceiling(session.stream.get(), options.timing, session.flusher)) {
//     Row row;  row.id = g->id;  row.description = g->description;  row.ceiling = true;
//     row.flops = g->flops;  row.timing = g->timing;          // and "% of GEMM" = g->percent_of(r.tflops())
//   }
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/timing.hpp"

namespace ladder {

inline constexpr int kGemmCeilingSize = 8192;

struct GemmCeiling {
  std::string id = "gemm-fp16";  // the row's id
  std::string description;       // "cublasGemmEx fp16×fp16→fp16, fp32 accumulate, M=N=K=8192"
  int m = 0, n = 0, k = 0;
  double flops = 0;              // 2·M·N·K per launch
  Timing timing;
  double max_rel_error = 0;      // over the sampled outputs checked against fp64 (see below)

  double tflops() const;
  // 100 · rate / this ceiling's rate: "% of GEMM" for a row running at `tflops`.
  double percent_of(double tflops) const;
};

// Times the ceiling GEMM on `stream` with `options` and `flusher` (the harness's). First it runs
// once and checks 64 sampled entries of C against an fp64 dot product of the same fp16 inputs
// (within fp16 output rounding plus fp32 accumulation), so a wrong or skipped computation is never
// timed. Returns std::nullopt, with the reason in *why_not when given, when the GPU cannot run it
// as asked: less free device memory than the three 8192² fp16 matrices (384 MiB) need plus
// headroom, or no fp16 tensor cores (compute capability below 7.0). Throws ladder::CudaError on a
// failed CUDA call and std::runtime_error on a failed cuBLAS call or a failed check, naming it.
// `size` is M = N = K (the tests use small sizes).
std::optional<GemmCeiling> time_gemm_ceiling(cudaStream_t stream, const TimingOptions& options,
                                             L2Flusher& flusher, std::string* why_not = nullptr,
                                             int size = kGemmCeilingSize);

// ---- Pieces with no GPU in them (the CPU tests use them) ---------------------------------------
// Entries (row, col) of an M×N output to check: `count` of them, spread over the whole matrix
// (both ends included) and seeded, so every run checks the same ones.
std::vector<std::pair<int, int>> gemm_check_points(int m, int n, int count, std::uint64_t seed);

// Whether `got` (the GPU's fp16 output, widened) is an fp16 rounding of the exact dot product of
// row `row` of A [M, K] and column `col` of B [K, N] (both row-major, the fp16 values widened):
// |got − exact| ≤ 2⁻¹⁰·|exact| (one fp16 rounding, with margin) + 2⁻¹⁶·Σ|a·b| (fp32 accumulation
// in any order). Returns the error relative to max(|exact|, 1) in *rel_error when given.
bool gemm_entry_ok(const std::vector<float>& a, const std::vector<float>& b, int k, int n, int row,
                   int col, float got, double* rel_error = nullptr);

}  // namespace ladder
