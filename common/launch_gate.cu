#include "common/launch_gate.hpp"

#include "common/check.hpp"

namespace ladder {
namespace {

// One thread polls the host's flag through PCIe/NVLink-C2C every microsecond. The loads are
// volatile (system-coherent, never cached in L1) so the store from the host is seen.
__global__ void gate_kernel(volatile const std::uint32_t* flag, volatile std::uint32_t* timed_out,
                            std::uint64_t timeout_ns) {
  std::uint64_t start = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  while (*flag == 0) {
    std::uint64_t now = 0;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    if (now - start > timeout_ns) {
      *timed_out = 1;
      return;
    }
    __nanosleep(1000);
  }
}

}  // namespace

LaunchGate::LaunchGate() {
  void* flag = nullptr;
  void* timed_out = nullptr;
  CUDA_CHECK(cudaHostAlloc(&flag, sizeof(std::uint32_t), cudaHostAllocMapped));
  CUDA_CHECK(cudaHostAlloc(&timed_out, sizeof(std::uint32_t), cudaHostAllocMapped));
  flag_ = static_cast<volatile std::uint32_t*>(flag);
  timed_out_ = static_cast<volatile std::uint32_t*>(timed_out);
  *flag_ = 1;
  *timed_out_ = 0;
}

LaunchGate::~LaunchGate() {
  if (flag_) cudaFreeHost(const_cast<std::uint32_t*>(flag_));  // never throw from a destructor
  if (timed_out_) cudaFreeHost(const_cast<std::uint32_t*>(timed_out_));
}

void LaunchGate::close(cudaStream_t stream) {
  *flag_ = 0;
  *timed_out_ = 0;
  // With unified addressing (every 64-bit platform CUDA 13 supports) a mapped pinned host
  // pointer is also the device's pointer.
  gate_kernel<<<1, 1, 0, stream>>>(flag_, timed_out_, kTimeoutNs);
  CUDA_CHECK_LAUNCH("gate_kernel");
}

void LaunchGate::open() { *flag_ = 1; }

}  // namespace ladder
