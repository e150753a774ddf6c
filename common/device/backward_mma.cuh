// Warp-level pieces of an mma.sync kernel that keeps its tiles XOR-swizzled in shared memory
// (swizzle.cuh) and its matrices in m16n8k16 fragments (mma_fragments.cuh): the tile loads, the
// products of a fragment with two n8 tiles of one ldmatrix.x4, the C-to-A repacking, the product
// whose A operand is stored transposed, and the ways out of C fragments (atomics, stores). Step
// 24's backward is built from them; nothing here knows about attention.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "common/device/mma_element.cuh"
#include "common/device/mma_fragments.cuh"
#include "common/device/ptx.cuh"
#include "common/device/swizzle.cuh"

namespace ladder::mma_sync {

// ---- Global -> shared: a tile of kRows rows of T::kHeadDim elements, 16 bytes per cp.async ------
// T supplies Element, kHeadDim and kThreads (every thread of the CTA calls this). Rows at or past
// `rows_left` are zero-filled (no byte read), so a ragged tile reads no memory it does not own.
template <class T, int kRows>
__device__ __forceinline__ void load_rows(typename T::Element* smem,
                                          const typename T::Element* rows, int rows_left, int tid) {
  constexpr int kD = T::kHeadDim;
  constexpr int kChunks = kD / 8;
  constexpr int kRowsPerPass = T::kThreads / kChunks;
  static_assert(kRows % kRowsPerPass == 0);
  const int chunk = tid % kChunks;
  const int first_row = tid / kChunks;
#pragma unroll
  for (int pass = 0; pass < kRows / kRowsPerPass; ++pass) {
    const int row = first_row + pass * kRowsPerPass;
    const bool valid = row < rows_left;
    ptx::cp_async_16(smem + swizzle::xor_offset<kD>(row, chunk * 8),
                     valid ? rows + std::int64_t(row) * kD + chunk * 8 : rows, valid ? 16 : 0);
  }
}

// kFloats consecutive floats from each of two global arrays into shared memory, 16 bytes per
// cp.async, by the CTA's first kFloats / 2 threads: src_a + src_off into dst_a + dst_off by the
// first half, the same of b by the second.
template <int kFloats>
__device__ __forceinline__ void load_floats2(float* dst_a, float* dst_b, int dst_off, const float* src_a,
                                             const float* src_b, int src_off, int tid) {
  constexpr int kVectorChunks = kFloats * int(sizeof(float)) / 16;
  if (tid < 2 * kVectorChunks) {
    const bool is_a = tid < kVectorChunks;
    const int c = tid % kVectorChunks;
    ptx::cp_async_16((is_a ? dst_a : dst_b) + dst_off + 4 * c, (is_a ? src_a : src_b) + src_off + 4 * c);
  }
}

// Address of logical element (row, col) of a swizzled tile with rows of kRowHalves elements.
template <int kRowHalves, class Element>
__device__ __forceinline__ const Element* at(const Element* tile, int row, int col) {
  return tile + swizzle::xor_offset<kRowHalves>(row, col);
}

// C (two n8 tiles) += A · B, B the two n8 tiles one ldmatrix.x4 at `b_row` gives: registers
// {0, 1} for the first tile and {2, 3} for the second (mma_fragments.cuh's B map without
// transpose on a [n][k] tile, its A map with .trans on a [k][n] tile).
template <class Element, bool kTrans>
__device__ __forceinline__ void mma_two_tiles(float (&c0)[4], float (&c1)[4], const std::uint32_t (&a)[4],
                                              const Element* b_row) {
  std::uint32_t b[4];
  if constexpr (kTrans) ptx::ldmatrix_x4_trans(b, b_row);
  else ptx::ldmatrix_x4(b, b_row);
  const std::uint32_t b_lo[2] = {b[0], b[1]}, b_hi[2] = {b[2], b[3]};
  ptx::mma_m16n8k16<Element>(c0, a, b_lo);
  ptx::mma_m16n8k16<Element>(c1, a, b_hi);
}

// Two n8 C tiles side by side (columns 0-7 and 8-15 of a k16 step) rounded to Element as the A
// fragment of that k16 step: a0 = C_lo[g][2t..], a1 = C_lo[g + 8][2t..], a2, a3 the same of C_hi.
template <class Element>
__device__ __forceinline__ void c_to_a(const float (&lo)[4], const float (&hi)[4], std::uint32_t (&a)[4]) {
  a[0] = ptx::pack2_as<Element>(lo[0], lo[1]);
  a[1] = ptx::pack2_as<Element>(lo[2], lo[3]);
  a[2] = ptx::pack2_as<Element>(hi[0], hi[1]);
  a[3] = ptx::pack2_as<Element>(hi[2], hi[3]);
}

// C[kMTiles × m16][kNTiles × n8] += A · B over kKSteps k16 steps, with A stored transposed: a_t is
// a swizzled [k][m] tile (rows of kARowHalves), b a swizzled [k][n] tile (rows of kBRowHalves);
// the product's rows start at column m0 of a_t, its columns at column n0 of b.
// A[m][k] = a_t[k][m]: ldmatrix.trans with the B map's addresses hands each lane A's pairs (lane
// (g, t) gets rows 2t, 2t + 1 of column g of each 8×8 matrix, and the B map orders the four
// matrices (k 0-7, m 0-7), (k 0-7, m 8-15), (k 8-15, m 0-7), (k 8-15, m 8-15), which are a0..a3).
// B[k][n] = b[k][n]: .trans with the A map.
template <class Element, int kKSteps, int kARowHalves, int kBRowHalves, int kMTiles, int kNTiles>
__device__ __forceinline__ void mma_a_transposed(float (&acc)[kMTiles][kNTiles][4], const Element* a_t, int m0,
                                                 const Element* b, int n0, int lane) {
  static_assert(kNTiles % 2 == 0);
  const int a_row = frag::ldsm_b_row(lane), a_col = frag::ldsm_b_col(lane);
  const int b_row = frag::ldsm_a_row(lane), b_col = frag::ldsm_a_col(lane);
#pragma unroll
  for (int kk = 0; kk < kKSteps; ++kk) {
    std::uint32_t a[kMTiles][4];
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt)
      ptx::ldmatrix_x4_trans(a[mt], at<kARowHalves>(a_t, kk * 16 + a_row, m0 + mt * 16 + a_col));
#pragma unroll
    for (int np = 0; np < kNTiles / 2; ++np) {
      std::uint32_t bt[4];
      ptx::ldmatrix_x4_trans(bt, at<kBRowHalves>(b, kk * 16 + b_row, n0 + np * 16 + b_col));
      const std::uint32_t b_lo[2] = {bt[0], bt[1]}, b_hi[2] = {bt[2], bt[3]};
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
        ptx::mma_m16n8k16<Element>(acc[mt][2 * np], a[mt], b_lo);
        ptx::mma_m16n8k16<Element>(acc[mt][2 * np + 1], a[mt], b_hi);
      }
    }
  }
}

// Two accumulators of the same rows (C fragments [kNTiles n8]: rows row0 + g, + 8, columns
// 8nd + 2t, + 1) stored to two row-major matrices of Element (rows of kRowElems) as pairs, the
// first times `scale_a`. Rows at or past `rows` are not stored.
template <int kRowElems, class Element, int kNTiles>
__device__ __forceinline__ void store_c_rows2(const float (&acc_a)[kNTiles][4], Element* dst_a, float scale_a,
                                              const float (&acc_b)[kNTiles][4], Element* dst_b, int row0,
                                              int rows, int g, int t) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = row0 + g + 8 * h;
    if (row < rows) {
      Element* pa = dst_a + std::int64_t(row) * kRowElems + 2 * t;
      Element* pb = dst_b + std::int64_t(row) * kRowElems + 2 * t;
#pragma unroll
      for (int nd = 0; nd < kNTiles; ++nd) {
        *reinterpret_cast<std::uint32_t*>(pa + 8 * nd) =
            ptx::pack2_as<Element>(acc_a[nd][2 * h] * scale_a, acc_a[nd][2 * h + 1] * scale_a);
        *reinterpret_cast<std::uint32_t*>(pb + 8 * nd) = ptx::pack2_as<Element>(acc_b[nd][2 * h], acc_b[nd][2 * h + 1]);
      }
    }
  }
}

// Every element of a (nested) array of fp32 accumulators set to 0.
template <class Array>
__device__ __forceinline__ void fill_zero(Array& a) {
  if constexpr (std::is_array_v<Array>) {
#pragma unroll
    for (int i = 0; i < int(std::extent_v<Array>); ++i) fill_zero(a[i]);
  } else {
    a = 0.f;
  }
}

// Two fp32 added into an accumulator in global memory. sm_90 has a vector float atomic (one RED
// for the pair).
__device__ __forceinline__ void atomic_add2(float* dst, float x, float y) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  atomicAdd(reinterpret_cast<float2*>(dst), make_float2(x, y));
#else
  atomicAdd(dst, x);
  atomicAdd(dst + 1, y);
#endif
}

// C fragments [kMTiles m16][kNTiles n8] added into a row-major fp32 matrix (rows of kRowFloats) by
// atomics, a pair per atomic_add2: tile (mt, nd) covers rows row0 + 16mt + g, + 8 and columns
// 8nd + 2t, + 1 from `dst`'s column. Rows at or past `rows` are skipped.
template <int kRowFloats, int kMTiles, int kNTiles>
__device__ __forceinline__ void atomic_add_c(const float (&acc)[kMTiles][kNTiles][4], float* dst, int row0,
                                             int rows, int g, int t) {
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = row0 + mt * 16 + g + 8 * h;
      if (row < rows) {
        float* p = dst + std::int64_t(row) * kRowFloats + 2 * t;
#pragma unroll
        for (int nd = 0; nd < kNTiles; ++nd) atomic_add2(p + 8 * nd, acc[mt][nd][2 * h], acc[mt][nd][2 * h + 1]);
      }
    }
}

}  // namespace ladder::mma_sync
