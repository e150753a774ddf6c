// Lab 13's driver (given, do not edit): seeded inputs, your kernel once, its outputs against an
// fp64 reference on the CPU, and the Storage's address in the shared-memory window. check.py
// compiles it with your shared_by_name.cu (and once more with the starter's) and runs it only on a
// machine with a GPU; the SASS check needs none.
//
//   lab_L13_run [DUMP]   DUMP: a file that gets ds and the total, raw bytes, for check.py to
//                        compare with the starter's bit for bit
//
// Exit: 0 the outputs are right and the Storage is aligned, 1 a wrong (or unwritten) value or a
// misaligned Storage, 2 a CUDA error, 77 no GPU that runs the kernel (compute capability 8.0 or
// newer: the sm_90a code, or the compute_80 PTX compiled for the GPU at load time).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numbers>
#include <random>
#include <vector>

#include "labs/L13_shared_by_name/lab13.hpp"

namespace {

constexpr int kExitFail = 1, kExitCuda = 2, kExitNoGpu = 77;

void check_cuda(cudaError_t code, const char* call, int line) {
  if (code == cudaSuccess) return;
  std::fprintf(stderr, "L13 driver: %s failed (run.cu:%d): %s, %s\n", call, line, cudaGetErrorName(code),
               cudaGetErrorString(code));
  if (code == cudaErrorIllegalAddress || code == cudaErrorLaunchFailure)
    std::fprintf(stderr, "  a kernel fault: an address outside the shared memory the launch asked for?\n");
  std::exit(kExitCuda);
}
#define LAB_CHECK(call) check_cuda((call), #call, __LINE__)

// Device memory that frees itself.
template <class T>
class Buffer {
 public:
  explicit Buffer(std::size_t n) : n_(n) { LAB_CHECK(cudaMalloc(&p_, n * sizeof(T))); }
  ~Buffer() { cudaFree(p_); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  T* get() const { return p_; }
  void upload(const std::vector<T>& h) { LAB_CHECK(cudaMemcpy(p_, h.data(), n_ * sizeof(T), cudaMemcpyHostToDevice)); }
  void poison() { LAB_CHECK(cudaMemset(p_, 0xFF, n_ * sizeof(T))); }  // NaN for floats: all written?
  std::vector<T> download() const {
    std::vector<T> h(n_);
    LAB_CHECK(cudaMemcpy(h.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
  }

 private:
  T* p_ = nullptr;
  std::size_t n_;
};

std::vector<float> random_floats(std::size_t n, float lo, float hi, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> h(n);
  for (auto& x : h) x = dist(rng);
  return h;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace lab13;
  int count = 0, major = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("no GPU to run the kernel on\n");
    return kExitNoGpu;
  }
  LAB_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
  if (major < 8) {
    std::printf("no GPU to run the kernel on: it is built for compute capability 8.0 or newer, this one is %d.x\n",
                major);
    return kExitNoGpu;
  }

  // Scores and dP of a 64 × 128 tile of Sᵀ, the true LSE of each query over the tile's keys (so
  // each column of P sums to 1), and D.
  std::mt19937 rng(20261213);
  const auto s = random_floats(std::size_t(kKeys) * kQueries, -4.f, 4.f, rng);
  const auto dp = random_floats(std::size_t(kKeys) * kQueries, -1.f, 1.f, rng);
  const auto delta = random_floats(kQueries, -0.5f, 0.5f, rng);
  const double scale = 1.0 / std::sqrt(64.0);
  const float scale_log2 = float(scale * std::numbers::log2e);
  std::vector<float> lse(kQueries);
  for (int q = 0; q < kQueries; ++q) {
    double sum = 0;
    for (int k = 0; k < kKeys; ++k) sum += std::exp(scale * s[k * kQueries + q]);
    lse[q] = float(std::log(sum));
  }

  Buffer<float> d_s(s.size()), d_dp(dp.size()), d_lse(kQueries), d_delta(kQueries), d_ds(s.size()), d_total(1);
  Buffer<unsigned> d_where(2);
  d_s.upload(s);
  d_dp.upload(dp);
  d_lse.upload(lse);
  d_delta.upload(delta);
  d_ds.poison();
  d_total.poison();
  d_where.poison();
  LAB_CHECK(launch_ds_tile(d_s.get(), d_dp.get(), d_lse.get(), d_delta.get(), scale_log2, d_ds.get(), d_total.get(),
                           d_where.get(), nullptr));
  LAB_CHECK(cudaDeviceSynchronize());
  const auto ds = d_ds.download(), total = d_total.download();
  const auto where = d_where.download();

  int bad = 0;
  // Where the Storage is: the launch asked for sizeof(Storage) + 1024 bytes, so the Storage must
  // start 0 to 1023 bytes after the dynamic base, on a multiple of 1024.
  std::printf("shared-memory window: the dynamic base at byte %u (%u mod 1024), the Storage at byte %u (%u mod 1024)\n",
              where[0], where[0] % 1024, where[1], where[1] % 1024);
  if (where[1] % 1024 != 0 || where[1] < where[0] || where[1] - where[0] >= 1024) {
    std::printf("  the Storage is not the dynamic base rounded up to 1024 bytes\n");
    ++bad;
  }

  // The fp64 reference. The kernel's error is fp32 rounding of the exponent's argument (|arg| <
  // 16, so 2^-20 relative in p at most), exp2f's 2 ulp and one rounding per product; 2^-16 of
  // the terms' magnitude is about 10× that. A wrong query's statistics are off by far more.
  double worst = 0, sum_ref = 0, sum_mag = 0;
  for (int k = 0; k < kKeys; ++k)
    for (int q = 0; q < kQueries; ++q) {
      const double p = std::exp2(double(s[k * kQueries + q]) * double(scale_log2) - double(lse[q]) * std::numbers::log2e);
      const double ref = p * (double(dp[k * kQueries + q]) - double(delta[q]));
      const double tol = std::ldexp(p * (std::abs(double(dp[k * kQueries + q])) + std::abs(double(delta[q]))), -16) + 1e-30;
      const double got = ds[k * kQueries + q], err = std::abs(got - ref);
      sum_ref += ref;
      sum_mag += std::abs(ref);
      if (!(err <= tol)) {  // NaN fails too
        if (bad++ < 5) std::printf("  ds[%d][%d] = %.7g, expected %.7g (error %.3g, allowed %.3g)\n", k, q, got, ref, err, tol);
      }
      worst = std::max(worst, err / tol);
    }
  const double total_tol = std::ldexp(sum_mag, -14);
  if (!(std::abs(double(total[0]) - sum_ref) <= total_tol)) {
    std::printf("  total = %.7g, expected %.7g (allowed error %.3g)\n", total[0], sum_ref, total_tol);
    ++bad;
  }

  if (argc > 1) {  // the raw bytes, for the bit-for-bit comparison with the starter
    FILE* f = std::fopen(argv[1], "wb");
    if (!f || std::fwrite(ds.data(), sizeof(float), ds.size(), f) != ds.size() ||
        std::fwrite(total.data(), sizeof(float), 1, f) != 1 || std::fclose(f) != 0) {
      std::fprintf(stderr, "L13 driver: cannot write %s\n", argv[1]);
      return kExitCuda;
    }
  }
  if (bad) {
    std::printf("outputs: %d wrong (the first are above)\n", bad);
    return kExitFail;
  }
  std::printf("outputs: ds (%d × %d) and the total right; worst error %.3f of the allowance\n", kKeys, kQueries, worst);
  return 0;
}
