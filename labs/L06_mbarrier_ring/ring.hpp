// Lab 06 — the K/V mbarrier ring. YOUR FILE: the five answers the producer and the consumers of
// the warp-specialized kernel (mbarrier_ring.cu) use to share a ring of kStages K/V stages.
// Fill in the TODOs, then
//   labs/check.sh L06
// The checker first runs these functions in a model of the protocol (no GPU needed: every
// interleaving of a small ring, then random schedules of the kernel's own), then the kernel.
// (README.md has the puzzle; solution/ has the answers, for after you tried.)
//
// Block i is the i-th K/V block a CTA processes (i = 0, 1, ..., n_blocks - 1). The producer, for
// each i: waits on empty[stage(i)] for parity empty_parity(i), arrives on full[stage(i)] with
// expect_tx(expect_bytes(...)), and issues two TMA copies (the K tile and the V tile, each a box of
// block_rows x head_dim fp16) that complete_tx on full[stage(i)]. Each consumer warp, for each i:
// waits on full[stage(i)] for parity full_parity(i), reads K, reads V, and arrives once on
// empty[stage(i)] at the point kRelease names.
//
// The rules (common/device/hopper/mbarrier.cuh): a phase completes when its pending arrivals and
// its pending bytes both reach zero, then the barrier's phase bit flips. wait(bar, P) returns once
// the phase of parity P has completed, i.e. once the barrier's current phase parity is not P. A
// freshly initialised barrier is in phase 0 (parity 0).
#pragma once

#include <cuda_runtime.h>  // __host__ __device__

#include <cstdint>

#include "labs/L06_mbarrier_ring/lab06.hpp"

namespace ring {

// TODO 1: the stage block i lives in, in a ring of `stages` stages.
__host__ __device__ constexpr int stage(int i, int stages) {
  return 0;  // TODO
}

// TODO 2: the parity a consumer waits for on full[stage(i)] before it reads block i.
__host__ __device__ constexpr std::uint32_t full_parity(int i, int stages) {
  return 0;  // TODO
}

// TODO 3: the parity the producer waits for on empty[stage(i)] before it refills the stage with
// block i. (Which phase of empty[s] must have completed? What about the first lap, when no
// consumer has arrived yet?)
__host__ __device__ constexpr std::uint32_t empty_parity(int i, int stages) {
  return 0;  // TODO
}

// TODO 4: the bytes the producer announces with expect_tx for one block: its K tile and its V
// tile, each a TMA box of `block_rows` rows of `head_dim` fp16 values (lab06::kElementBytes each).
// `rows_in_tensor` (1 ... block_rows) is how many of the box's rows lie before the end of the
// sequence: the last block of a ragged N has fewer. (Does the copy engine count the others?
// common/device/hopper/tma.cuh says.)
__host__ __device__ constexpr std::uint32_t expect_bytes(int block_rows, int head_dim, int rows_in_tensor) {
  return 0;  // TODO
}

// TODO 5: where a consumer warp arrives on empty[stage(i)]: the earliest point after which it
// never touches the stage again (lab06.hpp lists the three).
inline constexpr lab06::Release kRelease = lab06::Release::kAfterWait;  // TODO

}  // namespace ring
