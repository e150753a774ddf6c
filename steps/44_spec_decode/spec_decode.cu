// Step 44 — speculative decoding: every packed row of a K/V head against one read of its keys.
//
// Step 42's CTA is 4 warps over one m16 tile of packed query rows (group · Nq rows of a K/V head),
// each warp on different 16-key tiles of the split. At 1-16 query tokens a K/V head has up to
// group · 16 packed rows (80 at group 5): step 42 runs a CTA per 16 of them, each reading every key
// of the split, and the split rule, counting those CTAs, cuts the splits. This step turns the CTA
// around, as a prefill kernel is (steps 04-06):
//
//   Rows across the warps, keys shared. Warp w owns row tile w (its Q fragments in registers) and
//     runs S = Q Kᵀ, the online softmax and O += P V for its 16 rows over every key tile of the
//     split; the 64-key tiles pass through one ring filled by all the CTA's threads with cp.async,
//     one __syncthreads a tile. A K/V byte is read once per CTA, not once per 16 rows.
//   The CTA follows the rows: 2 warps (32 rows) where a head has at most 32 packed rows, else 4;
//     past 64 rows, row blocks as even as whole tiles allow (80: 48 + 32, not the plan's 64 + 16:
//     one key range's CTAs then end together). A warp past the real rows skips the MMAs, never the
//     loads or barriers. No 8-warp CTA: at ~230 registers it would be alone on its SM.
//   No merge inside the CTA: each warp saw every key of the split for its rows and stores them
//     (store_warp_rows). The splits meet as in step 42 (a counter per batch, K/V head and row
//     block, the fences, the last CTA's combine_rows_in_cta); counting fewer CTAs, the split rule
//     plans more splits.
//
// At 16 rows or fewer one warp walks every key here where step 42 has four: those shapes are
// step 42's, a choice by row count that is the caller's, not one step calling another.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/check.hpp"
#include "common/device/mma_element.cuh"
#include "common/device/mma_fragments.cuh"
#include "common/device/ptx.cuh"
#include "common/device/split_kv.cuh"
#include "common/device/swizzle.cuh"
#include "common/dispatch.hpp"
#include "common/math.hpp"
#include "common/registry.hpp"
#include "common/split_kv.hpp"
#include "common/strings.hpp"

namespace {

using ladder::AttentionArgs;
using ladder::ceil_div;
namespace ptx = ladder::ptx;
namespace frag = ladder::frag;
namespace skv = ladder::split_kv;

constexpr int kWarpSize = 32;
constexpr int kMaxQueries = 16;  // query tokens per sequence this kernel takes (decode)
constexpr int kTileRows = 16;    // packed query rows per warp: one m16 tile
constexpr int kSmallRowTiles = 2, kLargeRowTiles = 4;  // the two instances: 32 and 64 rows a CTA

template <int kHeadDim_, class Element_, int kRowTiles>
struct Tile {
  using Element = Element_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kThreads = kRowTiles * kWarpSize;  // one row tile a warp
  static constexpr int kRows = kRowTiles * kTileRows;     // packed query rows per CTA, at most
  // Keys per ring stage: four k16 steps of P V per barrier. A stage of K and V is 32 KB at D = 128
  // (16 KB at D = 64); two stages ahead are 64 KB in flight a CTA at both D, step 42's four warps'
  // worth, and the ring (96 or 80 KB) holds the last CTA's weights of 64 rows × 256 splits.
  static constexpr int kKeys = 64;
  static constexpr int kStages = kHeadDim == 128 ? 3 : 5;
  static constexpr int kCtasPerSm = 2;  // what the smem below allows; the split rule plans with it
  static constexpr int kMinTilesPerSplit = kStages;  // a split fills the ring
  static constexpr int kDSteps = kHeadDim / 16;  // k16 steps of S = Q Kᵀ
  static constexpr int kKeySteps = kKeys / 16, kSTiles = kKeys / 8;  // k16 steps of P V, n8 tiles of S
  static constexpr int kOTiles = kHeadDim / 8;   // n8 tiles of O
  static constexpr int kChunks = kHeadDim / 8;   // 16-byte chunks per row
  static constexpr int kTileElems = kKeys * kHeadDim, kStageElems = 2 * kTileElems;  // K, then V
  static constexpr std::size_t kSmemBytes = sizeof(Element) * std::size_t(kStages) * kStageElems;
  static_assert(kThreads % kChunks == 0 && kKeys % (kThreads / kChunks) == 0, "whole rows per pass");
  static_assert(kRows <= 2 * kKeys, "Q is staged in the ring's last stage");
  static_assert(kRows <= kThreads, "combine_rows_in_cta writes a row's LSE from thread `row`");
  static_assert(skv::cta_merge_smem_bytes(kRows, skv::kMaxSplits) <= kSmemBytes, "the merge reuses the ring");
};

template <class E>
struct Params {
  const E *q, *k, *v;
  E* o;
  float* lse;                       // may be null
  float *o_partial, *lse2_partial;  // splits > 1: common/device/split_kv.cuh's layout
  int* counters;  // splits > 1: one per (batch, K/V head, row block), 0 between launches
  int heads, hkv, group, nq, nk;
  int row_blocks, block_rows, splits, tiles_per_split;  // block_rows: a multiple of 16
  bool causal;
  float scale_log2;  // softmax scale · log2 e
};

// The CTA's kKeys-key tile of K and of V, rows past the cache zero-filled (src_bytes = 0 reads
// nothing; the source then is the tile's first row, which exists). Thread i copies chunk
// i % kChunks of rows i / kChunks + r · (kThreads / kChunks).
template <class T>
__device__ __forceinline__ void load_kv_tile(typename T::Element* s_k, typename T::Element* s_v,
                                             const typename T::Element* k, const typename T::Element* v,
                                             int rows_left, int tid) {
  constexpr int kRowsPerPass = T::kThreads / T::kChunks;
  const int chunk = tid % T::kChunks;
#pragma unroll
  for (int pass = 0; pass < T::kKeys / kRowsPerPass; ++pass) {
    const int row = tid / T::kChunks + pass * kRowsPerPass;
    const bool valid = row < rows_left;
    const std::int64_t src = (valid ? row * T::kHeadDim : 0) + chunk * 8;
    const int dst = ladder::swizzle::xor_offset<T::kHeadDim>(row, chunk * 8);
    ptx::cp_async_16(s_k + dst, k + src, valid ? 16 : 0);
    ptx::cp_async_16(s_v + dst, v + src, valid ? 16 : 0);
  }
}

template <class T>
__global__ void __launch_bounds__(T::kThreads, T::kCtasPerSm)
    spec_decode_kernel(const Params<typename T::Element> p) {
  using E = typename T::Element;
  constexpr int kD = T::kHeadDim;
  extern __shared__ __align__(128) unsigned char smem[];
  E* const s_ring = reinterpret_cast<E*>(smem);  // [stage][K, V][kKeys][D], swizzled rows
  // Q is staged in the last stage, which the prologue does not fill: [kRows][D], swizzled.
  E* const s_q = s_ring + (T::kStages - 1) * T::kStageElems;

  const int tid = threadIdx.x, warp = tid / kWarpSize, lane = tid % kWarpSize;
  const int g = frag::group_of(lane), t = frag::thread_in_group(lane);

  // blockIdx.x = ((b·Hkv + hk)·splits + split)·row_blocks + row block: the row blocks of one key
  // range are neighbours, so their K/V tiles are read from HBM once and from L2 after.
  const int rb = blockIdx.x % p.row_blocks, cta = blockIdx.x / p.row_blocks;
  const int split = cta % p.splits, bk = cta / p.splits;
  const int b = bk / p.hkv, hk = bk % p.hkv;
  const int row0 = rb * p.block_rows;  // first packed row hg·Nq + i of this CTA
  const int rows = min(p.block_rows, p.group * p.nq - row0);
  const std::int64_t out_row0 = (std::int64_t(b) * p.heads + hk * p.group) * p.nq + row0;
  const int tile_row0 = warp * kTileRows;  // the warp's rows in the CTA's: tile_row0 + 0..15
  const bool active = tile_row0 < rows;      // warp-uniform: this warp's tile has a real row

  // Causal (aligned to the end): query i sees keys <= Nk − Nq + i, so this CTA needs keys up to
  // the largest i among its rows, and tiles past that are never loaded.
  const int first_i = row0 % p.nq, last_i = (row0 + rows - 1) % p.nq;
  const int max_i = (rows >= p.nq || last_i < first_i) ? p.nq - 1 : last_i;
  const int kv_end = p.causal ? p.nk - p.nq + max_i + 1 : p.nk;
  const int tile_begin = split * p.tiles_per_split;
  const int n_tiles = max(0, min(tile_begin + p.tiles_per_split, ceil_div(kv_end, T::kKeys)) - tile_begin);

  auto issue = [&](int u) {  // the CTA's tile u into ring slot u % kStages; always one group
    if (u < n_tiles) {
      const int key0 = (tile_begin + u) * T::kKeys;
      const std::int64_t off = (std::int64_t(bk) * p.nk + key0) * kD;  // K, V: [B, Hkv, Nk, D]
      E* slot = s_ring + (u % T::kStages) * T::kStageElems;
      load_kv_tile<T>(slot, slot + T::kTileElems, p.k + off, p.v + off, p.nk - key0, tid);
    }
    ptx::cp_async_commit();
  };
  for (int u = 0; u < T::kStages - 1; ++u) issue(u);

  // Q: the CTA's rows are consecutive rows of Q; rows past the block's are zeros (their scores are
  // 0, finite, and never stored).
  for (int c = tid; c < T::kRows * T::kChunks; c += T::kThreads) {
    const int r = c / T::kChunks, ch = c % T::kChunks;
    uint4 x = make_uint4(0, 0, 0, 0);
    if (r < rows) x = *reinterpret_cast<const uint4*>(p.q + (out_row0 + r) * kD + ch * 8);
    *reinterpret_cast<uint4*>(s_q + ladder::swizzle::xor_offset<kD>(r, ch * 8)) = x;
  }
  __syncthreads();
  std::uint32_t q_frag[T::kDSteps][4];
#pragma unroll
  for (int kk = 0; kk < T::kDSteps; ++kk)
    ptx::ldmatrix_x4(q_frag[kk], s_q + ladder::swizzle::xor_offset<kD>(tile_row0 + frag::ldsm_a_row(lane),
                                                                       kk * 16 + frag::ldsm_a_col(lane)));

  // This lane's rows g and g + 8 of the warp's tile: the last key each may see.
  int limit[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = tile_row0 + g + 8 * h;
    limit[h] = (p.causal && r < rows) ? p.nk - p.nq + (row0 + r) % p.nq : p.nk - 1;
  }
  const int mask_from = p.causal ? p.nk - p.nq : p.nk - 1;  // no row's limit is below this

  float acc_o[T::kOTiles][4] = {};
  float row_max[2] = {-INFINITY, -INFINITY};  // in log2 units: max of s · scale · log2 e
  float row_sum[2] = {0.f, 0.f};              // this lane's share; the quad's sum at the end

  for (int u = 0; u < n_tiles; ++u) {
    ptx::cp_async_wait<T::kStages - 2>();  // tile u's group is complete (this thread's copies)
    // ... and every thread's. The barrier also ends every warp's reads of tile u − 1 (and, at
    // u = 0, of Q): the slot issue() refills next, (u + kStages − 1) % kStages, is tile u − 1's
    // (at u = 0 Q's), and no warp reads a slot after the barrier that follows its tile.
    __syncthreads();
    issue(u + T::kStages - 1);
    if (!active) continue;  // the loads and the barrier above are the whole CTA's
    const E* s_k = s_ring + (u % T::kStages) * T::kStageElems;
    const E* s_v = s_k + T::kTileElems;
    const int key0 = (tile_begin + u) * T::kKeys;

    // S = Q Kᵀ: 16 rows × kKeys keys, two n8 tiles per ldmatrix.x4 of K.
    float s[T::kSTiles][4] = {};
#pragma unroll
    for (int kk = 0; kk < T::kDSteps; ++kk)
#pragma unroll
      for (int j = 0; j < T::kKeySteps; ++j) {
        std::uint32_t kb[4];
        ptx::ldmatrix_x4(kb, s_k + ladder::swizzle::xor_offset<kD>(j * 16 + frag::ldsm_b_row(lane),
                                                                   kk * 16 + frag::ldsm_b_col(lane)));
        const std::uint32_t lo[2] = {kb[0], kb[1]}, hi[2] = {kb[2], kb[3]};
        ptx::mma_m16n8k16<E>(s[2 * j], q_frag[kk], lo);
        ptx::mma_m16n8k16<E>(s[2 * j + 1], q_frag[kk], hi);
      }
    // Element (ni, c) is row g + 8·(c / 2), key key0 + 8·ni + 2t + c % 2.
    const bool masked = key0 + T::kKeys - 1 > mask_from;  // CTA-uniform: the cache's end, causal
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int visible = limit[h] - key0 - 2 * t;  // offsets 8·ni + e <= visible are seen
      float m = row_max[h];
#pragma unroll
      for (int ni = 0; ni < T::kSTiles; ++ni)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float& x = s[ni][2 * h + e];
          x = (masked && 8 * ni + e > visible) ? -INFINITY : x * p.scale_log2;
          m = fmaxf(m, x);
        }
      m = frag::quad_max(m);
      // A row with no visible key yet has max −inf: subtract 0 instead (every p is then 0).
      const float m_use = m == -INFINITY ? 0.f : m;
      const float rescale = ptx::exp2_approx(row_max[h] - m_use);
      row_max[h] = m;
      row_sum[h] *= rescale;
#pragma unroll
      for (int nd = 0; nd < T::kOTiles; ++nd) acc_o[nd][2 * h] *= rescale, acc_o[nd][2 * h + 1] *= rescale;
#pragma unroll
      for (int ni = 0; ni < T::kSTiles; ++ni)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float& x = s[ni][2 * h + e];
          x = ptx::exp2_approx(x - m_use);
          row_sum[h] += x;
        }
    }
    // O += P V, one k16 step of keys at a time: S's n8 tiles 2j and 2j + 1 are P's A fragment
    // (step 05's repack); V's B fragments by ldmatrix.trans, two n8 tiles of D each.
#pragma unroll
    for (int j = 0; j < T::kKeySteps; ++j) {
      const std::uint32_t a[4] = {ptx::pack2_as<E>(s[2 * j][0], s[2 * j][1]),
                                  ptx::pack2_as<E>(s[2 * j][2], s[2 * j][3]),
                                  ptx::pack2_as<E>(s[2 * j + 1][0], s[2 * j + 1][1]),
                                  ptx::pack2_as<E>(s[2 * j + 1][2], s[2 * j + 1][3])};
#pragma unroll
      for (int dp = 0; dp < T::kOTiles / 2; ++dp) {
        std::uint32_t vb[4];
        ptx::ldmatrix_x4_trans(vb, s_v + ladder::swizzle::xor_offset<kD>(j * 16 + frag::ldsm_a_row(lane),
                                                                        dp * 16 + frag::ldsm_a_col(lane)));
        const std::uint32_t lo[2] = {vb[0], vb[1]}, hi[2] = {vb[2], vb[3]};
        ptx::mma_m16n8k16<E>(acc_o[2 * dp], a, lo);
        ptx::mma_m16n8k16<E>(acc_o[2 * dp + 1], a, hi);
      }
    }
  }
  ptx::cp_async_wait<0>();  // only empty groups can be left; the ring is reused by the merge

  // ---- Each warp's rows, from its registers (an idle warp's tile has none) ----
  const skv::RowsOut<E> mine{out_row0 + tile_row0, rows - tile_row0, p.splits, split,
                             p.o, p.lse, p.o_partial, p.lse2_partial};
  skv::store_warp_rows<kD>(acc_o, row_max, row_sum, mine);
  if (p.splits == 1) return;  // the CTA wrote O and the LSE itself

  // ---- The last split of these rows merges them all ----
  __shared__ int last;  // is this CTA the last of its rows' splits to finish?
  int* const counter = p.counters + bk * p.row_blocks + rb;
  __threadfence();  // this thread's partial stores reach L2 before its CTA is counted
  __syncthreads();  // ... every thread's (an idle warp's too: it stored nothing, it still counts)
  if (tid == 0) {
    last = atomicAdd(counter, 1) == p.splits - 1;
    if (last) *counter = 0;  // every split has counted: reset for the next launch
  }
  __syncthreads();
  if (!last) return;
  __threadfence();  // the other splits' partials, published before their adds, are seen after ours
  // The ring's shared memory is free: every thread waited for its copies and passed the barriers
  // above after its last read of a slot.
  skv::combine_rows_in_cta<T::kThreads, kD>(reinterpret_cast<float*>(smem), p.o_partial, p.lse2_partial,
                                             p.o, p.lse, out_row0, rows, p.splits);
}

// ---- Host side --------------------------------------------------------------------------------
// A K/V head's packed rows (group · Nq) in row blocks of at most T::kRows.
template <class T>
int row_blocks(const ladder::AttentionShape& sh) { return ceil_div(sh.group() * sh.seqlen, T::kRows); }
template <class T>
std::int64_t ctas_per_split(const ladder::AttentionShape& sh) {
  return std::int64_t(sh.batch) * sh.hkv() * row_blocks<T>(sh);
}
template <class T>
int max_splits(const ladder::AttentionShape& sh) {
  return skv::max_splits_for(ceil_div(sh.kv_len(0), T::kKeys), T::kMinTilesPerSplit);
}

// The instance a shape gets: the fewest warps that cover its packed rows, up to 64 (4 warps).
template <int kHeadDim, class E, class F>
void with_tile(const ladder::AttentionShape& sh, F&& body) {
  const bool small = sh.group() * sh.seqlen <= kSmallRowTiles * kTileRows;
  if (small) body.template operator()<Tile<kHeadDim, E, kSmallRowTiles>>();
  else body.template operator()<Tile<kHeadDim, E, kLargeRowTiles>>();
}

template <class T>
void launch_tile(const AttentionArgs& a, cudaStream_t stream) {
  using E = typename T::Element;
  const auto x = a.as<E>();
  const auto& sh = a.shape;
  const std::int64_t ctas = ctas_per_split<T>(sh);
  const auto plan = skv::plan_fused("spec_decode", a.workspace, ctas, max_splits<T>(sh),
                                    ceil_div(sh.kv_len(0), T::kKeys), a.sm_count, T::kCtasPerSm,
                                    sh.rows(), T::kHeadDim);
  // The blocks share the rows as evenly as whole m16 tiles allow: 80 rows in 48 + 32, 128 in 64 + 64.
  const int blocks = row_blocks<T>(sh);
  const int block_rows = kTileRows * ceil_div(ceil_div(sh.group() * sh.seqlen, blocks), kTileRows);
  const Params<E> p{x.q, x.k, x.v, x.o, a.lse, plan.o_partial, plan.lse2_partial, plan.counters, sh.heads,
                    sh.hkv(), sh.group(), sh.seqlen, sh.kv_len(0), blocks, block_rows, plan.splits,
                    plan.tiles_per_split, sh.causal, a.softmax_scale * ladder::kLog2e};
  auto* kernel = spec_decode_kernel<T>;
  // Every instance takes more than the default 48 KB of dynamic shared memory.
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(T::kSmemBytes)));
  // The bandwidth needs both CTAs of an SM (kCtasPerSm): ask for the whole carveout as shared memory.
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                  int(cudaSharedmemCarveoutMaxShared)));
  kernel<<<unsigned(ctas * p.splits), T::kThreads, T::kSmemBytes, stream>>>(p);
  CUDA_CHECK_LAUNCH("spec_decode_kernel");
}

void launch(const AttentionArgs& a, cudaStream_t stream) {
  ladder::dispatch_head_dim<64, 128>(a.shape.head_dim, [&]<int kHeadDim>() {
    auto run = [&]<class T>() { launch_tile<T>(a, stream); };
    if (a.shape.dtype == ladder::DType::BF16) with_tile<kHeadDim, __nv_bfloat16>(a.shape, run);
    else with_tile<kHeadDim, __half>(a.shape, run);
  });
}

// The partials for the most splits any GPU (up to kMaxSms SMs) is planned with, then a counter per
// (batch, K/V head, row block), for the instance the shape gets.
std::size_t workspace_bytes(const ladder::AttentionShape& sh) {
  std::size_t bytes = 0;
  if (sh.head_dim != 64 && sh.head_dim != 128) return 0;  // refused (for_head_dims)
  ladder::dispatch_head_dim<64, 128>(sh.head_dim, [&]<int kHeadDim>() {
    with_tile<kHeadDim, __half>(sh, [&]<class T>() {  // the tiles do not depend on the element type
      bytes = skv::fused_workspace_for(ctas_per_split<T>(sh), max_splits<T>(sh),
                                       ceil_div(sh.kv_len(0), T::kKeys), T::kCtasPerSm, sh.rows(), kHeadDim);
    });
  });
  return bytes;
}

// Both instances of each element type: a problem launches one of them (by its row count).
template <int kHeadDim>
std::vector<ladder::KernelInfo> kernels() {
  std::vector<ladder::KernelInfo> out;
  auto add = [&]<class T>(const char* type) {
    const auto name = ladder::strprintf("spec_decode_kernel<D=%d,rows=%d%s>", kHeadDim, T::kRows, type);
    out.push_back(ladder::kernel(name, spec_decode_kernel<T>, T::kThreads, T::kSmemBytes));
    out.back().dtype = ladder::dtype_of<typename T::Element>();
  };
  add.template operator()<Tile<kHeadDim, __half, kSmallRowTiles>>("");
  add.template operator()<Tile<kHeadDim, __half, kLargeRowTiles>>("");
  add.template operator()<Tile<kHeadDim, __nv_bfloat16, kSmallRowTiles>>(",bf16");
  add.template operator()<Tile<kHeadDim, __nv_bfloat16, kLargeRowTiles>>(",bf16");
  return out;
}

std::optional<std::string> refusal(const ladder::AttentionShape& s) {
  if (s.seqlen > kMaxQueries)
    return ladder::strprintf("a decode kernel: at most %d query tokens per sequence (this has %d; "
                             "prefill is the forward steps' work)", kMaxQueries, s.seqlen);
  return std::nullopt;
}

ladder::Variant make_variant(const char* name, const char* description) {
  return ladder::attention_variant(name, description, launch)
      .needs_sm(80)  // cp.async, ldmatrix, mma.sync.m16n8k16 (.bf16 too)
      .for_head_dims({64, 128})
      .for_dtypes({ladder::DType::F16, ladder::DType::BF16})
      .serves({ladder::Feature::Gqa, ladder::Feature::Decode})
      .refuse_if(refusal)
      .with_lse()
      .with_kernels([](int d) { return d == 128 ? kernels<128>() : kernels<64>(); })
      .with_workspace(std::function<std::size_t(const ladder::AttentionShape&)>(workspace_bytes));
}

LADDER_REGISTER_STEP(
    ladder::attention_step(44, "spec_decode", "Speculative decoding: a K/V head's packed rows against one "
                           "read of its keys", "42/cta_merge")
        .add(make_variant("row_tiles", "step 42's splits and merge; a CTA of 2 or 4 warps, one m16 row tile a "
                                       "warp, over one shared cp.async ring of 64-key tiles"))
        .main_is("row_tiles"));

}  // namespace
