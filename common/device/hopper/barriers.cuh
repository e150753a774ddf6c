// The named barriers (bar.sync / bar.arrive ids, arch.cuh) Part IV's kernels use, in one place.
//
// A CTA has 16 hardware barriers; id 0 is __syncthreads'. Two kernels' ids never meet (the ids are
// per CTA), but within a kernel two uses of one id with different thread counts deadlock or
// corrupt each other silently, so every id a kernel uses is named here and derived from this enum,
// never written as arithmetic at the call site.
#pragma once

namespace ladder::hopper {

inline constexpr int kMaxConsumers = 3;  // consumer warpgroups per CTA in any Part IV kernel

enum class NamedBarrier : int {
  kSyncThreads = 0,  // reserved: __syncthreads
  // "consumer c may issue its GEMMs": the ping-pong (2 consumers) or round-robin (3) turn.
  // Synced by c, arrived at by the consumer before it; 2 or 3 warpgroups' threads.
  kTurn0 = 1,
  kTurn1 = 2,
  kTurn2 = 3,
  // "consumer c has staged its rows of O in shared memory": the epilogue's barrier among one
  // warpgroup's 128 threads before its store thread hands the rows to the TMA engine.
  kEpilogue0 = 4,
  kEpilogue1 = 5,
  kEpilogue2 = 6,
  // The backward (step 25): "every consumer warpgroup has staged its rows of dS in shared
  // memory", synced by all consumer threads before dQ = dS K reads the whole tile.
  kDsStaged = 7,
  // The backward's dQ writer warp (step 40): "the consumers have staged buffer b's block of dQ"
  // (arrived at by every consumer thread, synced by the writer warp) and "the writer is done
  // reading buffer b" (arrived at by the writer, synced by the consumers); 2·128 + 32 threads.
  kDqFull0 = 8,
  kDqFull1 = 9,
  kDqEmpty0 = 10,
  kDqEmpty1 = 11,
  kCount = 12,
};
static_assert(int(NamedBarrier::kCount) <= 16, "a CTA has 16 named barriers");

__device__ __host__ constexpr int turn_barrier(int consumer) {
  return int(NamedBarrier::kTurn0) + consumer;
}
__device__ __host__ constexpr int epilogue_barrier(int consumer) {
  return int(NamedBarrier::kEpilogue0) + consumer;
}
inline constexpr int kMaxDqStages = 2;  // staging buffers of the dQ writer warp
__device__ __host__ constexpr int dq_full_barrier(int buffer) {
  return int(NamedBarrier::kDqFull0) + buffer;
}
__device__ __host__ constexpr int dq_empty_barrier(int buffer) {
  return int(NamedBarrier::kDqEmpty0) + buffer;
}
static_assert(dq_full_barrier(kMaxDqStages - 1) == int(NamedBarrier::kDqFull1));
static_assert(dq_empty_barrier(kMaxDqStages - 1) == int(NamedBarrier::kDqEmpty1));
static_assert(turn_barrier(kMaxConsumers - 1) == int(NamedBarrier::kTurn2));
static_assert(epilogue_barrier(kMaxConsumers - 1) == int(NamedBarrier::kEpilogue2));

}  // namespace ladder::hopper
