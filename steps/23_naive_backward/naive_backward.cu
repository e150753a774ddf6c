// Step 23 — the naive backward: P (S recomputed, exponentiated before it is stored), dP and dS
// go through global memory.
//
// Given the forward's O and log-sum-exp and the upstream gradient dO = ∂L/∂O, per (batch, head):
//
//   D_i  = Σ_c dO[i][c] · O[i][c]                 (kernel 1, fp32, B·H·N floats)
//   P    = exp(Q Kᵀ · scale − lse)                (kernel 2, fp32, B·H·N² floats written)
//   dP   = dO Vᵀ                                  (kernel 3, fp32, B·H·N² floats written)
//   dS   = P ∘ (dP − D_i)                         (kernel 4, in place over dP)
//   dV   = Pᵀ dO                                  (kernel 5)
//   dQ   = scale · dS K                           (kernel 6)
//   dK   = scale · dSᵀ Q                          (kernel 7)
//
// This is step 00 for the backward: every formula is one kernel and every N×N matrix exists in
// full, in fp32, before anything uses it. Two things make it simpler than step 00's softmax:
// the forward's log-sum-exp turns the softmax into an element-wise exp (no row max, no row sum:
// P is recomputed exactly as the forward normalized it, never re-normalized here), and D_i, the
// softmax's Jacobian term Σ_j P[i][j]·dP[i][j], is the same number as rowsum(dO ∘ O), an N-free
// dot product of two rows the forward already produced. The ledger under the table counts the
// bytes the two N×N matrices cost; the FlashAttention-2 backward (step 24) never writes them.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "common/check.hpp"
#include "common/device/backward_prep.cuh"
#include "common/device/mma_element.cuh"
#include "common/registry.hpp"
#include "common/strings.hpp"

namespace {

using ladder::BackwardArgs;
using ladder::ceil_div;

// fp16 and bf16 differ only in their conversions: every kernel reads its elements as fp32
// (ladder::ptx::element_to_float) and accumulates in fp32.
using ladder::ptx::element_to_float;
template <class Element>
__device__ __forceinline__ Element from_float(float x);
template <>
__device__ __forceinline__ __half from_float<__half>(float x) { return __float2half_rn(x); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

// ---- Kernel 1: D_i = rowsum(dO ∘ O) -------------------------------------------------------------
// One warp per row: lanes take strided columns, then a shuffle tree sums them (the butterfly of
// steps 24 and 25's preprocess, common/device/backward_prep.cuh). D_i is what the softmax's
// backward subtracts from every dP[i][j]; computing it from dO and O costs one pass over two
// [N, D] tensors instead of one over the N×N matrices P and dP.
constexpr int kWarpSize = 32;
constexpr int kRowDotWarps = 8;  // rows per block

template <class Element>
__global__ void row_dot_kernel(const Element* __restrict__ d_o, const Element* __restrict__ o,
                               float* __restrict__ delta, std::int64_t rows, int d) {
  const std::int64_t row = std::int64_t(blockIdx.x) * kRowDotWarps + threadIdx.y;
  if (row >= rows) return;  // whole warps leave together: the shuffles below see full warps
  const Element* d_o_row = d_o + row * d;
  const Element* o_row = o + row * d;
  float acc = 0.f;
  for (int c = threadIdx.x; c < d; c += kWarpSize)
    acc += element_to_float(d_o_row[c]) * element_to_float(o_row[c]);
  acc = ladder::bwd::RowDot<kWarpSize, false>::sum_lanes(acc);  // lanes 16 apart first, then 8, ...
  if (threadIdx.x == 0) delta[row] = acc;
}

// ---- Kernels 2 and 3: an N×N matrix of row-by-row dot products ------------------------------------
// One thread per entry, as step 00's scores_kernel: a 16×16 block covers 16 rows i × 16 columns
// j of one (batch, head), every thread reads a whole row of A and a whole row of B from global
// memory (no reuse through shared memory: that is step 01's lesson).
//   kernel 2 (kProbabilities): A = Q, B = K, out = P[i][j] = exp(q_i·k_j·scale − lse_i)
//   kernel 3:                  A = dO, B = V, out = dP[i][j] = do_i·v_j
// A causal P is exactly 0 above the diagonal, written as 0 rather than computed, so that every
// entry of both matrices is written by every launch and nothing downstream reads stale memory.
constexpr int kPairTile = 16;

template <class Element, bool kProbabilities>
__global__ void row_pairs_kernel(const Element* __restrict__ a, const Element* __restrict__ b,
                                 const float* __restrict__ lse, float* __restrict__ out, int n,
                                 int d, float scale, bool causal) {
  const int col = blockIdx.x * kPairTile + threadIdx.x;  // key index j
  const int row = blockIdx.y * kPairTile + threadIdx.y;  // query index i
  const std::int64_t bh = blockIdx.z;
  if (row >= n || col >= n) return;

  const Element* a_row = a + (bh * n + row) * d;
  const Element* b_row = b + (bh * n + col) * d;
  float acc = 0.f;
  for (int t = 0; t < d; ++t) acc += element_to_float(a_row[t]) * element_to_float(b_row[t]);

  float value = acc;
  if constexpr (kProbabilities) {
    // The forward's lse_i = log Σ_j exp(s_ij·scale) makes P a row-wise softmax again with no
    // reduction: each entry is normalized by the same sum the forward used. Every causal row
    // has its diagonal, so lse_i is finite and exp() cannot see inf − inf.
    const bool masked = causal && col > row;
    value = masked ? 0.f : expf(acc * scale - lse[bh * n + row]);
  }
  out[(bh * n + row) * n + col] = value;
}

// ---- Kernel 4: dS = P ∘ (dP − D_i), in place over dP -------------------------------------------
// The softmax's backward, element by element: ∂L/∂S_ij = P_ij (dP_ij − Σ_k P_ik dP_ik). A grid-
// stride loop over all B·H·N² entries (their count exceeds 2^31 at large N). The softmax scale is
// applied later, in dQ and dK: S here is the unscaled Q Kᵀ.
constexpr int kElementwiseThreads = 256;

__global__ void ds_kernel(const float* __restrict__ p, float* __restrict__ dp_to_ds,
                          const float* __restrict__ delta, std::int64_t entries, int n) {
  const std::int64_t stride = std::int64_t(gridDim.x) * blockDim.x;
  for (std::int64_t e = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < entries; e += stride) {
    const std::int64_t row = e / n;  // (bh, i) flattened: the index of D_i
    dp_to_ds[e] = p[e] * (dp_to_ds[e] - delta[row]);
  }
}

// ---- Kernels 5, 6, 7: the three gradient products --------------------------------------------------
// One thread per output element, threads of a warp on consecutive columns c so the rows of the
// [N, D] operand are read coalesced (as step 00's pv_kernel). The N×N matrix M is read either
// along its rows or along its columns:
//   kTransposed = false   out[i][c] = alpha · Σ_j M[i][j] · X[j][c]   (dQ = scale · dS K)
//   kTransposed = true    out[j][c] = alpha · Σ_i M[i][j] · X[i][c]   (dV = Pᵀ dO, dK = scale · dSᵀ Q)
// Masked entries of P and dS are exact zeros, so the sums run over all N and need no mask.
constexpr int kOutCols = 64;
constexpr int kOutRows = 4;
// grid.y of these kernels is N / kOutRows, at most 65535. The workspace at that N (2 · 4·N² bytes
// per head, over 500 GB) never fits a GPU, so the harness's memory check refuses first; the limit
// is declared all the same.
constexpr std::int64_t kMaxSeqlen = std::int64_t(kOutRows) * ladder::kMaxGridYZ;

template <class Element, bool kTransposed>
__global__ void gradient_kernel(const float* __restrict__ m, const Element* __restrict__ x,
                                Element* __restrict__ out, int n, int d, float alpha) {
  const int col = blockIdx.x * kOutCols + threadIdx.x;
  const int row = blockIdx.y * kOutRows + threadIdx.y;
  const std::int64_t bh = blockIdx.z;
  if (row >= n || col >= d) return;

  const float* m_head = m + bh * n * n;
  const Element* x_head = x + bh * n * d;
  float acc = 0.f;
  for (int k = 0; k < n; ++k) {
    const float mk = kTransposed ? m_head[std::int64_t(k) * n + row] : m_head[std::int64_t(row) * n + k];
    acc += mk * element_to_float(x_head[std::int64_t(k) * d + col]);
  }
  out[(bh * n + row) * d + col] = from_float<Element>(alpha * acc);
}

// ---- Host side --------------------------------------------------------------------------------
// Workspace: P, then dP (overwritten by dS), then D: [B, H, N, N] + [B, H, N, N] + [B, H, N] fp32.
std::size_t matrix_bytes(const ladder::AttentionShape& s) {
  return std::size_t(s.batch) * s.heads * std::size_t(s.seqlen) * s.seqlen * sizeof(float);
}
std::size_t workspace_bytes(const ladder::AttentionShape& s) {
  return 2 * matrix_bytes(s) + std::size_t(s.rows()) * sizeof(float);
}

template <class Element>
void launch_element(const BackwardArgs& args, cudaStream_t stream) {
  const auto a = args.as<Element>();
  const auto& sh = args.shape;
  const int n = sh.seqlen, d = sh.head_dim, bh = sh.batch * sh.heads;
  const std::size_t nn = matrix_bytes(sh) / sizeof(float);
  float* p = static_cast<float*>(args.workspace);
  float* ds = p + nn;  // dP, then dS
  float* delta = ds + nn;

  row_dot_kernel<Element><<<unsigned(ceil_div(sh.rows(), std::int64_t(kRowDotWarps))),
                            dim3(kWarpSize, kRowDotWarps), 0, stream>>>(a.d_o, a.o, delta, sh.rows(), d);
  CUDA_CHECK_LAUNCH("row_dot_kernel");

  const dim3 pair_grid(ceil_div(n, kPairTile), ceil_div(n, kPairTile), bh);
  const dim3 pair_block(kPairTile, kPairTile);
  row_pairs_kernel<Element, true><<<pair_grid, pair_block, 0, stream>>>(
      a.q, a.k, args.lse, p, n, d, args.softmax_scale, sh.causal);
  CUDA_CHECK_LAUNCH("row_pairs_kernel (P)");
  row_pairs_kernel<Element, false><<<pair_grid, pair_block, 0, stream>>>(
      a.d_o, a.v, nullptr, ds, n, d, 1.f, sh.causal);
  CUDA_CHECK_LAUNCH("row_pairs_kernel (dP)");

  // Enough blocks to fill any GPU several times over; the grid-stride loop does the rest.
  const std::int64_t entries = std::int64_t(nn);
  const unsigned ds_blocks = unsigned(std::min<std::int64_t>(ceil_div(entries, std::int64_t(kElementwiseThreads)), 1 << 16));
  ds_kernel<<<ds_blocks, kElementwiseThreads, 0, stream>>>(p, ds, delta, entries, n);
  CUDA_CHECK_LAUNCH("ds_kernel");

  const dim3 out_grid(ceil_div(d, kOutCols), ceil_div(n, kOutRows), bh);
  const dim3 out_block(kOutCols, kOutRows);
  gradient_kernel<Element, true><<<out_grid, out_block, 0, stream>>>(p, a.d_o, a.dv, n, d, 1.f);
  CUDA_CHECK_LAUNCH("gradient_kernel (dV)");
  gradient_kernel<Element, false><<<out_grid, out_block, 0, stream>>>(ds, a.k, a.dq, n, d, args.softmax_scale);
  CUDA_CHECK_LAUNCH("gradient_kernel (dQ)");
  gradient_kernel<Element, true><<<out_grid, out_block, 0, stream>>>(ds, a.q, a.dk, n, d, args.softmax_scale);
  CUDA_CHECK_LAUNCH("gradient_kernel (dK)");
}

void launch_naive(const BackwardArgs& a, cudaStream_t stream) {
  if (a.shape.dtype == ladder::DType::BF16) launch_element<__nv_bfloat16>(a, stream);
  else launch_element<__half>(a, stream);
}

std::vector<ladder::KernelInfo> kernels() {
  std::vector<ladder::KernelInfo> out;
  auto add = [&]<class Element>(const char* type) {
    const std::size_t first = out.size();
    out.push_back(ladder::kernel(ladder::strprintf("row_dot_kernel%s", type), row_dot_kernel<Element>,
                                 kWarpSize * kRowDotWarps));
    out.push_back(ladder::kernel(ladder::strprintf("row_pairs_kernel<P%s>", type),
                                 row_pairs_kernel<Element, true>, kPairTile * kPairTile));
    out.push_back(ladder::kernel(ladder::strprintf("row_pairs_kernel<dP%s>", type),
                                 row_pairs_kernel<Element, false>, kPairTile * kPairTile));
    out.push_back(ladder::kernel(ladder::strprintf("gradient_kernel<dQ%s>", type),
                                 gradient_kernel<Element, false>, kOutCols * kOutRows));
    out.push_back(ladder::kernel(ladder::strprintf("gradient_kernel<dV, dK%s>", type),
                                 gradient_kernel<Element, true>, kOutCols * kOutRows));
    for (std::size_t i = first; i < out.size(); ++i) out[i].dtype = ladder::dtype_of<Element>();
  };
  add.template operator()<__half>("");
  add.template operator()<__nv_bfloat16>(",bf16");
  // ds_kernel has no element type: it is listed once per type so each problem's table has it.
  for (auto type : {ladder::DType::F16, ladder::DType::BF16}) {
    out.push_back(ladder::kernel("ds_kernel", ds_kernel, kElementwiseThreads));
    out.back().dtype = type;
  }
  return out;
}

// The traffic of the two N×N matrices alone, with Q, K, V, O, dO assumed to come from cache:
// P written (kernel 2); dP written (kernel 3); P and dP read and dS written (kernel 4); P read by
// dV and dS by dQ and by dK, each once per 64 output columns (kernels 5-7).
std::vector<std::string> ledger(const ladder::AttentionShape& s) {
  const double nn = double(matrix_bytes(s));
  const int column_blocks = ceil_div(s.head_dim, kOutCols);
  const double passes = 1 + 1 + 3 + 3.0 * column_blocks;
  const double minimum = ladder::backward_min_bytes(s);
  const double bytes = nn * passes + minimum;
  return {
      ladder::strprintf("N×N matrices P and dP/dS: %.1f MiB each per launch, moved %.0f times in all "
                        "(2 writes, then 3 in dS = P∘(dP − D), then %d reads by each of dV, dQ, dK)",
                        nn / (1 << 20), passes, column_blocks),
      ladder::strprintf("ledger: %.2f GB through global memory vs %.3f GB for Q, K, V, O, dO, LSE, "
                        "dQ, dK and dV alone",
                        bytes / 1e9, minimum / 1e9),
      ladder::strprintf("arithmetic intensity: %.1f FLOP/byte (five products, 2.5× the forward's "
                        "FLOPs; the H200 needs about 200 to be compute-bound on its tensor cores)",
                        ladder::backward_flops(s) / bytes),
  };
}

LADDER_REGISTER_STEP(
    ladder::backward_step(23, "naive_backward", "The naive backward: S, P, dP and dS in global memory")
        .with_notes(ledger)
        .add(ladder::backward_variant("naive", "seven kernels, N×N fp32 P and dP/dS in global memory",
                                      launch_naive)
                 .for_dtypes({ladder::DType::F16, ladder::DType::BF16})
                 .with_workspace(workspace_bytes)
                 .up_to_seqlen(kMaxSeqlen)
                 .batch_heads_on_grid_yz()  // pair_grid and out_grid: B·H on z
                 .with_kernels(kernels())));

}  // namespace
