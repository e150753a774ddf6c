// The pieces of FlashAttention on mma.sync.m16n8k16 that Part II's tensor-core steps (05, 06, and
// step 30, which changes only the accumulator type) share: the CTA's tile shape, the cp.async
// tile loaders, where a lane points ldmatrix, S = Q Kᵀ and O += P V as fragment loops, the
// element mask, the online softmax on the S fragment, and the epilogue's stores of O / l. Each
// comes in step 05's form (padded rows); where step 06 needs the same piece for padded or
// swizzled rows, its layout-generic form sits beside it (tile_offset, load_tile_layout, LdsmLane,
// store_o_staged), and a Config's bits pick among them. The lessons stay in the steps: the
// pipeline (a cp.async double buffer, step 05; walked backwards, step 06), the tiles and why
// (registers decide them), which variant uses which form and what each costs (06's ablation), the
// LSE and the heavy-first grid (06), the fp16 accumulator type (30).
//
// The layout this file assumes: a CTA of 4 warps owns kBlockM = 128 query rows, 32 per warp (two
// m16 tiles); a K/V block of kBlockN keys is computed kComputeN keys at a time; each lane holds the
// fragments of common/device/mma_fragments.cuh, so a row of S lives in the four lanes of a quad.
// A step's Config derives from Shape (below) and adds:
//   kQInRegisters     Q's A fragments are loaded once into registers (else re-read per k16 step);
//   kMinBlocksPerSm   the second argument of __launch_bounds__;
//   kSwizzled         rows dense and XOR-swizzled rather than padded (read only by the
//                     layout-generic forms: LdsmLane, tile_offset, load_tile_layout and
//                     store_o_staged; step 06 uses them, 05 and 30 the padded forms).
// Shape supplies defaults a Config may hide with its own: SAcc / OAcc (the accumulator types of S
// and O, fp32), kQkUnroll (k16 steps of Q Kᵀ unrolled together with Q in shared memory: all of
// them) and kKWithAMap (K's fragments read with the B lane map).
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "common/device/mma_fragments.cuh"
#include "common/device/ptx.cuh"
#include "common/device/swizzle.cuh"

namespace ladder::mma {

inline constexpr int kWarpSize = 32;

// ---- One 16×8 accumulator tile of mma.m16n8k16 in fp32: four floats a lane -------------------
// c0, c1 = row g, columns 2t and 2t + 1; c2, c3 = row g + 8 (mma_fragments.cuh). The functions
// below take a row half h (row g or g + 8) and an element e (column 2t + e); the fragment loops
// are written against them only, so that another accumulator type (step 30's fp16) is a second
// struct with the same members and nothing else.
struct AccF32 {
  using Frag = float[4];
  __device__ static void zero(Frag& c) { c[0] = c[1] = c[2] = c[3] = 0.f; }
  __device__ static void mma(Frag& c, const std::uint32_t (&a)[4], const std::uint32_t (&b)[2]) {
    ptx::mma_m16n8k16_f32(c, a, b);
  }
  __device__ static float2 pair(const Frag& c, int h) {
    return make_float2(c[2 * h], c[2 * h + 1]);
  }
  __device__ static void set_pair(Frag& c, int h, float lo, float hi) {
    c[2 * h] = lo, c[2 * h + 1] = hi;
  }
  __device__ static void mask(Frag& c, int h, int e) { c[2 * h + e] = -INFINITY; }
  __device__ static void rescale(Frag& c, int h, float f) { c[2 * h] *= f, c[2 * h + 1] *= f; }
  // The row's pair as a half2 register: the A-operand format of the next mma.
  __device__ static std::uint32_t half2_of(const Frag& c, int h) {
    return ptx::pack_half2(c[2 * h], c[2 * h + 1]);
  }
  // The factor rescale() really applies: the row sum must be multiplied by the same one.
  __device__ static float applied(float f) { return f; }
};

// ---- The CTA's tiles ------------------------------------------------------------------------
// kBlockN keys per loaded block (one cp.async stage, one barrier), kComputeN keys per S tile in
// registers (the same unless a step splits the block), rows of kStride halves in shared memory
// (D + 8: padded, conflict-free ldmatrix; common/device/swizzle.cuh has the bank arithmetic).
template <int kHeadDim_, int kBlockN_, int kComputeN_ = kBlockN_, int kStride_ = kHeadDim_ + 8>
struct Shape {
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kBlockN = kBlockN_;      // keys per loaded block (Bc)
  static constexpr int kComputeN = kComputeN_;  // keys per S tile
  static constexpr int kBlockM = 128;           // query rows per CTA (Br)
  static constexpr int kWarps = 4;
  static constexpr int kThreads = kWarps * kWarpSize;
  static constexpr int kRowsPerWarp = kBlockM / kWarps;
  static constexpr int kMTiles = kRowsPerWarp / 16;  // m16 tiles per warp
  static constexpr int kDSteps = kHeadDim / 16;      // k16 steps of S = Q Kᵀ (along D)
  static constexpr int kSTiles = kComputeN / 8;      // n8 tiles of S (along keys)
  static constexpr int kKeySteps = kComputeN / 16;   // k16 steps of O += P V (along keys)
  static constexpr int kOTiles = kHeadDim / 8;       // n8 tiles of O (along D)

  static constexpr int kStride = kStride_;
  static constexpr int kChunksPerRow = kHeadDim / 8;  // 16-byte cp.async chunks
  static constexpr int kStages = 2;                   // K/V double buffer
  static constexpr int kQElems = kBlockM * kStride;
  static constexpr int kKVElems = kBlockN * kStride;  // one K (or V) stage
  static constexpr std::size_t kSmemBytes = sizeof(__half) * (kQElems + 2 * kStages * kKVElems);

  using SAcc = AccF32;  // S = Q Kᵀ accumulates in fp32 ...
  using OAcc = AccF32;  // ... and so does O += P V
  static constexpr int kQkUnroll = kDSteps;   // Q Kᵀ's k16 loop fully unrolled
  static constexpr bool kKWithAMap = false;   // K read with the B lane map

  static_assert(kHeadDim % 16 == 0 && kComputeN % 16 == 0 && kRowsPerWarp % 16 == 0);
  static_assert(kThreads % kChunksPerRow == 0);
};

// The warp's accumulator tiles in C's types: S (m16 × n8 tiles along keys) and O (along D).
template <class C>
using STiles = typename C::SAcc::Frag[C::kMTiles][C::kSTiles];
template <class C>
using OTiles = typename C::OAcc::Frag[C::kMTiles][C::kOTiles];

// ---- Global -> shared: one tile of padded rows, 16 bytes per cp.async --------------------------
// `tile` points at the tile's first row in global memory and `rows_left` rows from there exist
// (at least one). The rest are zero-filled (src_bytes = 0 reads nothing) and take row 0 as their
// source address, so no address past the tensor is ever formed. Consecutive threads take
// consecutive 16-byte chunks of a row: each warp reads whole 128-byte lines.
template <class C, int kRows>
__device__ __forceinline__ void load_tile(__half* smem, const __half* tile, int rows_left,
                                          int tid) {
  constexpr int kRowsPerPass = C::kThreads / C::kChunksPerRow;
  static_assert(kRows % kRowsPerPass == 0);
  const int chunk = tid % C::kChunksPerRow;
  const int first_row = tid / C::kChunksPerRow;
#pragma unroll
  for (int pass = 0; pass < kRows / kRowsPerPass; ++pass) {
    const int row = first_row + pass * kRowsPerPass;
    const bool valid = row < rows_left;
    const __half* src = tile + (valid ? row * C::kHeadDim : 0) + chunk * 8;
    ptx::cp_async_16(smem + row * C::kStride + chunk * 8, src, valid ? 16 : 0);
  }
}

// ---- Padded or swizzled rows (C::kSwizzled) ----------------------------------------------------
// Column (halves) where logical column `c` of a row with row % 8 == row8 is stored, and the offset
// of element (row, c): common/device/swizzle.cuh has the bank arithmetic of both layouts.
template <class C>
__device__ __forceinline__ int tile_col(int c, int row8) {
  if constexpr (C::kSwizzled) return ladder::swizzle::xor_col(c, row8);
  else return c;
}
template <class C>
__device__ __forceinline__ int tile_offset(int row, int c) {
  return row * C::kStride + tile_col<C>(c, row & 7);
}

// The loader above for either layout, with the bounds check a template parameter (a kernel that
// knows a block is whole skips it). A thread's chunk and its row modulo 8 never change between
// passes (kRowsPerPass is a multiple of 8), so the swizzled column is computed once. Zero-filled
// rows take the tile's first row as their source address.
template <class C, int kRows, bool kCheckBounds>
__device__ __forceinline__ void load_tile_layout(__half* smem, const __half* tile, int rows_left,
                                                 int tid) {
  constexpr int kRowsPerPass = C::kThreads / C::kChunksPerRow;
  static_assert(kRows % kRowsPerPass == 0 && kRowsPerPass % 8 == 0);
  const int chunk = tid % C::kChunksPerRow;
  const int first_row = tid / C::kChunksPerRow;
  __half* dst = smem + tile_offset<C>(first_row, chunk * 8);
  const __half* src = tile + first_row * C::kHeadDim + chunk * 8;
#pragma unroll
  for (int pass = 0; pass < kRows / kRowsPerPass; ++pass) {
    const int row = first_row + pass * kRowsPerPass;
    if constexpr (kCheckBounds) {
      const bool valid = row < rows_left;
      ptx::cp_async_16(dst + pass * kRowsPerPass * C::kStride,
                       valid ? src + pass * kRowsPerPass * C::kHeadDim : tile, valid ? 16 : 0);
    } else {
      ptx::cp_async_16(dst + pass * kRowsPerPass * C::kStride,
                       src + pass * kRowsPerPass * C::kHeadDim);
    }
  }
}

// ---- Where a lane points ldmatrix ---------------------------------------------------------------
// Every fragment a lane addresses is 16·i rows below and 16·kk columns right of its first one.
// Padded rows: the lane's address is a pointer (its row and column from the fragment map), and
// every other fragment is a compile-time offset from it.
template <class C>
__device__ __forceinline__ const __half* ldsm_at(const __half* lane, int rows_down,
                                                 int cols_right) {
  return lane + rows_down * C::kStride + cols_right;
}

// Padded or swizzled rows (C::kSwizzled; step 06): the row stays a pointer, and `chunk` is the
// lane's 16-byte chunk there (0 or 1, from the fragment map), already XORed with row % 8 when the
// tile is swizzled. Every fragment's row % 8 is the first one's, so with the swizzle k16 step kk
// reads logical chunk 2kk + c, stored at (2kk + c) ^ (row % 8) = 2kk ^ chunk (c is bit 0 and 2kk
// is even): one XOR with a constant per step, and only four distinct values (2kk mod 8).
struct LdsmLane {
  const __half* row;
  int chunk;
};
template <class C>
__device__ __forceinline__ LdsmLane ldsm_lane(const __half* tile, int row, int col) {
  const int chunk = col >> 3;
  return {tile + row * C::kStride, C::kSwizzled ? chunk ^ (row & 7) : chunk};
}
template <class C>
__device__ __forceinline__ const __half* ldsm_at(const LdsmLane& l, int rows_down, int cols_right) {
  const int step_chunk = cols_right >> 3;  // even: cols_right is a multiple of 16
  const __half* row = l.row + rows_down * C::kStride;
  if constexpr (C::kSwizzled)
    return row + ((step_chunk & ~7) << 3) + (((step_chunk & 7) ^ l.chunk) << 3);
  else
    return row + ((step_chunk + l.chunk) << 3);
}

// ---- Q's A fragments, once, into registers (C::kQInRegisters) --------------------------------
template <class C, class Lane>
__device__ __forceinline__ void load_q_fragments(std::uint32_t (&q_frag)[C::kMTiles][C::kDSteps][4],
                                                 const Lane& q_lane) {
#pragma unroll
  for (int mi = 0; mi < C::kMTiles; ++mi)
#pragma unroll
    for (int kk = 0; kk < C::kDSteps; ++kk)
      ptx::ldmatrix_x4(q_frag[mi][kk], ldsm_at<C>(q_lane, mi * 16, kk * 16));
}

// ---- S = Q Kᵀ for the warp's 32 rows × kComputeN keys -------------------------------------------
// `q_lane` / `k_lane` are this lane's ldmatrix rows for the first k16 step (A map for Q, B map for
// K). q_frag is read only with C::kQInRegisters, where the k16 loop is fully unrolled; with Q in
// shared memory it is unrolled C::kQkUnroll steps at a time (step 06 says why fewer can be better).
template <class C, class QLane, class KLane>
__device__ __forceinline__ void gemm_qk(STiles<C>& s,
                                        const std::uint32_t (&q_frag)[C::kMTiles][C::kDSteps][4],
                                        const QLane& q_lane, const KLane& k_lane) {
  using Acc = typename C::SAcc;
#pragma unroll
  for (int mi = 0; mi < C::kMTiles; ++mi)
#pragma unroll
    for (int ni = 0; ni < C::kSTiles; ++ni) Acc::zero(s[mi][ni]);

#pragma unroll(C::kQInRegisters ? C::kDSteps : C::kQkUnroll)
  for (int kk = 0; kk < C::kDSteps; ++kk) {
    std::uint32_t a[C::kMTiles][4];
#pragma unroll
    for (int mi = 0; mi < C::kMTiles; ++mi) {
      if constexpr (C::kQInRegisters) {
#pragma unroll
        for (int r = 0; r < 4; ++r) a[mi][r] = q_frag[mi][kk][r];
      } else {
        ptx::ldmatrix_x4(a[mi], ldsm_at<C>(q_lane, mi * 16, kk * 16));
      }
    }
#pragma unroll
    for (int np = 0; np < C::kSTiles / 2; ++np) {  // two n8 tiles of keys per ldmatrix.x4
      std::uint32_t b[4];
      ptx::ldmatrix_x4(b, ldsm_at<C>(k_lane, np * 16, kk * 16));
      // With the B map, registers {0, 1} are the n8 tile of keys 0-7 and {2, 3} keys 8-15. With
      // the A map (C::kKWithAMap) matrices 0..3 are (keys 0-7, dims 0-7), (keys 8-15, dims 0-7),
      // (keys 0-7, dims 8-15), (keys 8-15, dims 8-15): keys 0-7 in {0, 2}, keys 8-15 in {1, 3}.
      const std::uint32_t b_lo[2] = {b[0], C::kKWithAMap ? b[2] : b[1]};
      const std::uint32_t b_hi[2] = {C::kKWithAMap ? b[1] : b[2], b[3]};
#pragma unroll
      for (int mi = 0; mi < C::kMTiles; ++mi) {
        Acc::mma(s[mi][2 * np], a[mi], b_lo);
        Acc::mma(s[mi][2 * np + 1], a[mi], b_hi);
      }
    }
  }
}

// ---- Element mask: ragged last block and the causal diagonal ----------------------------------
// Element (h, e) of S tile ni sits at key kv_start + 8·ni + 2t + e and query row
// warp_row0 + 16·mi + g + 8·h. A key is visible to row r if key < n and, when causal, key <= r.
// Subtracting the lane's own key offset once per row leaves one compare against a compile-time
// constant per element.
template <class C, bool kCausal>
__device__ __forceinline__ void apply_mask(STiles<C>& s, int warp_row0, int kv_start, int n,
                                           int g, int t) {
#pragma unroll
  for (int mi = 0; mi < C::kMTiles; ++mi)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = warp_row0 + mi * 16 + g + 8 * h;
      const int key_end = kCausal ? min(n, row + 1) : n;  // keys < key_end are visible
      const int visible = key_end - kv_start - 2 * t;
#pragma unroll
      for (int ni = 0; ni < C::kSTiles; ++ni)
#pragma unroll
        for (int e = 0; e < 2; ++e)
          if (8 * ni + e >= visible) C::SAcc::mask(s[mi][ni], h, e);
    }
}

// ---- The running state of the warp's rows: O = 0, m = −inf, l = 0 ------------------------------
template <class C>
__device__ __forceinline__ void init_rows(OTiles<C>& acc_o, float (&row_max)[C::kMTiles][2],
                                          float (&row_sum)[C::kMTiles][2]) {
#pragma unroll
  for (int mi = 0; mi < C::kMTiles; ++mi) {
#pragma unroll
    for (int nd = 0; nd < C::kOTiles; ++nd) C::OAcc::zero(acc_o[mi][nd]);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      row_max[mi][h] = -INFINITY;
      row_sum[mi][h] = 0.f;
    }
  }
}

// ---- Online softmax on the S fragment, in place -----------------------------------------------
// Each lane holds 4 rows (2 m16 tiles × rows g and g + 8); row_max is kept in raw logit units and
// `s_scale` turns a score into log2 units (softmax_scale·log2 e), so the exponent is
// exp2(s·s_scale − m·s_scale): one FFMA and one MUFU.EX2 per element.
// A row whose keys in this block and before were all masked has max −inf; subtracting it would
// give −inf − (−inf) = NaN, so the subtracted max is clamped to 0 (every p is then exp2(−inf) = 0).
// The history, row_sum AND acc_o, is rescaled by exp2(m_old − m_new) before this block is added
// (by the factor O's type can hold, OAcc::applied): forgetting row_sum here is the classic bug
// (the output is then off by a per-row factor). row_sum stays a per-lane partial sum: the quad
// reduction waits for the epilogue.
template <class C>
__device__ __forceinline__ void online_softmax(STiles<C>& s, float (&row_max)[C::kMTiles][2],
                                               float (&row_sum)[C::kMTiles][2], OTiles<C>& acc_o,
                                               float s_scale) {
  using SAcc = typename C::SAcc;
  using OAcc = typename C::OAcc;
#pragma unroll
  for (int mi = 0; mi < C::kMTiles; ++mi)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float m = row_max[mi][h];
#pragma unroll
      for (int ni = 0; ni < C::kSTiles; ++ni) {
        const float2 x = SAcc::pair(s[mi][ni], h);
        m = fmaxf(m, fmaxf(x.x, x.y));
      }
      m = frag::quad_max(m);

      const float m_scaled = (m == -INFINITY) ? 0.f : m * s_scale;
      const float rescale = OAcc::applied(ptx::exp2_approx(row_max[mi][h] * s_scale - m_scaled));
      row_max[mi][h] = m;
      row_sum[mi][h] *= rescale;
#pragma unroll
      for (int nd = 0; nd < C::kOTiles; ++nd) OAcc::rescale(acc_o[mi][nd], h, rescale);
      float pair_sum[C::kSTiles];
#pragma unroll
      for (int ni = 0; ni < C::kSTiles; ++ni) {
        const float2 x = SAcc::pair(s[mi][ni], h);
        const float p0 = ptx::exp2_approx(fmaf(x.x, s_scale, -m_scaled));
        const float p1 = ptx::exp2_approx(fmaf(x.y, s_scale, -m_scaled));
        SAcc::set_pair(s[mi][ni], h, p0, p1);
        pair_sum[ni] = p0 + p1;
      }
      // A tree instead of one running sum: a chain of 2·kSTiles dependent FADDs is scheduled
      // after the P V mma and keeps every fp32 p alive next to its fp16 copy (at D = 128 that
      // alone pushed step 05's kernel into spills).
#pragma unroll
      for (int stride = 1; stride < C::kSTiles; stride *= 2)
#pragma unroll
        for (int ni = 0; ni + stride < C::kSTiles; ni += 2 * stride)
          pair_sum[ni] += pair_sum[ni + stride];
      row_sum[mi][h] += pair_sum[0];
    }
}

// ---- O += P V ---------------------------------------------------------------------------------
// The C fragments of S tiles 2kk and 2kk+1 (keys 16kk..16kk+15) are, pair by pair, the A
// fragment of key step kk: a0 = row g keys 2t,2t+1 = tile 2kk (c0, c1); a1 = row g+8 = tile 2kk
// (c2, c3); a2, a3 = the same from tile 2kk+1. Packing to half2 is the only work. V is row-major
// [key][d], so its B fragments come from ldmatrix.trans with the A-operand address map.
template <class C, class Lane>
__device__ __forceinline__ void gemm_pv(OTiles<C>& acc_o, const STiles<C>& p, const Lane& v_lane) {
  using SAcc = typename C::SAcc;
#pragma unroll
  for (int kk = 0; kk < C::kKeySteps; ++kk) {
    std::uint32_t a[C::kMTiles][4];
#pragma unroll
    for (int mi = 0; mi < C::kMTiles; ++mi) {
      a[mi][0] = SAcc::half2_of(p[mi][2 * kk], 0);
      a[mi][1] = SAcc::half2_of(p[mi][2 * kk], 1);
      a[mi][2] = SAcc::half2_of(p[mi][2 * kk + 1], 0);
      a[mi][3] = SAcc::half2_of(p[mi][2 * kk + 1], 1);
    }
#pragma unroll
    for (int dp = 0; dp < C::kOTiles / 2; ++dp) {  // two n8 tiles of head dims per ldmatrix.x4
      std::uint32_t b[4];
      ptx::ldmatrix_x4_trans(b, ldsm_at<C>(v_lane, kk * 16, dp * 16));
      const std::uint32_t b_lo[2] = {b[0], b[1]}, b_hi[2] = {b[2], b[3]};
#pragma unroll
      for (int mi = 0; mi < C::kMTiles; ++mi) {
        C::OAcc::mma(acc_o[mi][2 * dp], a[mi], b_lo);
        C::OAcc::mma(acc_o[mi][2 * dp + 1], a[mi], b_hi);
      }
    }
  }
}

// ---- Epilogue: O / l straight from the accumulator --------------------------------------------
// inv_sum(mi, h) is 1/l of the lane's row h of m16 tile mi (quad_inverse_sum, or a step's own
// guarded value). A lane owns two adjacent columns of a row, so each store is 4 bytes and a warp's
// store touches 8 rows × 16 bytes: coalescing is poor (step 06 stages O through shared memory
// instead). O is widened to fp32 for the product and rounded once to fp16.
template <class C, class InvSum>
__device__ __forceinline__ void store_o(__half* o_head, const OTiles<C>& acc_o,
                                        const InvSum& inv_sum, int warp_row0, int n, int g, int t) {
#pragma unroll
  for (int mi = 0; mi < C::kMTiles; ++mi)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float inv = inv_sum(mi, h);
      const int row = warp_row0 + mi * 16 + g + 8 * h;
      if (row < n) {
        __half* dst = o_head + std::int64_t(row) * C::kHeadDim + 2 * t;
#pragma unroll
        for (int nd = 0; nd < C::kOTiles; ++nd) {
          const float2 x = C::OAcc::pair(acc_o[mi][nd], h);
          *reinterpret_cast<__half2*>(dst + nd * 8) = __floats2half2_rn(x.x * inv, x.y * inv);
        }
      }
    }
}

// The same through shared memory, for 16-byte coalesced stores: warp `warp` stages its 32 rows
// of O in its own 32 rows of the CTA's Q tile `s_q` (padded or swizzled). No other warp ever
// reads them, so warp-level barriers are enough. The first orders every lane's last read of Q
// (its last S = Q Kᵀ, through ldmatrix) before any lane's write: lanes of a warp are not
// guaranteed to run in lockstep, and without it compute-sanitizer's racecheck reports the
// write-after-read hazard. The fragment writes are conflict-free in either layout: 8 rows (g) ×
// 4 lanes (t) of 4 bytes at one logical chunk fall in 8 different bank groups.
template <class C, class InvSum>
__device__ __forceinline__ void store_o_staged(__half* o_head, __half* s_q, const OTiles<C>& acc_o,
                                               const InvSum& inv_sum, int warp, int warp_row0,
                                               int n, int lane) {
  const int g = frag::group_of(lane);
  const int t = frag::thread_in_group(lane);
  __syncwarp();
#pragma unroll
  for (int mi = 0; mi < C::kMTiles; ++mi)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float inv = inv_sum(mi, h);
      const int row = warp * C::kRowsPerWarp + mi * 16 + g + 8 * h;  // row % 8 == g
      __half* dst = s_q + row * C::kStride;
#pragma unroll
      for (int nd = 0; nd < C::kOTiles; ++nd) {
        const float2 x = C::OAcc::pair(acc_o[mi][nd], h);
        *reinterpret_cast<__half2*>(dst + tile_col<C>(nd * 8 + 2 * t, g)) =
            __floats2half2_rn(x.x * inv, x.y * inv);
      }
    }
  __syncwarp();
  // Read it back row-major: consecutive lanes take consecutive 16-byte chunks of a row, so a
  // warp store writes whole rows (4 rows of 128 bytes at D = 64, 2 of 256 at D = 128).
  constexpr int kRowsPerPass = kWarpSize / C::kChunksPerRow;
  static_assert(kWarpSize % C::kChunksPerRow == 0);
  const int chunk = lane % C::kChunksPerRow;
#pragma unroll
  for (int pass = 0; pass < C::kRowsPerWarp / kRowsPerPass; ++pass) {
    const int local = pass * kRowsPerPass + lane / C::kChunksPerRow;
    const int row = warp_row0 + local;
    const uint4 chunk_data = *reinterpret_cast<const uint4*>(
        s_q + tile_offset<C>(warp * C::kRowsPerWarp + local, chunk * 8));
    if (row < n)
      *reinterpret_cast<uint4*>(o_head + std::int64_t(row) * C::kHeadDim + chunk * 8) = chunk_data;
  }
}

// 1/l from the lane's partial row sum: the deferred reduction over the quad.
__device__ __forceinline__ float quad_inverse_sum(float row_sum) {
  return 1.f / frag::quad_sum(row_sum);
}

}  // namespace ladder::mma
