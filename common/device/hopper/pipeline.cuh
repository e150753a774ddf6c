// The K/V ring of an AttentionStorage (shared_storage.cuh): the producer's block load and the
// consumers' wait and release, with the stage and the phase parity both derived from one position
// counter. Each role keeps its own counter and advances it once per K/V block for the CTA's
// whole life (across tiles, from step 20 on), so both always agree on which stage and which lap
// they are at without ever talking about it. The phase protocol is mbarrier.cuh's.
#pragma once

#include <cstdint>

#include "common/device/hopper/arch.cuh"
#include "common/device/hopper/mbarrier.cuh"
#include "common/device/hopper/tma.cuh"

namespace ladder::hopper {

// Position p of the ring is stage p % kStages, on lap p / kStages: the lap's parity is the phase
// a full barrier completes for it (empty barriers: the opposite, see mbarrier.cuh).
template <int kStages>
__device__ __forceinline__ int ring_stage(int position) {
  return position % kStages;
}
template <int kStages>
__device__ __forceinline__ std::uint32_t ring_parity(int position) {
  return (position / kStages) & 1;
}

#if LADDER_SM90A
// Barriers of a kernel with `consumers` consumer warpgroups: one arrival (the producer's
// expect_tx) completes a full barrier; q_empty takes one per consumer warpgroup, kv_empty one per
// consumer warp. One thread calls this; a __syncthreads must follow.
template <class Storage>
__device__ __forceinline__ void init_barriers(Storage& st, int consumers) {
  mbarrier_init(&st.q_full, 1);
  mbarrier_init(&st.q_empty, consumers);
  for (int s = 0; s < Storage::kStages; ++s) {
    mbarrier_init(&st.kv_full[s], 1);
    mbarrier_init(&st.kv_empty[s], consumers * 4);
  }
  mbarrier_init_fence();
}

// A storage whose V lands in a ring of its own (fp8.cuh's Fp8SplitRingStorage).
template <class Storage>
concept SplitVRing = requires { Storage::kVStages; };

// Producer: the ring's position-th block, keys [kv_row, kv_row + kBlockN) of head bh. Waits
// until the consumers have released the stage's previous lap, announces both copies' bytes and
// issues them; the full barrier completes when the last byte has landed. With V in its own ring,
// K goes as before (kv_full counts K alone) and V waits for its own stage's release (v_empty),
// after K's copy is issued: V landing then also says that the stage's Vᵀ is free.
template <class Storage>
__device__ __forceinline__ void load_kv_block(Storage& st, int position, const CUtensorMap* tm_k,
                                              const CUtensorMap* tm_v, int kv_row, int bh) {
  const int stage = ring_stage<Storage::kStages>(position);
  mbarrier_wait(&st.kv_empty[stage], ring_parity<Storage::kStages>(position) ^ 1);
  if constexpr (SplitVRing<Storage>) {
    mbarrier_arrive_expect_tx(&st.kv_full[stage], Storage::kKVBytes);
    tma_load_tile(st.k[stage], tm_k, &st.kv_full[stage], kv_row, bh);
    const int v_stage = ring_stage<Storage::kVStages>(position);
    mbarrier_wait(&st.v_empty[v_stage], ring_parity<Storage::kVStages>(position) ^ 1);
    mbarrier_arrive_expect_tx(&st.v_full[v_stage], Storage::kKVBytes);
    tma_load_tile(st.v[v_stage], tm_v, &st.v_full[v_stage], kv_row, bh);
  } else {
    mbarrier_arrive_expect_tx(&st.kv_full[stage], 2 * Storage::kKVBytes);
    tma_load_tile(st.k[stage], tm_k, &st.kv_full[stage], kv_row, bh);
    tma_load_tile(st.v[stage], tm_v, &st.kv_full[stage], kv_row, bh);
  }
}

// Consumer: until the position-th block has landed.
template <class Storage>
__device__ __forceinline__ void wait_kv_block(Storage& st, int position) {
  mbarrier_wait(&st.kv_full[ring_stage<Storage::kStages>(position)],
                ring_parity<Storage::kStages>(position));
}

// Consumer: this warp is done with `stage` (every lane is past the wgmma wait of the last
// product that read it): one arrival per warp.
template <class Storage>
__device__ __forceinline__ void release_kv_stage(Storage& st, int stage, int lane) {
  __syncwarp();
  if (lane == 0) mbarrier_arrive(&st.kv_empty[stage]);
}
#endif  // LADDER_SM90A

}  // namespace ladder::hopper
