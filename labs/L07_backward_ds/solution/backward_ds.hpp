// Lab 07 — the softmax's backward on mma.sync fragments. REFERENCE SOLUTION: the four answers;
// try the starter (../backward_ds.hpp) first.
//
// The kernel's loop, per CTA of kBlockN keys and per block of kBlockM queries: each warp owns 16
// keys and computes, on mma.m16n8k16 (fp16 in, fp32 accumulate),
//   Sᵀ  = K Qᵀ        (16 keys × 64 queries: kQueryTiles n8 accumulator tiles of 4 fp32 a lane)
//   dPᵀ = V dOᵀ       (the same shape)
// then YOUR softmax_backward_tile turns each tile pair into Pᵀ and dSᵀ in place, and YOUR pack_a
// turns two accumulator tiles into the A operand of
//   dV += Pᵀ dO   and   dK += dSᵀ Q    (K-dimension: the block's queries, 16 per k16 step).
// The tiles are transposed on purpose: the keys are the rows, so Pᵀ and dSᵀ are already the A
// operands of the two products that this CTA owns. Which register holds which query?
//
// The accumulator's layout is the PTX ISA's ("Matrix Fragments for mma.m16n8k16"); lane = 4·g + t.
// The forward's kernels (steps 05, 06) use it through common/device/mma_fragments.cuh: read it.
#pragma once

#include <cuda_runtime.h>  // __host__ __device__

#include <cmath>
#include <cstdint>

#include "labs/L07_backward_ds/lab07.hpp"

namespace bwd {

// TODO 1: the row and the column of the 16×8 fp32 tile C that register c (0 … 3) of `lane` holds.
__host__ __device__ constexpr int acc_row(int lane, int c) {
  return lane / 4 + 8 * (c / 2);  // g for c0, c1; g + 8 for c2, c3
}
__host__ __device__ constexpr int acc_col(int lane, int c) {
  return 2 * (lane % 4) + (c % 2);  // the pair 2t, 2t + 1
}

// TODO 2: P = softmax(scale · S) for one entry, from its logit s = q·k (unscaled; −inf where
// masked) and its query's log-sum-exp lse = log Σ_j exp(scale · s_j) (natural log, as the forward
// wrote it). No maximum, no sum: what is left of the softmax?
__host__ __device__ inline float recompute_p(float s, float lse, float scale) {
  // exp(scale·s − lse) = exp(scale·s) / Σ_j exp(scale·s_j): the forward's own normalization,
  // so P is exactly the forward's P, never re-normalized. One FFMA and one EX2. exp2(−inf) = 0.
  return exp2f((s * scale - lse) * lab07::kLog2e);
}

// TODO 3: one n8 tile of this warp's Sᵀ and dPᵀ: 16 keys (rows) × the 8 queries 8·nt … 8·nt + 7
// of the block (columns). In place: s_to_p[c] comes in as the masked logit and leaves as P;
// dp_to_ds[c] comes in as dP and leaves as dS = P ∘ (dP − D) (unscaled: the kernel applies the
// softmax scale to dK once, at the end). lse[q] and delta[q] (D_q = rowsum(dO ∘ O) of query q)
// are indexed by the block's query, 0 … kBlockM − 1.
__host__ __device__ inline void softmax_backward_tile(float (&s_to_p)[4], float (&dp_to_ds)[4],
                                                      const float* lse, const float* delta,
                                                      int lane, int nt, float scale) {
  // In Sᵀ the queries are the columns: c0 and c2 belong to query 2t, c1 and c3 to query 2t + 1
  // (the forward's habit, one statistic per row g / g + 8, would pick the keys' index here).
  for (int c = 0; c < 4; ++c) {
    const int q = 8 * nt + acc_col(lane, c);
    const float p = recompute_p(s_to_p[c], lse[q], scale);
    s_to_p[c] = p;
    dp_to_ds[c] = p * (dp_to_ds[c] - delta[q]);
  }
}

// TODO 4: the A operand (16×16 fp16, row-major: rows = this warp's 16 keys, columns = 16 queries)
// of one k16 step of dV += Pᵀ dO (or dK += dSᵀ Q), from the two accumulator tiles that cover
// those 16 queries: `lo` (queries 0-7 of the step) and `hi` (queries 8-15). The A layout:
//   a0 = A[g][2t, 2t+1]   a1 = A[g+8][2t, 2t+1]   a2 = A[g][2t+8, 2t+9]   a3 = A[g+8][2t+8, 2t+9]
// (lab07::pack_half2(x, y) puts x in the low half).
__host__ __device__ inline void pack_a(std::uint32_t (&a)[4], const float (&lo)[4], const float (&hi)[4]) {
  // The C tile's c0, c1 are row g, columns 2t, 2t+1 and c2, c3 row g + 8: exactly a0 and a1 of
  // the left 8 columns; the right 8 come from `hi`. No shuffle: the same lane holds both.
  a[0] = lab07::pack_half2(lo[0], lo[1]);
  a[1] = lab07::pack_half2(lo[2], lo[3]);
  a[2] = lab07::pack_half2(hi[0], hi[1]);
  a[3] = lab07::pack_half2(hi[2], hi[3]);
}

}  // namespace bwd
