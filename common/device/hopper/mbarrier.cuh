// mbarrier: the shared-memory barrier object that Hopper's asynchronous units signal.
//
// An mbarrier is 8 bytes of shared memory holding a phase bit, a pending-arrival count and a
// pending-transaction byte count. A phase completes when both counts reach zero; then the phase
// bit flips and the counts reload. Threads never wait for "the barrier", they wait for "the phase
// with parity P to have completed": try_wait.parity(P) returns true once the barrier's current
// phase parity differs from P.
//
// The ring protocol Part IV uses, for stage s of a K/V ring and the i-th time s is used
// (i = iteration / kStages):
//   full[s]   init count 1. The producer arrives once with expect_tx(bytes) and issues TMA copies
//             that complete_tx those bytes; the phase completes when the last byte has landed.
//             Consumers wait for parity i & 1.
//   empty[s]  (steps 18+) init count = consumer warps. Each consumer warp arrives once when it is
//             done reading stage s; the producer waits for parity (i & 1) ^ 1 before refilling.
//             On the first lap (i = 0) it waits for parity 1, which a fresh barrier reports as
//             complete (the phase "before" phase 0): every stage starts empty without a special
//             case.
// A wait can hang only if an arrival or a byte never comes. The producer always expects exactly
// the bytes of the boxes it issues, and TMA counts the whole box even where it lies past the end
// of the tensor (those bytes are zero-filled, not skipped), so the last, partial tile completes
// like any other.
#pragma once

#include <cstdint>

#include "common/device/hopper/arch.cuh"
#include "common/device/ptx.cuh"

namespace ladder::hopper {

#if LADDER_SM90A
__device__ __forceinline__ void mbarrier_init(std::uint64_t* bar, int arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(ptx::smem_addr(bar)),
               "r"(arrivals));
}

// After initialising barriers and before any other thread or the copy engine uses them: make the
// initialisation visible to the async proxy (TMA signals barriers from there). A __syncthreads
// must follow.
__device__ __forceinline__ void mbarrier_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// One arrival that also announces `bytes` of transactions (TMA copies) for the current phase.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(std::uint64_t* bar, std::uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(
                   ptx::smem_addr(bar)),
               "r"(bytes)
               : "memory");
}

// One plain arrival (release semantics: this thread's earlier shared-memory reads are ordered
// before the phase completes).
__device__ __forceinline__ void mbarrier_arrive(std::uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(ptx::smem_addr(bar)) : "memory");
}

// One test of the phase of parity `parity` (acquire): true once it has completed. mbarrier_wait
// loops on it; the labs' bounded waits add a deadline.
__device__ __forceinline__ bool mbarrier_try_wait(std::uint64_t* bar, std::uint32_t parity) {
  std::uint32_t done = 0;
  asm volatile(
      "{\n.reg .pred p;\n"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
      "selp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(done)
      : "r"(ptx::smem_addr(bar)), "r"(parity)
      : "memory");
  return done != 0;
}

// Spin until the phase of parity `parity` has completed (acquire: what the copy engine wrote
// before completing it is visible afterwards). try_wait suspends the thread for a while in
// hardware before returning false, so the loop is not a hot spin.
__device__ __forceinline__ void mbarrier_wait(std::uint64_t* bar, std::uint32_t parity) {
  while (!mbarrier_try_wait(bar, parity)) {
  }
}

// Writes by ordinary instructions (st.shared, cp.async) to shared memory that the async proxy
// (wgmma, TMA) reads next must be fenced by each writing thread before the barrier that
// publishes them.
__device__ __forceinline__ void fence_proxy_async_smem() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
// The same between the async proxy's global-memory operations (a bulk reduce-add) and ordinary
// ones (a semaphore's acquire or release) of the same thread (step 39's ordered dQ).
__device__ __forceinline__ void fence_proxy_async_global() {
  asm volatile("fence.proxy.async.global;\n" ::: "memory");
}
#endif  // LADDER_SM90A

}  // namespace ladder::hopper
