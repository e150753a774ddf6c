// Step 43 — decoding from a paged K/V cache in one kernel: step 42 through a block table.
//
// Step 29 taught the paged cache: the pool is [num_pages, Hkv, page_size, D], key j of sequence b
// is row j % P of page block_table[b · pages_per_seq + j / P], and as long as a 16-key warp tile
// lies in one page (P a multiple of 16) the tile is 16 contiguous rows. What changes is where a
// tile starts, and each warp reads its next tile's page one issue ahead, into a register, so the
// lookup's round trip is not added to the ring. This step makes that same change to step 42: the
// split kernel with its merge inside (the counter, the fences, the wide merge of the last CTA),
// so that a paged decode is one kernel too. The merge reads only the partials, which are laid out
// by rows and splits as before: it does not see the pages.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <stdexcept>
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
constexpr std::size_t kDefaultDynamicSmem = 48 * 1024;

template <int kHeadDim_, class Element_>
struct Tile {
  using Element = Element_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kWarps = 4;
  static constexpr int kThreads = kWarps * kWarpSize;
  static constexpr int kRows = 16;  // packed query rows per CTA: one m16 tile
  static constexpr int kKeys = 16;  // keys per warp tile: one k16 step of P V
  // Two tiles ahead per warp at D = 128 (8 KB each), four at D = 64 (4 KB each): 16 KB in flight
  // per warp either way.
  static constexpr int kStages = kHeadDim == 128 ? 3 : 5;
  static constexpr int kCtasPerSm = 2;  // what the smem below allows; the split rule plans with it
  static constexpr int kMinTilesPerSplit = kWarps * kStages;  // a split fills every warp's ring
  static constexpr int kDSteps = kHeadDim / 16;  // k16 steps of S = Q Kᵀ
  static constexpr int kOTiles = kHeadDim / 8;   // n8 tiles of O
  static constexpr int kChunks = kHeadDim / 8;   // 16-byte chunks per row
  static constexpr int kTileElems = kKeys * kHeadDim;
  static constexpr std::size_t kRingBytes =
      sizeof(Element) * std::size_t(kWarps) * kStages * 2 * kTileElems;  // K and V
  // The warps' merge (common/device/split_kv.cuh) reuses the ring.
  static constexpr std::size_t kMergeBytes = ladder::split_kv::merge_smem_bytes<kWarps, kHeadDim>();
  static constexpr std::size_t kQOffset = std::max(kRingBytes, kMergeBytes);
  static constexpr std::size_t kSmemBytes = kQOffset + sizeof(Element) * kRows * kHeadDim;
  static_assert(kKeys * kChunks % kWarpSize == 0 && kRingBytes % 128 == 0);
  static_assert(ladder::split_kv::cta_merge_smem_bytes(kRows, ladder::split_kv::kMaxSplits) <= kSmemBytes,
                "the merge's weights reuse the ring");
};

template <class E>
struct Params {
  const E* q;
  const E* k;
  const E* v;
  E* o;
  float* lse;          // may be null
  float* o_partial;    // splits > 1: common/device/split_kv.cuh's layout
  float* lse2_partial;
  int* counters;       // splits > 1: one per (batch, K/V head, row block), 0 between launches
  int heads, hkv, group, nq, nk;
  int row_blocks, splits, tiles_per_split;
  bool causal;
  float scale_log2;  // softmax scale · log2 e
  const int* block_table;  // [B][pages_per_seq]: the pool's page of each page of each sequence
  int page_size, pages_per_seq;
};

// The pool's page that holds key `key` of sequence b.
template <class E>
__device__ __forceinline__ int page_of(const Params<E>& p, int b, int key) {
  return p.block_table[b * p.pages_per_seq + key / p.page_size];
}
// Where key `key` of K/V head hk starts in the pool, in elements, given its page.
template <class T, class E>
__device__ __forceinline__ std::int64_t key_offset(const Params<E>& p, int page, int hk, int key) {
  return ((std::int64_t(page) * p.hkv + hk) * p.page_size + key % p.page_size) * T::kHeadDim;
}

// One warp's 16-key tile of K and of V, rows past the cache zero-filled (src_bytes = 0 reads
// nothing; the source then is the tile's first row, which exists). Lane l copies chunk l % kChunks
// of rows l / kChunks + r · (32 / kChunks).
template <class T>
__device__ __forceinline__ void load_kv_tile(typename T::Element* s_k, typename T::Element* s_v,
                                             const typename T::Element* k, const typename T::Element* v,
                                             int rows_left, int lane) {
  constexpr int kRowsPerPass = kWarpSize / T::kChunks;
  const int chunk = lane % T::kChunks;
#pragma unroll
  for (int pass = 0; pass < T::kKeys / kRowsPerPass; ++pass) {
    const int row = lane / T::kChunks + pass * kRowsPerPass;
    const bool valid = row < rows_left;
    const std::int64_t src = (valid ? row * T::kHeadDim : 0) + chunk * 8;
    const int dst = ladder::swizzle::xor_offset<T::kHeadDim>(row, chunk * 8);
    ptx::cp_async_16(s_k + dst, k + src, valid ? 16 : 0);
    ptx::cp_async_16(s_v + dst, v + src, valid ? 16 : 0);
  }
}

template <class T>
__global__ void __launch_bounds__(T::kThreads, T::kCtasPerSm)
    paged_fused_decode_kernel(const Params<typename T::Element> p) {
  using E = typename T::Element;
  constexpr int kD = T::kHeadDim;
  extern __shared__ __align__(128) unsigned char smem[];
  E* const s_ring = reinterpret_cast<E*>(smem);  // [warp][stage][K, V][kKeys][D], swizzled rows
  E* const s_q = reinterpret_cast<E*>(smem + T::kQOffset);  // [kRows][D], swizzled

  const int tid = threadIdx.x, warp = tid / kWarpSize, lane = tid % kWarpSize;
  const int g = frag::group_of(lane), t = frag::thread_in_group(lane);

  // blockIdx.x = ((b·Hkv + hk)·splits + split)·row_blocks + row block: the row blocks of one key
  // range are neighbours, so their K/V tiles are read from HBM once and from L2 after.
  int cta = blockIdx.x;
  const int rb = cta % p.row_blocks;
  cta /= p.row_blocks;
  const int split = cta % p.splits, bk = cta / p.splits;
  const int b = bk / p.hkv, hk = bk % p.hkv;
  const int row0 = rb * T::kRows;  // first packed row hg·Nq + i of this CTA
  const int rows = min(T::kRows, p.group * p.nq - row0);
  const std::int64_t out_row0 = (std::int64_t(b) * p.heads + hk * p.group) * p.nq + row0;

  // Causal (aligned to the end): query i sees keys <= Nk − Nq + i, so this CTA needs keys up to
  // the largest i among its rows, and tiles past that are never loaded.
  const int first_i = row0 % p.nq, last_i = (row0 + rows - 1) % p.nq;
  const int max_i = (rows >= p.nq || last_i < first_i) ? p.nq - 1 : last_i;
  const int kv_end = p.causal ? p.nk - p.nq + max_i + 1 : p.nk;
  const int tile_begin = split * p.tiles_per_split;
  const int tile_end = min(tile_begin + p.tiles_per_split, ceil_div(kv_end, T::kKeys));
  const int my_tiles = max(0, ceil_div(tile_end - tile_begin - warp, T::kWarps));

  E* const w_ring = s_ring + warp * T::kStages * 2 * T::kTileElems;
  auto tile_key = [&](int u) { return (tile_begin + warp + u * T::kWarps) * T::kKeys; };
  int next_page = my_tiles > 0 ? page_of(p, b, tile_key(0)) : 0;  // one issue ahead
  auto issue = [&](int u) {  // the warp's tile u into ring slot u % kStages; always one group
    if (u < my_tiles) {
      const int key0 = tile_key(u);
      const std::int64_t off = key_offset<T>(p, next_page, hk, key0);
      if (u + 1 < my_tiles) next_page = page_of(p, b, tile_key(u + 1));
      E* slot = w_ring + (u % T::kStages) * 2 * T::kTileElems;
      load_kv_tile<T>(slot, slot + T::kTileElems, p.k + off, p.v + off, p.nk - key0, lane);
    }
    ptx::cp_async_commit();
  };
  for (int u = 0; u < T::kStages - 1; ++u) issue(u);

  // Q: the CTA's rows are consecutive rows of Q; rows past the group's are zeros (their scores
  // are 0, finite, and they are never stored).
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
    ptx::ldmatrix_x4(q_frag[kk], s_q + ladder::swizzle::xor_offset<kD>(
                                           frag::ldsm_a_row(lane), kk * 16 + frag::ldsm_a_col(lane)));

  // This lane's rows g and g + 8: the last key each may see.
  int limit[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = g + 8 * h;
    limit[h] = (p.causal && r < rows) ? p.nk - p.nq + (row0 + r) % p.nq : p.nk - 1;
  }
  const int mask_from = p.causal ? p.nk - p.nq : p.nk - 1;  // no row's limit is below this

  float acc_o[T::kOTiles][4] = {};
  float row_max[2] = {-INFINITY, -INFINITY};  // in log2 units: max of s · scale · log2 e
  float row_sum[2] = {0.f, 0.f};              // this lane's share; the quad's sum at the end

  for (int u = 0; u < my_tiles; ++u) {
    issue(u + T::kStages - 1);  // into the slot tile u − 1 used: its readers passed __syncwarp
    ptx::cp_async_wait<T::kStages - 1>();  // tile u's group is complete (this lane's copies)
    __syncwarp();                          // ... and every lane's
    const E* s_k = w_ring + (u % T::kStages) * 2 * T::kTileElems;
    const E* s_v = s_k + T::kTileElems;
    const int key0 = (tile_begin + warp + u * T::kWarps) * T::kKeys;

    // S = Q Kᵀ: 16 rows × 16 keys, two n8 tiles per ldmatrix.x4 of K.
    float s[2][4] = {};
#pragma unroll
    for (int kk = 0; kk < T::kDSteps; ++kk) {
      std::uint32_t kb[4];
      ptx::ldmatrix_x4(kb, s_k + ladder::swizzle::xor_offset<kD>(frag::ldsm_b_row(lane),
                                                                 kk * 16 + frag::ldsm_b_col(lane)));
      const std::uint32_t lo[2] = {kb[0], kb[1]}, hi[2] = {kb[2], kb[3]};
      ptx::mma_m16n8k16<E>(s[0], q_frag[kk], lo);
      ptx::mma_m16n8k16<E>(s[1], q_frag[kk], hi);
    }
    // Element (ni, c) is row g + 8·(c / 2), key key0 + 8·ni + 2t + c % 2.
    const bool masked = key0 + T::kKeys - 1 > mask_from;  // warp-uniform
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int visible = limit[h] - key0 - 2 * t;  // offsets 8·ni + e <= visible are seen
      float m = row_max[h];
#pragma unroll
      for (int ni = 0; ni < 2; ++ni)
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
      for (int ni = 0; ni < 2; ++ni)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float& x = s[ni][2 * h + e];
          x = ptx::exp2_approx(x - m_use);
          row_sum[h] += x;
        }
    }
    // O += P V: the S fragments are P's A fragment (step 05's repack); V's B fragments by
    // ldmatrix.trans, two n8 tiles of D each.
    const std::uint32_t a[4] = {ptx::pack2_as<E>(s[0][0], s[0][1]), ptx::pack2_as<E>(s[0][2], s[0][3]),
                                ptx::pack2_as<E>(s[1][0], s[1][1]), ptx::pack2_as<E>(s[1][2], s[1][3])};
#pragma unroll
    for (int dp = 0; dp < T::kOTiles / 2; ++dp) {
      std::uint32_t vb[4];
      ptx::ldmatrix_x4_trans(vb, s_v + ladder::swizzle::xor_offset<kD>(frag::ldsm_a_row(lane),
                                                                      dp * 16 + frag::ldsm_a_col(lane)));
      const std::uint32_t lo[2] = {vb[0], vb[1]}, hi[2] = {vb[2], vb[3]};
      ptx::mma_m16n8k16<E>(acc_o[2 * dp], a, lo);
      ptx::mma_m16n8k16<E>(acc_o[2 * dp + 1], a, hi);
    }
    __syncwarp();  // every lane's ldmatrix of this slot is done before the slot is refilled
  }

  // ---- The warps' merge (the combine's identity, inside the CTA), then the rows' store ----
  ptx::cp_async_wait<0>();  // only empty groups can be left; the ring is reused by the merge
  __syncthreads();
  const skv::RowsOut<E> out{out_row0, rows, p.splits, split, p.o, p.lse, p.o_partial, p.lse2_partial};
  skv::merge_warps_and_store<T::kWarps, kD>(smem, acc_o, row_max, row_sum, out);
  if (p.splits == 1) return;  // the CTA wrote O and the LSE itself

  // ---- The last split of these rows merges them all ----
  __shared__ int last;  // is this CTA the last of its rows' splits to finish?
  int* const counter = p.counters + bk * p.row_blocks + rb;
  __threadfence();  // this thread's partial stores reach L2 before its CTA is counted
  __syncthreads();  // ... every thread's
  if (tid == 0) {
    last = atomicAdd(counter, 1) == p.splits - 1;
    if (last) *counter = 0;  // every split has counted: reset for the next launch
  }
  __syncthreads();
  if (!last) return;
  __threadfence();  // the other splits' partials, published before their adds, are seen after ours
  // The ring's shared memory is free: every thread passed the barriers above.
  skv::combine_rows_in_cta<T::kThreads, kD>(reinterpret_cast<float*>(smem), p.o_partial, p.lse2_partial,
                                             p.o, p.lse, out_row0, rows, p.splits);
}

// ---- Host side --------------------------------------------------------------------------------
template <class T>
std::int64_t ctas_per_split(const ladder::AttentionShape& sh) {
  return std::int64_t(sh.batch) * sh.hkv() * ceil_div(sh.group() * sh.seqlen, T::kRows);
}
template <class T>
int max_splits(const ladder::AttentionShape& sh) {
  return skv::max_splits_for(ceil_div(sh.kv_len(0), T::kKeys), T::kMinTilesPerSplit);
}

template <class T>
void launch_tile(const AttentionArgs& a, cudaStream_t stream) {
  using E = typename T::Element;
  const auto x = a.as<E>();
  const auto& sh = a.shape;
  Params<E> p{x.q, x.k, x.v, x.o, a.lse, nullptr, nullptr, nullptr, sh.heads, sh.hkv(), sh.group(),
              sh.seqlen, sh.kv_len(0), ceil_div(sh.group() * sh.seqlen, T::kRows), 1, 0,
              sh.causal, a.softmax_scale * ladder::kLog2e, a.block_table, sh.page_size,
              sh.pages_per_seq()};
  if (p.block_table == nullptr) throw std::logic_error("paged_fused_decode: launched without a block table");
  const std::int64_t ctas = ctas_per_split<T>(sh);
  const int want = skv::plan_splits(ctas, max_splits<T>(sh), a.sm_count, T::kCtasPerSm);
  const auto part = skv::partition(ceil_div(p.nk, T::kKeys), want);
  p.splits = part.splits;
  p.tiles_per_split = part.tiles_per_split;
  const std::int64_t rows = sh.rows();
  if (p.splits > 1) {
    if (a.workspace == nullptr) throw std::logic_error("paged_fused_decode: launched without its workspace");
    p.o_partial = static_cast<float*>(a.workspace);
    p.lse2_partial = p.o_partial + skv::partial_o_floats(rows, p.splits, T::kHeadDim);
    p.counters = reinterpret_cast<int*>(static_cast<unsigned char*>(a.workspace) +
                                        skv::counters_offset(rows, p.splits, T::kHeadDim));
  }
  if (ctas * p.splits > std::numeric_limits<int>::max())
    throw std::invalid_argument("paged_fused_decode: more CTAs than one grid holds");

  auto* kernel = paged_fused_decode_kernel<T>;
  if constexpr (T::kSmemBytes > kDefaultDynamicSmem)
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(T::kSmemBytes)));
  // The bandwidth needs both CTAs of an SM (kCtasPerSm): ask for the whole carveout as shared memory.
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                  int(cudaSharedmemCarveoutMaxShared)));
  kernel<<<unsigned(ctas * p.splits), T::kThreads, T::kSmemBytes, stream>>>(p);
  CUDA_CHECK_LAUNCH("paged_fused_decode_kernel");
}

void launch(const AttentionArgs& a, cudaStream_t stream) {
  ladder::dispatch_head_dim<64, 128>(a.shape.head_dim, [&]<int kHeadDim>() {
    if (a.shape.dtype == ladder::DType::BF16) launch_tile<Tile<kHeadDim, __nv_bfloat16>>(a, stream);
    else launch_tile<Tile<kHeadDim, __half>>(a, stream);
  });
}

// The partials for the most splits any GPU (up to kMaxSms SMs) is planned with, then a counter per
// (batch, K/V head, row block).
std::size_t workspace_bytes(const ladder::AttentionShape& sh) {
  std::size_t bytes = 0;
  if (sh.head_dim != 64 && sh.head_dim != 128) return 0;  // refused (for_head_dims)
  ladder::dispatch_head_dim<64, 128>(sh.head_dim, [&]<int kHeadDim>() {
    using T = Tile<kHeadDim, __half>;  // the tiles do not depend on the element type
    const int most = skv::max_planned_splits(ctas_per_split<T>(sh), max_splits<T>(sh), T::kCtasPerSm);
    const int splits = skv::partition(ceil_div(sh.kv_len(0), T::kKeys), most).splits;
    bytes = skv::fused_workspace_bytes(sh.rows(), splits, kHeadDim, ctas_per_split<T>(sh));
  });
  return bytes;
}

template <int kHeadDim>
std::vector<ladder::KernelInfo> kernels() {
  std::vector<ladder::KernelInfo> out;
  auto add = [&]<class E>(const char* type) {
    using T = Tile<kHeadDim, E>;
    out.push_back(ladder::kernel(ladder::strprintf("paged_fused_decode_kernel<D=%d%s>", kHeadDim, type),
                                 paged_fused_decode_kernel<T>, T::kThreads, T::kSmemBytes));
    out.back().dtype = ladder::dtype_of<E>();
  };
  add.template operator()<__half>("");
  add.template operator()<__nv_bfloat16>(",bf16");
  return out;
}

std::optional<std::string> refusal(const ladder::AttentionShape& s) {
  if (!s.paged()) return "a paged-cache kernel: the K/V cache must be paged (--page-size; step 42 reads it contiguous)";
  if (s.page_size % 16 != 0)
    return ladder::strprintf("page size %d: a 16-key tile must lie in one page (multiples of 16)", s.page_size);
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
      .serves({ladder::Feature::Gqa, ladder::Feature::Decode, ladder::Feature::Paged})
      .refuse_if(refusal)
      .with_lse()
      .with_kernels([](int d) { return d == 128 ? kernels<128>() : kernels<64>(); })
      .with_workspace(std::function<std::size_t(const ladder::AttentionShape&)>(workspace_bytes));
}

LADDER_REGISTER_STEP(
    ladder::attention_step(43, "paged_fused_decode", "Decoding from a paged K/V cache in one kernel: step 42 "
                           "through a block table", "42/cta_merge")
        .add(make_variant("cta_merge", "step 42's fused kernel, each 16-key tile's address from the block table"))
        .main_is("cta_merge"));

}  // namespace
