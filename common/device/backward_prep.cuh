// The kernels around a backward's main kernel, shared by steps 24 and 25 (FlashAttention-3 keeps
// them in files of their own too, flash_bwd_preprocess_kernel.h and flash_bwd_postprocess_kernel.h):
//
//   preprocess  D_i = rowsum(dO_i ∘ O_i) and lse_i·log2(e) for every query row, into row buffers
//               padded to whole blocks of kRowPad rows (D = 0 and lse = +inf past N, so that a
//               padded row's P is exp2(−inf) = 0 and the main kernel reads a block's statistics
//               with no bounds check); it also zeroes the fp32 dQ accumulator that the main
//               kernel adds into and, when the main kernel orders those adds, its semaphores;
//   convert     dQ = scale · accumulator, in the element type.
//
// D comes from O as the forward stored it (rounded to the element type), as FlashAttention-2
// does; the harness's reference uses the same definition. Two things differ between the steps
// and are template parameters: how a row of D is split among lanes (RowDot: the order of the
// additions, and so the last bits of D and of every gradient, is each step's own), and the
// accumulator's layout (DqRowMajor for step 24's atomics, DqFragments for step 25's bulk
// reduce-adds).
#pragma once

#include <cuda/atomic>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "common/check.hpp"
#include "common/device/mma_element.cuh"
#include "common/dispatch.hpp"
#include "common/math.hpp"
#include "common/registry.hpp"
#include "common/strings.hpp"

namespace ladder::bwd {

// Rows of the padded per-row buffers: a multiple of every main kernel's query block, so a block's
// statistics are whole (and, for step 25's bulk copies, one 16-byte-aligned piece).
constexpr int kRowPad = 128;
constexpr int padded_rows(int n) { return (n + kRowPad - 1) / kRowPad * kRowPad; }
constexpr int kPrepThreads = 256;  // per block, preprocess and convert
constexpr unsigned kFullMask = 0xffffffffu;

// ---- D_i: a row split among kLanes consecutive lanes --------------------------------------------
// Each lane reads D / kLanes contiguous elements of O and of dO (one load each) and sums their
// products in one fma chain; a butterfly of shuffles inside the aligned group of lanes then adds
// the lanes' sums, the farthest lanes first or (kNeighboursFirst) the nearest first. fp32
// addition is not associative, so the split is part of D's bits.
template <int kLanes_, bool kNeighboursFirst_>
struct RowDot {
  static constexpr int kLanes = kLanes_;
  static constexpr bool kNeighboursFirst = kNeighboursFirst_;
  static_assert(kLanes >= 1 && kLanes <= 32 && (kLanes & (kLanes - 1)) == 0);
  // The group's lanes' x added up, in every lane of the group (all 32 lanes of the warp call it).
  __device__ __forceinline__ static float sum_lanes(float x) {
    if constexpr (kNeighboursFirst) {
#pragma unroll
      for (int lanes = 1; lanes < kLanes; lanes *= 2) x += __shfl_xor_sync(kFullMask, x, lanes);
    } else {
#pragma unroll
      for (int lanes = kLanes / 2; lanes > 0; lanes /= 2) x += __shfl_xor_sync(kFullMask, x, lanes);
    }
    return x;
  }
};

// ---- The dQ accumulator's layouts (fp32, one block of rows_per_head(N) · D floats per head) -----
// DqRowMajor: [B·H][N][D], the layout of dQ itself; the atomics add into it element by element.
struct DqRowMajor {
  static constexpr int kConvertElems = 8;  // per convert thread: two 16-byte reads, one write
  static int rows_per_head(int n) { return n; }
  template <int kHeadDim>
  __device__ __forceinline__ static void load(const float* acc, std::int64_t row, int col, int,
                                              float (&v)[kConvertElems]) {
    const float* p = acc + row * kHeadDim + col;
    const float4 lo = *reinterpret_cast<const float4*>(p);
    const float4 hi = *reinterpret_cast<const float4*>(p + 4);
    v[0] = lo.x, v[1] = lo.y, v[2] = lo.z, v[3] = lo.w, v[4] = hi.x, v[5] = hi.y, v[6] = hi.z, v[7] = hi.w;
  }
};

// DqFragments: [B·H][n_pad/64 row tiles][D/64 column chunks][4 warps][8 n8 tiles j][32 lanes][4].
// A warp's 16 rows of a 64 × 64 product are 4 KB contiguous, laid out exactly as its wgmma
// accumulator fragments (lane 4g + t holds rows g, g + 8 at columns 8j + 2t, +1), so a consumer
// writes them to shared memory with conflict-free 16-byte stores and adds them to global memory
// with one bulk reduce-add. Padded to n_pad rows a head, so every 64-row tile is whole.
struct DqFragments {
  static constexpr int kConvertElems = 4;  // per convert thread: two 8-byte reads, one write
  static int rows_per_head(int n) { return padded_rows(n); }
  // The float offset, within a head, of (row, col), col even (col + 1 follows it).
  template <int kHeadDim>
  __host__ __device__ __forceinline__ static std::int64_t offset(int row, int col) {
    constexpr int kChunk = 64;
    const int r = row % 64, c = col % kChunk;
    const int warp = r / 16, g = r % 8, h = (r % 16) / 8;
    const int j = c / 8, t = (c % 8) / 2;
    const std::int64_t tile = std::int64_t(row / 64) * (kHeadDim / kChunk) + col / kChunk;
    return tile * (64 * kChunk) + warp * (16 * kChunk) + (j * 32 + 4 * g + t) * 4 + 2 * h + (c % 2);
  }
  template <int kHeadDim>
  __device__ __forceinline__ static void load(const float* acc, std::int64_t row, int col, int n,
                                              float (&v)[kConvertElems]) {
    const std::int64_t bh = row / n, i = row % n;  // row is over B·H·N
    const float* head = acc + bh * padded_rows(n) * kHeadDim;
    const float2 lo = *reinterpret_cast<const float2*>(head + offset<kHeadDim>(int(i), col));
    const float2 hi = *reinterpret_cast<const float2*>(head + offset<kHeadDim>(int(i), col + 2));
    v[0] = lo.x, v[1] = lo.y, v[2] = hi.x, v[3] = hi.y;
  }
};

// ---- The workspace -------------------------------------------------------------------------------
// The dQ accumulator, lse·log2(e) and D per padded row ([B·H][n_pad] each), and `sems_per_head`
// ints per head (0: none), each at a 256-byte-aligned offset.
struct Workspace {
  float* dq_accum;
  float* lse_log2;
  float* delta;
  int* dq_sem;  // null without semaphores
};
struct WorkspaceLayout {
  std::size_t dq_accum = 0, lse_log2 = 0, delta = 0, sem = 0, total = 0;  // byte offsets
};
template <class DqLayout>
WorkspaceLayout workspace_layout(const AttentionShape& s, int sems_per_head = 0) {
  constexpr std::size_t kAlign = 256;
  const auto aligned = [](std::size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; };
  const std::size_t bh = std::size_t(s.batch) * s.heads;
  const std::size_t rows = padded_rows(s.seqlen);
  WorkspaceLayout l;
  l.lse_log2 = l.dq_accum + aligned(bh * DqLayout::rows_per_head(s.seqlen) * s.head_dim * sizeof(float));
  l.delta = l.lse_log2 + aligned(bh * rows * sizeof(float));
  l.sem = l.delta + aligned(bh * rows * sizeof(float));
  l.total = l.sem + aligned(bh * std::size_t(sems_per_head) * sizeof(int));
  return l;
}
template <class DqLayout>
Workspace carve(const BackwardArgs& a, int sems_per_head = 0) {
  if (a.workspace == nullptr)
    throw std::logic_error("a backward launched without its workspace (with_workspace)");
  const WorkspaceLayout l = workspace_layout<DqLayout>(a.shape, sems_per_head);
  auto* base = static_cast<unsigned char*>(a.workspace);
  return {reinterpret_cast<float*>(base + l.dq_accum), reinterpret_cast<float*>(base + l.lse_log2),
          reinterpret_cast<float*>(base + l.delta),
          sems_per_head > 0 ? reinterpret_cast<int*>(base + l.sem) : nullptr};
}

// kBytes of consecutive memory as one load or store (4, 8 or 16 bytes, aligned to their size).
template <int kBytes>
using Chunk = std::conditional_t<kBytes == 16, uint4, std::conditional_t<kBytes == 8, uint2, unsigned>>;

// One lane's share of D_i = Σ_d dO_id O_id: kPerLane consecutive elements of O and of dO from
// element `at` (one load each), multiplied and added in one fma chain.
template <int kPerLane, class Element>
__device__ __forceinline__ float lane_row_dot(const Element* __restrict__ o, const Element* __restrict__ d_o,
                                              std::int64_t at) {
  using Loaded = Chunk<kPerLane * int(sizeof(Element))>;
  static_assert(sizeof(Loaded) == kPerLane * sizeof(Element));
  const Loaded o_chunk = *reinterpret_cast<const Loaded*>(o + at);
  const Loaded do_chunk = *reinterpret_cast<const Loaded*>(d_o + at);
  const Element* oe = reinterpret_cast<const Element*>(&o_chunk);
  const Element* de = reinterpret_cast<const Element*>(&do_chunk);
  float sum = 0.f;
#pragma unroll
  for (int e = 0; e < kPerLane; ++e) sum = fmaf(ptx::element_to_float(oe[e]), ptx::element_to_float(de[e]), sum);
  return sum;
}

// One lane's kPerLane floats of a dQ accumulator row set to 0 (16- or 8-byte stores).
template <int kPerLane>
__device__ __forceinline__ void zero_lane_row(float* acc) {
#pragma unroll
  for (int e = 0; e < kPerLane; e += 4) {
    if constexpr (kPerLane % 4 == 0) *reinterpret_cast<float4*>(acc + e) = make_float4(0.f, 0.f, 0.f, 0.f);
    else *reinterpret_cast<float2*>(acc + e) = make_float2(0.f, 0.f);
  }
}

// ---- The preprocess kernel ----------------------------------------------------------------------
// A 1-D grid over the padded rows of every head: a block's rows are kPrepThreads / kLanes
// consecutive rows of one head (it divides kRowPad), so the head is one division per block.
template <class Dot, class DqLayout, class Element, int kHeadDim>
__global__ void __launch_bounds__(kPrepThreads)
    backward_preprocess_kernel(const Element* __restrict__ o, const Element* __restrict__ d_o,
                               const float* __restrict__ lse, Workspace ws, int n, int accum_rows,
                               int sems_per_head) {
  constexpr int kLanes = Dot::kLanes;
  constexpr int kPerLane = kHeadDim / kLanes;
  constexpr int kRows = kPrepThreads / kLanes;  // per block
  static_assert(kHeadDim % kLanes == 0 && kRowPad % kRows == 0);
  const int n_pad = padded_rows(n);
  const unsigned blocks_per_head = unsigned(n_pad / kRows);
  const std::int64_t bh = blockIdx.x / blocks_per_head;
  const int i = int(blockIdx.x % blocks_per_head) * kRows + int(threadIdx.x) / kLanes;  // < n_pad
  const int lane = int(threadIdx.x) % kLanes;

  float sum = i < n ? lane_row_dot<kPerLane>(o, d_o, (bh * n + i) * kHeadDim + lane * kPerLane) : 0.f;
  if (i < accum_rows)  // every row the main kernel adds into starts at 0
    zero_lane_row<kPerLane>(ws.dq_accum + (bh * accum_rows + i) * kHeadDim + lane * kPerLane);
  sum = Dot::sum_lanes(sum);  // every lane of the warp is here, rows past N included
  if (lane == 0) {
    const std::int64_t r = bh * n_pad + i;
    ws.delta[r] = sum;  // 0 past N
    ws.lse_log2[r] = i < n ? lse[bh * n + i] * kLog2e : INFINITY;
    if (i < sems_per_head) ws.dq_sem[bh * sems_per_head + i] = 0;  // sems_per_head <= n_pad
  }
}

// ---- An ordered dQ: one semaphore per (head, query block), zeroed by the preprocess --------------
// Key block kb may add its share into a query block's dQ rows once the block's semaphore holds
// kb, and then passes the turn on (kb + 1). Thread 0 waits with an acquire load and a barrier
// after it releases the CTA; thread 0 passes the turn with a release store (a fence.acq_rel.gpu
// and a store) after a barrier that every thread reaches after its atomics: the pattern of
// CUTLASS's semaphores.
__device__ __forceinline__ void wait_turn(int* sem, int turn) {
  cuda::atomic_ref<int, cuda::thread_scope_device> s(*sem);
  while (s.load(cuda::memory_order_acquire) != turn) {
  }
}
__device__ __forceinline__ void pass_turn(int* sem, int next) {
  cuda::atomic_ref<int, cuda::thread_scope_device> s(*sem);
  s.store(next, cuda::memory_order_release);
}

// ---- The convert kernel: dQ = scale · accumulator, in the element type ------------------------
// A grid-stride loop over pieces of kConvertElems consecutive columns of a row (over B·H·N).
template <class DqLayout, class Element, int kHeadDim>
__global__ void __launch_bounds__(kPrepThreads)
    backward_convert_dq_kernel(const float* __restrict__ dq_accum, Element* __restrict__ dq, int n,
                               std::int64_t pieces, float scale) {
  constexpr int kElems = DqLayout::kConvertElems;
  constexpr int kPieces = kHeadDim / kElems;  // per row
  static_assert(kElems == 8 || kElems == 4);
  for (std::int64_t idx = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < pieces;
       idx += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int64_t row = idx / kPieces;
    const int col = int(idx % kPieces) * kElems;
    float v[kElems];
    DqLayout::template load<kHeadDim>(dq_accum, row, col, n, v);
    const auto pair = [&](int p) { return ptx::pack2_as<Element>(v[2 * p] * scale, v[2 * p + 1] * scale); };
    Element* dst = dq + row * kHeadDim + col;
    if constexpr (kElems == 8) *reinterpret_cast<uint4*>(dst) = make_uint4(pair(0), pair(1), pair(2), pair(3));
    else *reinterpret_cast<uint2*>(dst) = make_uint2(pair(0), pair(1));
  }
}

// ---- Host side: the two launches and their rows of the kernel table ------------------------------
template <class Dot, class DqLayout, class Element, int kHeadDim>
void launch_preprocess(const BackwardArgs& a, const Workspace& ws, cudaStream_t stream,
                       int sems_per_head = 0) {
  const auto x = a.as<Element>();
  const int n = a.shape.seqlen;
  const std::int64_t blocks = std::int64_t(a.shape.batch) * a.shape.heads * padded_rows(n) /
                              (kPrepThreads / Dot::kLanes);
  if (blocks > INT_MAX) throw std::invalid_argument("backward preprocess: B·H·N too large for one grid");
  backward_preprocess_kernel<Dot, DqLayout, Element, kHeadDim><<<unsigned(blocks), kPrepThreads, 0, stream>>>(
      x.o, x.d_o, a.lse, ws, n, DqLayout::rows_per_head(n), sems_per_head);
  CUDA_CHECK_LAUNCH("backward_preprocess_kernel");
}

// At most 16 blocks per SM; the grid-stride loop does the rest.
template <class DqLayout, class Element, int kHeadDim>
void launch_convert(const BackwardArgs& a, const Workspace& ws, cudaStream_t stream) {
  const std::int64_t pieces = std::int64_t(a.shape.batch) * a.shape.heads * a.shape.seqlen *
                              (kHeadDim / DqLayout::kConvertElems);
  const int blocks = int(std::min<std::int64_t>((pieces + kPrepThreads - 1) / kPrepThreads,
                                                std::int64_t(a.sm_count > 0 ? a.sm_count : 132) * 16));
  backward_convert_dq_kernel<DqLayout, Element, kHeadDim><<<blocks, kPrepThreads, 0, stream>>>(
      ws.dq_accum, a.as<Element>().dq, a.shape.seqlen, pieces, a.softmax_scale);
  CUDA_CHECK_LAUNCH("backward_convert_dq_kernel");
}

// Opts a main kernel in to T::kSmemBytes of shared memory (all of them need more than the default
// 48 KB) and launches grid CTAs of T::kThreads with `params`, checked under `name`.
template <class T, class... KernelParams, class... Params>
void launch_main(void (*kernel)(KernelParams...), const char* name, dim3 grid, cudaStream_t stream,
                 const Params&... params) {
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(T::kSmemBytes)));
  kernel<<<grid, T::kThreads, T::kSmemBytes, stream>>>(params...);
  CUDA_CHECK_LAUNCH_OF(name);
}

// A backward's three launches: the preprocess, main(ws) (the step's own kernel), the convert.
template <class Dot, class DqLayout, class Element, int kHeadDim, class Main>
void run(const BackwardArgs& a, cudaStream_t stream, int sems_per_head, Main&& main) {
  const Workspace ws = carve<DqLayout>(a, sems_per_head);
  launch_preprocess<Dot, DqLayout, Element, kHeadDim>(a, ws, stream, sems_per_head);
  main(ws);
  launch_convert<DqLayout, Element, kHeadDim>(a, ws, stream);
}

// A backward's launch for the problem at hand: body.template operator()<Element, kHeadDim,
// kCausal>() for its element type, head dimension (64 or 128) and mask.
template <class F>
void dispatch(const BackwardArgs& a, F&& body) {
  dispatch_head_dim<64, 128>(a.shape.head_dim, [&]<int kHeadDim>() {
    auto by_mask = [&]<class Element>() {
      if (a.shape.causal) body.template operator()<Element, kHeadDim, true>();
      else body.template operator()<Element, kHeadDim, false>();
    };
    if (a.shape.dtype == DType::BF16) by_mask.template operator()<__nv_bfloat16>();
    else by_mask.template operator()<__half>();
  });
}

// The kernel table at D = head_dim (64 or 128): rows.template operator()<Element, kHeadDim>(out,
// type) for fp16 (type "") and bf16 (",bf16"), as the rows' names say. (A step's `rows` is a
// lambda with a capture-default, [=], though it captures nothing: a captureless one would declare
// a conversion to a function pointer whose template parameters nvcc warns are never deduced.)
template <class F>
std::vector<KernelInfo> kernel_table(int head_dim, const F& rows) {
  std::vector<KernelInfo> out;
  dispatch_head_dim<64, 128>(head_dim, [&]<int kHeadDim>() {
    rows.template operator()<__half, kHeadDim>(out, "");
    rows.template operator()<__nv_bfloat16, kHeadDim>(out, ",bf16");
  });
  return out;
}

// What the backwards' variants share: D = 64 and 128, fp16 and bf16, DqLayout's workspace with
// sems_per_head(N) semaphores a head (none: a function returning 0), and kernel_table(rows).
template <class DqLayout, class Rows>
Variant variant(std::string name, std::string description, BackwardLaunch launch, int (*sems_per_head)(int),
                Rows rows) {
  return backward_variant(std::move(name), std::move(description), std::move(launch))
      .for_head_dims({64, 128})
      .for_dtypes({DType::F16, DType::BF16})
      .with_workspace([sems_per_head](const AttentionShape& s) {
        return workspace_layout<DqLayout>(s, sems_per_head(s.seqlen)).total;
      })
      .with_kernels([rows](int head_dim) { return kernel_table(head_dim, rows); });
}

// A backward's rows of the kernel table for tile T's element type and head dimension: the
// preprocess, the main kernel (one instantiation per mask; T::kThreads, T::kSmemBytes) and the
// convert. `type`: "" or ",bf16", as the rows' names say.
template <class Dot, class DqLayout, class T, class Main>
void add_kernel_rows(std::vector<KernelInfo>& out, const char* type, const std::string& main_name,
                     Main non_causal, Main causal) {
  using Element = typename T::Element;
  constexpr int kHeadDim = T::kHeadDim;
  const std::size_t first = out.size();
  out.push_back(kernel(strprintf("backward_preprocess_kernel<D=%d%s>", kHeadDim, type),
                       backward_preprocess_kernel<Dot, DqLayout, Element, kHeadDim>, kPrepThreads));
  out.push_back(kernel(main_name, non_causal, T::kThreads, T::kSmemBytes).when_causal(false));
  out.push_back(kernel(main_name + " causal", causal, T::kThreads, T::kSmemBytes).when_causal(true));
  out.push_back(kernel(strprintf("backward_convert_dq_kernel<D=%d%s>", kHeadDim, type),
                       backward_convert_dq_kernel<DqLayout, Element, kHeadDim>, kPrepThreads));
  for (std::size_t i = first; i < out.size(); ++i) out[i].dtype = dtype_of<Element>();
}

}  // namespace ladder::bwd
