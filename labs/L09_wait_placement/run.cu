// Lab 09's driver (given, do not edit): random inputs, your kernel once, and both outputs
// against an fp64 reference on the CPU. check.py compiles it with your overlap.cu and runs it only
// on a machine with a GPU; the SASS check needs none.
//
// Exit: 0 both outputs right, 1 a wrong (or unwritten) value, 2 a CUDA error, 77 no GPU that runs
// sm_90a code (the kernel was compiled, not run).
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numbers>
#include <random>
#include <vector>

#include "common/device/hopper/arch.cuh"
#include "labs/L09_wait_placement/lab09.hpp"

namespace {

constexpr int kExitFail = 1, kExitCuda = 2, kExitNoGpu = 77;

void check_cuda(cudaError_t code, const char* call, int line) {
  if (code == cudaSuccess) return;
  std::fprintf(stderr, "L09 driver: %s failed (run.cu:%d): %s, %s\n", call, line, cudaGetErrorName(code),
               cudaGetErrorString(code));
  if (code == cudaErrorIllegalAddress || code == cudaErrorLaunchFailure)
    std::fprintf(stderr, "  a kernel fault: an access out of bounds, or a wgmma operand misplaced\n");
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
  std::vector<T> download() const {
    std::vector<T> h(n_);
    LAB_CHECK(cudaMemcpy(h.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
  }

 private:
  T* p_ = nullptr;
  std::size_t n_;
};

std::vector<__half> random_halves(std::size_t n, float lo, float hi, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<__half> h(n);
  for (auto& x : h) x = __float2half(dist(rng));
  return h;
}

double to_double(__half x) { return double(__half2float(x)); }

}  // namespace

int main() {
  using namespace lab09;
  if (auto why = ladder::hopper::refuse_unless_sm90()) {
    std::printf("no GPU to run the kernel on: %s\n", why->c_str());
    return kExitNoGpu;
  }

  std::mt19937 rng(20261201);
  const auto q = random_halves(std::size_t(kRows) * kHeadDim, -1.f, 1.f, rng);
  const auto k = random_halves(std::size_t(kBlockN) * kHeadDim, -1.f, 1.f, rng);
  const auto v = random_halves(std::size_t(kBlockN) * kHeadDim, -1.f, 1.f, rng);
  const auto p = random_halves(std::size_t(kRows) * kBlockN, 0.f, 1.f, rng);  // probabilities
  const float scale_log2 = float(std::numbers::log2e / std::sqrt(double(kHeadDim)));

  Buffer<__half> dq(q.size()), dk(k.size()), dv(v.size()), dp(p.size());
  dq.upload(q);
  dk.upload(k);
  dv.upload(v);
  dp.upload(p);
  Buffer<float> dout(std::size_t(kRows) * kHeadDim), dl(kRows);
  LAB_CHECK(cudaMemset(dout.get(), 0xFF, std::size_t(kRows) * kHeadDim * sizeof(float)));  // NaN: all written?
  LAB_CHECK(cudaMemset(dl.get(), 0xFF, kRows * sizeof(float)));
  LAB_CHECK(launch_overlap(dq.get(), dk.get(), dv.get(), dp.get(), scale_log2, dout.get(), dl.get(), nullptr));
  LAB_CHECK(cudaDeviceSynchronize());
  const auto o = dout.download(), l = dl.download();

  // The fp64 reference and the allowances: the inputs are exact in fp64, so the error is the
  // kernel's fp32 accumulation (the tensor cores', then the 128-term sum of l) and ex2.approx's
  // 2^-22. 2^-12 of the sum of |terms| for o and 2^-13 of l are about 10× that; one missing or
  // doubled term of the 128 is about 2^-7.
  int bad = 0;
  double worst_o = 0, worst_l = 0;
  for (int r = 0; r < kRows; ++r) {
    double l_ref = 0;
    for (int j = 0; j < kBlockN; ++j) {
      double sc = 0;
      for (int d = 0; d < kHeadDim; ++d) sc += to_double(q[r * kHeadDim + d]) * to_double(k[j * kHeadDim + d]);
      l_ref += std::exp2(sc * double(scale_log2));
    }
    const double l_tol = std::ldexp(l_ref, -13);
    const double l_err = std::abs(double(l[r]) - l_ref);
    if (!(l_err <= l_tol)) {  // NaN fails too
      if (bad++ < 5) std::printf("  l[%d] = %.7g, expected %.7g (error %.3g, allowed %.3g)\n", r, l[r], l_ref, l_err, l_tol);
    }
    worst_l = std::max(worst_l, l_err / l_tol);
    for (int d = 0; d < kHeadDim; ++d) {
      double o_ref = 0, mag = 0;
      for (int j = 0; j < kBlockN; ++j) {
        const double term = to_double(p[r * kBlockN + j]) * to_double(v[j * kHeadDim + d]);
        o_ref += term;
        mag += std::abs(term);
      }
      const double o_tol = std::ldexp(mag, -12);
      const double got = o[r * kHeadDim + d];
      const double err = std::abs(got - o_ref);
      if (!(err <= o_tol)) {
        if (bad++ < 5) std::printf("  o[%d][%d] = %.7g, expected %.7g (error %.3g, allowed %.3g)\n", r, d, got, o_ref, err, o_tol);
      }
      worst_o = std::max(worst_o, err / o_tol);
    }
  }
  if (bad) {
    std::printf("outputs: %d wrong value%s (the first are above)\n", bad, bad == 1 ? "" : "s");
    return kExitFail;
  }
  std::printf("outputs: o (%d × %d) and l (%d rows) right; worst error %.3f (o) and %.3f (l) of the allowance\n",
              kRows, kHeadDim, kRows, worst_o, worst_l);
  return 0;
}
