// Part IV's kernels use instructions only Hopper has (wgmma, the bulk tensor copy engine,
// setmaxnreg), and wgmma/setmaxnreg exist only in the arch-specific sm_90a target. A build for
// several architectures (CI builds sm_80 and sm_90a) compiles every kernel once per target, so
// each Hopper kernel body sits under LADDER_SM90A and the other passes compile an empty stub.
// The harness never launches the stub: every Hopper variant refuses, through its registration,
// any GPU that is not compute capability 9.0 (see refuse_unless_sm90 below).
#pragma once

#include <cuda_runtime.h>

#include <optional>
#include <string>

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define LADDER_SM90A 1
#else
#define LADDER_SM90A 0
#endif

namespace ladder::hopper {

// Why a Hopper (sm_90a) kernel cannot run on the current device, or nothing. sm_90a machine code
// runs on compute capability 9.0 only: not on Ampere (no wgmma), and not on Blackwell either
// (arch-specific code is not forward compatible), hence "exactly 9.0" rather than ">= 9.0".
inline std::optional<std::string> refuse_unless_sm90() {
  int device = 0;
  int major = 0;
  int minor = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
    cudaGetLastError();  // leave no sticky error behind for the harness
    return "no CUDA device to check for Hopper (compute capability 9.0)";
  }
  if (major != 9 || minor != 0)
    return "sm_90a code (wgmma, TMA, setmaxnreg) runs on compute capability 9.0 only; this GPU is " +
           std::to_string(major) + "." + std::to_string(minor);
  return std::nullopt;
}

}  // namespace ladder::hopper

namespace ladder::hopper {

#if LADDER_SM90A
// setmaxnreg (sm_90a): a warpgroup gives registers back to the SM's pool (dec) or takes more
// from it (inc), in multiples of 8 between 24 and 256. The kernel must start with a register cap
// (__launch_bounds__(threads, 1)), and every warp of the warpgroup must execute it; ptxas then
// allocates the code that follows in each branch under the new cap.
template <int kRegisters>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}
template <int kRegisters>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}
#endif  // LADDER_SM90A

}  // namespace ladder::hopper

namespace ladder::hopper {

#if LADDER_SM90A
// The calling thread's warpgroup (threadIdx.x / 128), broadcast from lane 0 of its warp. All 32
// lanes of a warp share a warpgroup, but the compiler treats a value computed from threadIdx as
// per-thread, so the role branch (producer, consumer c) looks divergent to it, and what a role
// computes after the branch (its tile, the K/V loop bounds, Q's wgmma descriptors) may stay in
// per-thread registers: copied into uniform ones before every wgmma, compared per thread at every
// loop test. A shuffled value is the same in every lane by construction, so the branches are
// warp-uniform and those values live in the uniform registers that wgmma and the loop tests read.
// Call it where every lane of the warp is present (the kernel's start).
__device__ __forceinline__ int warpgroup_index() {
  constexpr int kWarpgroupThreads = 128;
  return __shfl_sync(0xffffffffu, int(threadIdx.x) / kWarpgroupThreads, 0);
}
#endif  // LADDER_SM90A

}  // namespace ladder::hopper

namespace ladder::hopper {

// Named barriers (bar.sync / bar.arrive with an id, sm_70+): a barrier among `kThreads` threads
// that need not be the whole CTA. sync waits until kThreads threads have arrived (itself
// included); arrive adds the calling warp's threads and goes on. Id 0 is __syncthreads'.
template <int kThreads>
__device__ __forceinline__ void named_barrier_sync(int id) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "n"(kThreads) : "memory");
}
template <int kThreads>
__device__ __forceinline__ void named_barrier_arrive(int id) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "n"(kThreads) : "memory");
}

}  // namespace ladder::hopper
