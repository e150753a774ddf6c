#include "common/peers/gemm_ceiling.hpp"

#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "common/check.hpp"
#include "common/device_buffer.hpp"
#include "common/random.hpp"

namespace ladder {

namespace {

// The random streams of the ceiling's inputs (distinct from the harness's Q, K, V, A, B, X streams).
constexpr std::uint64_t kSeed = 20261130;
constexpr std::uint64_t kStreamA = 101, kStreamB = 102;
constexpr int kCheckedEntries = 64;
constexpr std::size_t kHeadroomBytes = std::size_t(512) << 20;  // context, cuBLAS workspace

// Any cuBLAS failure throws with the call, the place and cuBLAS's words for the status.
void check_cublas(cublasStatus_t status, const char* call, const char* file, int line) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  throw std::runtime_error(fmt::format("{}:{}: {} failed: {} ({})", file, line, call,
                                       cublasGetStatusName(status), cublasGetStatusString(status)));
}
#define CUBLAS_CHECK(call) check_cublas((call), #call, __FILE__, __LINE__)

// A handle for one measurement (created once per call of time_gemm_ceiling, outside the timing).
class CublasHandle {
 public:
  CublasHandle() { CUBLAS_CHECK(cublasCreate(&handle_)); }
  ~CublasHandle() {
    if (handle_) cublasDestroy(handle_);  // never throw from a destructor
  }
  CublasHandle(const CublasHandle&) = delete;
  CublasHandle& operator=(const CublasHandle&) = delete;
  cublasHandle_t get() const { return handle_; }

 private:
  cublasHandle_t handle_ = nullptr;
};

std::uint64_t mix(std::uint64_t x) {  // splitmix64, for the check points
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace

double GemmCeiling::tflops() const {
  return timing.median_ms > 0 ? flops / (timing.median_ms * 1e-3) / 1e12 : 0;
}

double GemmCeiling::percent_of(double rate_tflops) const {
  const double ceiling = tflops();
  return ceiling > 0 ? 100.0 * rate_tflops / ceiling : 0;
}

std::vector<std::pair<int, int>> gemm_check_points(int m, int n, int count, std::uint64_t seed) {
  std::vector<std::pair<int, int>> points;
  if (m <= 0 || n <= 0 || count <= 0) return points;
  points.emplace_back(0, 0);  // both corners: the ends of the matrix are where layouts go wrong
  if (count > 1) points.emplace_back(m - 1, n - 1);
  for (int i = int(points.size()); i < count; ++i) {
    const std::uint64_t r = mix(seed ^ mix(std::uint64_t(i)));
    points.emplace_back(int(r % std::uint64_t(m)), int((r >> 32) % std::uint64_t(n)));
  }
  return points;
}

bool gemm_entry_ok(const std::vector<float>& a, const std::vector<float>& b, int k, int n, int row,
                   int col, float got, double* rel_error) {
  double exact = 0, magnitude = 0;
  for (int t = 0; t < k; ++t) {
    const double p = double(a[std::size_t(row) * k + t]) * double(b[std::size_t(t) * n + col]);
    exact += p;
    magnitude += std::fabs(p);
  }
  const double error = std::fabs(double(got) - exact);
  if (rel_error) *rel_error = error / std::max(std::fabs(exact), 1.0);
  const double tolerance = std::ldexp(std::fabs(exact), -10) + std::ldexp(magnitude, -16);
  return std::isfinite(got) && error <= tolerance;
}

std::optional<GemmCeiling> time_gemm_ceiling(cudaStream_t stream, const TimingOptions& options,
                                             L2Flusher& flusher, std::string* why_not, int size) {
  auto refuse = [&](std::string why) -> std::optional<GemmCeiling> {
    if (why_not) *why_not = std::move(why);
    return std::nullopt;
  };
  if (size <= 0) throw std::invalid_argument(fmt::format("GEMM ceiling: size {} is not positive", size));

  int device = 0;
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  if (prop.major < 7)
    return refuse(fmt::format("sm_{}{} has no fp16 tensor cores", prop.major, prop.minor));

  const std::size_t m = std::size_t(size), n = m, k = m;
  const std::size_t bytes = (m * k + k * n + m * n) * sizeof(__half);
  std::size_t free_bytes = 0, total_bytes = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  if (bytes + kHeadroomBytes > free_bytes)
    return refuse(fmt::format("needs {} MiB for A, B and C but {} MiB is free", bytes >> 20,
                              free_bytes >> 20));

  // Row-major A [M, K], B [K, N], C [M, N]. cuBLAS is column-major, so C = A·B is computed as
  // Cᵀ = Bᵀ·Aᵀ with B passed first: the same bytes, no transposes.
  const Tensor16 a = random_tensor16(m * k, kSeed, kStreamA);
  const Tensor16 b = random_tensor16(k * n, kSeed, kStreamB);
  DeviceBuffer<std::uint16_t> da(m * k), db(k * n), dc(m * n);  // fp16 bits
  da.upload(a.bits);
  db.upload(b.bits);

  CublasHandle handle;
  CUBLAS_CHECK(cublasSetStream(handle.get(), stream));
  const float alpha = 1.f, beta = 0.f;  // beta = 0: C's old contents are never read
  auto launch = [&](cudaStream_t s) {
    CUBLAS_CHECK(cublasSetStream(handle.get(), s));
    CUBLAS_CHECK(cublasGemmEx(handle.get(), CUBLAS_OP_N, CUBLAS_OP_N, int(n), int(m), int(k),
                              &alpha, db.get(), CUDA_R_16F, int(n), da.get(), CUDA_R_16F, int(k),
                              &beta, dc.get(), CUDA_R_16F, int(n), CUBLAS_COMPUTE_32F,
                              CUBLAS_GEMM_DEFAULT));
  };

  // Once, checked: C poisoned with NaN, then sampled entries against fp64.
  dc.fill_bytes(0xFF, stream);
  launch(stream);
  CUDA_CHECK(cudaStreamSynchronize(stream));
  const std::vector<std::uint16_t> c = dc.download();
  GemmCeiling g;
  for (const auto& [row, col] : gemm_check_points(int(m), int(n), kCheckedEntries, kSeed)) {
    const float got = from_bits(DType::F16, c[std::size_t(row) * n + col]);
    double rel = 0;
    const bool ok = gemm_entry_ok(a.value, b.value, int(k), int(n), row, col, got, &rel);
    g.max_rel_error = std::max(g.max_rel_error, std::isfinite(rel) ? rel : INFINITY);
    if (!ok)
      throw std::runtime_error(fmt::format(
          "GEMM ceiling: cuBLAS's C[{}, {}] = {} is not the fp16 rounding of the fp64 product "
          "(relative error {:.3g}); the ceiling would not be a measurement of this GEMM",
          row, col, got, rel));
  }

  g.m = int(m);
  g.n = int(n);
  g.k = int(k);
  g.flops = 2.0 * double(m) * double(n) * double(k);
  g.description = fmt::format(
      "cublasGemmEx fp16×fp16→fp16, fp32 accumulate, M=N=K={} (the tensor-core ceiling)", size);
  g.timing = time_launch(launch, stream, options, flusher);
  return g;
}

}  // namespace ladder
