// The device pieces that every kernel of Part III (steps 07-15, the B300 series) shares and none
// of its versions changes: where element (row, col) of a shared tile lives, the cp.async tile
// loader, the k16 steps of O += P V, and the epilogue that stores O / l.
//
// The series' lessons (the S staging, the softmax, where the rescale factor comes from, the
// layout of Q Kᵀ) stay in the steps. A step's Config supplies the constants used here:
//   kHeadDim, kThreads                     the tile rows and the copying threads;
//   kWarpsN, kPvCols, kPvTiles, kKeySteps  O's warp grid: warp w owns the 16 rows 16·(w / kWarpsN)
//                                          and the kPvCols = 8·kPvTiles head dims
//                                          kPvCols·(w % kWarpsN); kKeySteps k16 steps of keys;
//   kSwizzledPv, kPStride                  P's layout (V uses kSwizzledPv with rows of kHeadDim).
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "common/device/mma_fragments.cuh"
#include "common/device/ptx.cuh"
#include "common/device/swizzle.cuh"

namespace ladder::part3 {

// ---- Where element (row, col) of a tile lives --------------------------------------------------
// The generic chain every shared access of this lineage goes through: coordinates, then the
// swizzle (logical 16-byte chunk c of row r stored at c ^ (r % 8); common/device/swizzle.cuh has
// the bank arithmetic), then the row-major flattening.
template <bool kSwizzled, int kStride>
__device__ __forceinline__ int tile_offset(int row, int col) {
  if constexpr (kSwizzled) return row * kStride + ladder::swizzle::xor_col(col, row & 7);
  else return row * kStride + col;
}

// ---- Global -> shared: one tile of rows, 16 bytes per cp.async, rows past N zero-filled ---------
// kLoaders threads issue the copies (`tid` counts from 0 among them; all of the CTA's by default).
// The pass loop is unrolled unless kUnrolled is false (step 15 says why it may not be).
template <class C, int kRows, bool kSwizzled, int kLoaders = C::kThreads, bool kUnrolled = true>
__device__ __forceinline__ void load_tile(__half* smem, const __half* tile, int rows_left, int tid) {
  constexpr int kChunks = C::kHeadDim / 8;
  constexpr int kRowsPerPass = kLoaders / kChunks;
  static_assert(kRows % kRowsPerPass == 0);
  const int chunk = tid % kChunks;
  const auto copy_pass = [&](int pass) {
    const int row = tid / kChunks + pass * kRowsPerPass;
    const bool valid = row < rows_left;
    ladder::ptx::cp_async_16(smem + tile_offset<kSwizzled, C::kHeadDim>(row, chunk * 8),
                             valid ? tile + row * C::kHeadDim + chunk * 8 : tile, valid ? 16 : 0);
  };
  if constexpr (kUnrolled) {
#pragma unroll
    for (int pass = 0; pass < kRows / kRowsPerPass; ++pass) copy_pass(pass);
  } else {
#pragma unroll 1
    for (int pass = 0; pass < kRows / kRowsPerPass; ++pass) copy_pass(pass);
  }
}

// ---- O += P V for the warp's 16 rows × kPvCols head dims ---------------------------------------
// The warp's tile of O starts at row row0 and head dim dim0. P (Br × Bc fp16) and V (Bc × D fp16)
// come from shared memory: per k16 step one ldmatrix.x4 of P and, per two n8 tiles of head dims,
// one ldmatrix.x4.trans of V. The caller has rescaled acc_o.
template <class C>
__device__ __forceinline__ void pv_product(float (&acc_o)[C::kPvTiles][4], const __half* s_p,
                                           const __half* s_v, int row0, int dim0, int lane) {
  namespace ptx = ladder::ptx;
  namespace frag = ladder::frag;
#pragma unroll
  for (int kk = 0; kk < C::kKeySteps; ++kk) {
    std::uint32_t a[4];
    ptx::ldmatrix_x4(a, s_p + tile_offset<C::kSwizzledPv, C::kPStride>(
                                  row0 + frag::ldsm_a_row(lane), kk * 16 + frag::ldsm_a_col(lane)));
#pragma unroll
    for (int dp = 0; dp < C::kPvTiles / 2; ++dp) {  // two n8 tiles of head dims per ldmatrix.x4
      std::uint32_t b[4];
      ptx::ldmatrix_x4_trans(b, s_v + tile_offset<C::kSwizzledPv, C::kHeadDim>(
                                        kk * 16 + frag::ldsm_a_row(lane),
                                        dim0 + dp * 16 + frag::ldsm_a_col(lane)));
      const std::uint32_t b_lo[2] = {b[0], b[1]}, b_hi[2] = {b[2], b[3]};
      ptx::mma_m16n8k16_f32(acc_o[2 * dp], a, b_lo);
      ptx::mma_m16n8k16_f32(acc_o[2 * dp + 1], a, b_hi);
    }
  }
}

// ---- The epilogue: O / l, 4 bytes per lane straight from the accumulator ------------------------
// Rows past N are not stored. Every stored row has l >= 1 in s_sum: its max element contributes
// exp(0). `head` is the offset of the CTA's (batch, head) in O, `q_start` its first query row.
template <class C>
__device__ __forceinline__ void store_o(__half* o, std::int64_t head,
                                        const float (&acc_o)[C::kPvTiles][4], const float* s_sum,
                                        int q_start, int n, int warp, int lane) {
  namespace frag = ladder::frag;
  const int row0 = 16 * (warp / C::kWarpsN);
  const int dim0 = C::kPvCols * (warp % C::kWarpsN);
  const int g = frag::group_of(lane), t = frag::thread_in_group(lane);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = row0 + g + 8 * h;
    if (q_start + row >= n) continue;
    const float inv_sum = 1.f / s_sum[row];
    __half* dst = o + head + std::int64_t(q_start + row) * C::kHeadDim + dim0 + 2 * t;
#pragma unroll
    for (int nd = 0; nd < C::kPvTiles; ++nd)
      *reinterpret_cast<__half2*>(dst + nd * 8) =
          __floats2half2_rn(acc_o[nd][2 * h] * inv_sum, acc_o[nd][2 * h + 1] * inv_sum);
  }
}

}  // namespace ladder::part3
