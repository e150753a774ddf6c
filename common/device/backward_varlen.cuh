// The backward of a packed variable-length batch (step 38): the plan that numbers its key blocks,
// and its preprocess and dQ convert (backward_prep.cuh's, on the packed layout).
//
// Q, O, dO, dQ are [total, H, D] and K, V, dK, dV [total, Hkv, D] (common/problem.hpp); the LSE is
// [H, total]. The per-row statistics and the dQ accumulator are laid out per head and padded per
// sequence: sequence b's rows start at pad_start[b] (a multiple of kRowPad) of its head's
// total_pad rows, and its padding rows get lse = +inf and D = 0, exactly as a dense head's rows
// past N. So a main kernel reads a query block's statistics with one bulk copy, never checks a
// row against the sequence's end (P and dS of a padding row are exactly 0, whatever the rows of
// the next sequence that TMA loaded there), and adds a block's dQ rows into its own sequence's
// padding. This is FlashAttention-3's "padded offsets" (total + b·kBlockM, rounded) with a round
// to kRowPad per sequence.
//
// The plan is computed on the host from the shape's lengths and passed by value (a
// __grid_constant__ parameter, as hopper::VarlenPlan): the key blocks of every sequence, the
// longest sequences first, so the CTAs that walk the most query blocks start first.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/check.hpp"
#include "common/device/backward_prep.cuh"
#include "common/math.hpp"
#include "common/problem.hpp"

namespace ladder::bwd {

// The last i in [0, count) with sorted[i] <= x (0 if none): the entry, sequence or token range that
// holds x, for the ascending prefix arrays below.
__host__ __device__ __forceinline__ int last_at_most(const int* sorted, int count, int x) {
  int lo = 0, hi = count - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (sorted[mid] <= x) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

struct VarlenBackwardPlan {
  static constexpr int kMaxSeqs = 1024;
  int seqs;
  int key_blocks;                 // Σ_b ceil(len_b / kBlockN): the grid's x
  int total_pad;                  // Σ_b padded_rows(len_b): rows of a head's statistics and dQ
  int order[kMaxSeqs];            // the sequences, longest first
  int block_start[kMaxSeqs + 1];  // entry i's key blocks are [block_start[i], block_start[i + 1])
  int pad_start[kMaxSeqs + 1];    // by sequence: where its padded rows start; [seqs] = total_pad

  // The plan entry whose key blocks hold `block`; the sequence whose padded rows hold `row`.
  __host__ __device__ int entry_of(int block) const { return last_at_most(block_start, seqs, block); }
  __host__ __device__ int sequence_of_padded_row(int row) const { return last_at_most(pad_start, seqs, row); }
};

inline std::optional<std::string> varlen_backward_refusal(const AttentionShape& s) {
  if (!s.varlen()) return "a packed variable-length batch only (--varlen); the dense backward is 37/group_in_cta's";
  if (s.q_lens.size() > std::size_t(VarlenBackwardPlan::kMaxSeqs))
    return "the varlen backward's plan holds up to " + std::to_string(VarlenBackwardPlan::kMaxSeqs) +
           " sequences, not " + std::to_string(s.q_lens.size());
  if (std::int64_t(s.heads) * (s.total_q() + std::int64_t(s.q_lens.size()) * kRowPad) > INT_MAX)
    return std::string("the varlen backward indexes a head's padded rows with 32-bit integers: the batch is too large");
  return std::nullopt;
}

inline VarlenBackwardPlan make_varlen_backward_plan(const AttentionShape& s, int block_n) {
  if (auto why = varlen_backward_refusal(s)) throw std::invalid_argument(*why);
  VarlenBackwardPlan p{};
  p.seqs = int(s.q_lens.size());
  std::vector<int> order(std::size_t(p.seqs));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return s.q_lens[std::size_t(a)] > s.q_lens[std::size_t(b)]; });
  p.block_start[0] = 0;
  for (int i = 0; i < p.seqs; ++i) {
    p.order[i] = order[std::size_t(i)];
    p.block_start[i + 1] = p.block_start[i] + ceil_div(s.q_lens[std::size_t(order[std::size_t(i)])], block_n);
  }
  p.key_blocks = p.block_start[p.seqs];
  p.pad_start[0] = 0;
  for (int b = 0; b < p.seqs; ++b) p.pad_start[b + 1] = p.pad_start[b] + padded_rows(s.q_lens[std::size_t(b)]);
  p.total_pad = p.pad_start[p.seqs];
  return p;
}

// Where a varlen batch's statistics and dQ accumulator sit in the workspace a variant sizes with
// workspace_layout (the dense B·H·padded(longest) rows bound H·total_pad): the same three regions,
// indexed [H][total_pad] (statistics) and [H][total_pad][D] in DqFragments order (dQ).

// ---- Preprocess: D and lse·log2(e) by padded row, and the dQ accumulator zeroed ------------------
template <class Dot, class Element, int kHeadDim>
__global__ void __launch_bounds__(kPrepThreads)
    varlen_backward_preprocess_kernel(const Element* __restrict__ o, const Element* __restrict__ d_o,
                                      const float* __restrict__ lse, const int* __restrict__ cu_seqlens,
                                      Workspace ws, int heads, int total_q,
                                      const __grid_constant__ VarlenBackwardPlan plan) {
  constexpr int kLanes = Dot::kLanes;
  constexpr int kPerLane = kHeadDim / kLanes;
  constexpr int kRows = kPrepThreads / kLanes;  // per block: they divide kRowPad, so one sequence's
  static_assert(kHeadDim % kLanes == 0 && kRowPad % kRows == 0);
  const unsigned blocks_per_head = unsigned(plan.total_pad / kRows);
  const int h = int(blockIdx.x / blocks_per_head);
  const int r = int(blockIdx.x % blocks_per_head) * kRows + int(threadIdx.x) / kLanes;  // < total_pad
  const int lane = int(threadIdx.x) % kLanes;
  const int b = plan.sequence_of_padded_row(r);
  const int i = r - plan.pad_start[b];  // the row within its sequence
  const int len = cu_seqlens[b + 1] - cu_seqlens[b];
  const std::int64_t token = std::int64_t(cu_seqlens[b]) + i;

  float sum = i < len ? lane_row_dot<kPerLane>(o, d_o, (token * heads + h) * kHeadDim + lane * kPerLane) : 0.f;
  // Every padded row starts at 0 (the layout is a permutation of the head's rows).
  zero_lane_row<kPerLane>(ws.dq_accum + (std::int64_t(h) * plan.total_pad + r) * kHeadDim + lane * kPerLane);
  sum = Dot::sum_lanes(sum);
  if (lane == 0) {
    const std::int64_t at = std::int64_t(h) * plan.total_pad + r;
    ws.delta[at] = sum;  // 0 in the padding
    ws.lse_log2[at] = i < len ? lse[std::int64_t(h) * total_q + token] * kLog2e : INFINITY;
  }
}

// ---- Convert: dQ = scale · accumulator, from the padded rows to the packed [total, H, D] --------
template <class Element, int kHeadDim>
__global__ void __launch_bounds__(kPrepThreads)
    varlen_backward_convert_dq_kernel(const float* __restrict__ dq_accum, Element* __restrict__ dq,
                                      const int* __restrict__ cu_seqlens, int heads, std::int64_t pieces,
                                      float scale, const __grid_constant__ VarlenBackwardPlan plan) {
  constexpr int kElems = DqFragments::kConvertElems;
  constexpr int kPieces = kHeadDim / kElems;  // per row
  for (std::int64_t idx = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < pieces;
       idx += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int64_t row = idx / kPieces;  // (token, head), packed
    const int col = int(idx % kPieces) * kElems;
    const int token = int(row / heads), h = int(row % heads);
    const int b = last_at_most(cu_seqlens, plan.seqs, token);  // the token's sequence
    const int padded_row = plan.pad_start[b] + (token - cu_seqlens[b]);
    const float* head = dq_accum + std::int64_t(h) * plan.total_pad * kHeadDim;
    const float2 a = *reinterpret_cast<const float2*>(head + DqFragments::offset<kHeadDim>(padded_row, col));
    const float2 c = *reinterpret_cast<const float2*>(head + DqFragments::offset<kHeadDim>(padded_row, col + 2));
    *reinterpret_cast<uint2*>(dq + row * kHeadDim + col) =
        make_uint2(ptx::pack2_as<Element>(a.x * scale, a.y * scale), ptx::pack2_as<Element>(c.x * scale, c.y * scale));
  }
}

// A varlen backward's three launches: the preprocess, main(ws, plan), the convert.
template <class Dot, class Element, int kHeadDim, class Main>
void run_varlen(const BackwardArgs& a, cudaStream_t stream, const VarlenBackwardPlan& plan, Main&& main) {
  if (a.cu_seqlens_q == nullptr) throw std::logic_error("a varlen backward launched without cu_seqlens_q");
  const Workspace ws = carve<DqFragments>(a, 0);
  const auto x = a.as<Element>();
  const int heads = a.shape.heads;
  const int total_q = int(a.shape.total_q());
  const std::int64_t blocks = std::int64_t(heads) * plan.total_pad / (kPrepThreads / Dot::kLanes);
  varlen_backward_preprocess_kernel<Dot, Element, kHeadDim><<<unsigned(blocks), kPrepThreads, 0, stream>>>(
      x.o, x.d_o, a.lse, a.cu_seqlens_q, ws, heads, total_q, plan);
  CUDA_CHECK_LAUNCH("varlen_backward_preprocess_kernel");
  main(ws);
  const std::int64_t pieces = std::int64_t(total_q) * heads * (kHeadDim / DqFragments::kConvertElems);
  const int grid = int(std::min<std::int64_t>((pieces + kPrepThreads - 1) / kPrepThreads,
                                              std::int64_t(a.sm_count > 0 ? a.sm_count : 132) * 16));
  varlen_backward_convert_dq_kernel<Element, kHeadDim><<<grid, kPrepThreads, 0, stream>>>(
      ws.dq_accum, x.dq, a.cu_seqlens_q, heads, pieces, a.softmax_scale, plan);
  CUDA_CHECK_LAUNCH("varlen_backward_convert_dq_kernel");
}

}  // namespace ladder::bwd
