// Step 30 — fp16 accumulation: step 05's kernel with its accumulators in fp16.
//
// Seed 001's last named direction. Step 05 runs both products as mma.sync.m16n8k16 with fp16
// inputs and fp32 accumulators; the same instruction exists with an fp16 accumulator
// (.f16.f16.f16.f16), two half2 registers a lane instead of four floats. GeForce parts run it at
// twice the fp32-accumulate rate; data-center parts (the H200) at the same rate, so here it can
// only buy registers. The variants differ in the accumulator type alone (Acc below):
//
//   fp32_accum  step 05's bc64 (Bc = 64, Br = 128, 4 warps, padded smem): S and O in fp32.
//   fp16_pv     O += P V accumulated in fp16, and its history rescale exp2(m_old − m_new) applied
//               in fp16 too (one HMUL2 per two elements): O never exists in fp32 inside the loop.
//   fp16_both   also S = Q Kᵀ in fp16. A raw score can pass fp16's 65504 where the scaled one does
//               not, so softmax_scale·log2(e) is folded into Q once, in shared memory; the mma then
//               yields the exponent argument itself. Folding buys headroom, not precision: fp16
//               keeps 11 bits of a score of any size (a score of 100 is known to ±2⁻⁵: ±2% on its
//               probability).
//   *_3cta      the same kernels at D = 64 held to 168 registers: three CTAs per SM.
//
// bf16 has no such experiment: mma.sync with bf16 A and B accumulates in fp32 only (the PTX ISA
// has no other C/D type for them), so the variants run fp16 only.
// The fp16 accumulator's fragment map is the fp32 one (common/device/mma_fragments.cuh) packed:
// register h of a tile holds row g + 8h, columns 2t and 2t + 1, as one half2.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "common/check.hpp"
#include "common/device/mma_fragments.cuh"
#include "common/device/ptx.cuh"
#include "common/dispatch.hpp"
#include "common/math.hpp"
#include "common/registry.hpp"
#include "common/strings.hpp"

namespace {

using ladder::AttentionArgs;
using ladder::ceil_div;
namespace ptx = ladder::ptx;
namespace frag = ladder::frag;

constexpr int kWarpSize = 32;
using ladder::kLog2e;
constexpr std::size_t kDefaultDynamicSmem = 48 * 1024;  // above this a kernel must opt in

// ---- One 16x8 accumulator tile of mma.m16n8k16, in fp32 or fp16 -------------------------------
// Per lane: rows g (h = 0) and g + 8 (h = 1), columns 2t and 2t + 1 (e = 0, 1). The kernel below
// is written against this interface only, so the three variants differ in nothing else.
template <bool kHalf>
struct Acc;

template <>
struct Acc<false> {  // fp32: 4 registers
  float c[4];
  __device__ void zero() { c[0] = c[1] = c[2] = c[3] = 0.f; }
  __device__ void mma(const std::uint32_t (&a)[4], const std::uint32_t (&b)[2]) {
    ptx::mma_m16n8k16_f32(c, a, b);
  }
  __device__ float2 pair(int h) const { return make_float2(c[2 * h], c[2 * h + 1]); }
  __device__ void set_pair(int h, float lo, float hi) { c[2 * h] = lo, c[2 * h + 1] = hi; }
  __device__ void mask(int h, int e) { c[2 * h + e] = -INFINITY; }
  __device__ void rescale(int h, float f) { c[2 * h] *= f, c[2 * h + 1] *= f; }
  __device__ std::uint32_t half2_of(int h) const { return ptx::pack_half2(c[2 * h], c[2 * h + 1]); }
  // The factor rescale() really applies: the row sum must be multiplied by the same one.
  __device__ static float applied(float f) { return f; }
};

template <>
struct Acc<true> {  // fp16: 2 registers (half2 of row g, half2 of row g + 8)
  std::uint32_t c[2];
  __device__ void zero() { c[0] = c[1] = 0u; }
  __device__ void mma(const std::uint32_t (&a)[4], const std::uint32_t (&b)[2]) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16 {%0,%1}, {%2,%3,%4,%5}, {%6,%7}, "
        "{%0,%1};\n"
        : "+r"(c[0]), "+r"(c[1])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
  __device__ __half2& h2(int h) { return *reinterpret_cast<__half2*>(&c[h]); }
  __device__ const __half2& h2(int h) const { return *reinterpret_cast<const __half2*>(&c[h]); }
  __device__ float2 pair(int h) const { return __half22float2(h2(h)); }
  __device__ void set_pair(int h, float lo, float hi) { c[h] = ptx::pack_half2(lo, hi); }
  __device__ void mask(int h, int e) {
    constexpr std::uint32_t kMinusInf = 0xFC00u;  // fp16 −inf
    c[h] = e == 0 ? (c[h] & 0xFFFF0000u) | kMinusInf : (c[h] & 0x0000FFFFu) | (kMinusInf << 16);
  }
  __device__ void rescale(int h, float f) { h2(h) = __hmul2(h2(h), __float2half2_rn(f)); }
  // P is already packed: the S tile's register is the A operand's (the repack disappears).
  __device__ std::uint32_t half2_of(int h) const { return c[h]; }
  // O is multiplied by f rounded to fp16; multiplying the fp32 row sum by the unrounded f would
  // put a 2⁻¹² relative mismatch between numerator and denominator at every rescale.
  __device__ static float applied(float f) { return __half2float(__float2half_rn(f)); }
};

enum class Accum { F32, F16Pv, F16Both };

// ---- Tiles: step 05's bc64 ---------------------------------------------------------------------
// Per thread, 32 query rows per warp, Bc = 64:
//   O accumulator  fp32: 64 (D = 64) 128 (D = 128)   fp16: 32 and 64
//   S = Q Kᵀ       fp32: 32                          fp16: 16
// Q stays where step 05 keeps it (registers at D = 64, shared memory at D = 128). What freed
// registers can buy is occupancy: at D = 64 shared memory (54 KB per CTA) allows four CTAs per SM
// and the registers two (ptxas takes > 200 with the launch bounds' minimum at 1); a third CTA
// needs <= 168 registers per thread (kMinBlocksPerSm = 3, the *_3cta variants). At D = 128 shared
// memory (102 KB per CTA) caps the SM at two CTAs whatever the registers.
template <int kHeadDim_, Accum kAccum, int kMinBlocksPerSm_ = 1>
struct Tile {
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr bool kPvHalf = kAccum != Accum::F32;
  static constexpr bool kQkHalf = kAccum == Accum::F16Both;
  using OAcc = Acc<kPvHalf>;
  using SAcc = Acc<kQkHalf>;
  static constexpr int kBlockN = 64;
  static constexpr int kBlockM = 128;
  static constexpr int kWarps = 4;
  static constexpr int kThreads = kWarps * kWarpSize;
  static constexpr int kRowsPerWarp = kBlockM / kWarps;
  static constexpr int kMTiles = kRowsPerWarp / 16;
  static constexpr int kDSteps = kHeadDim / 16;
  static constexpr int kSTiles = kBlockN / 8;
  static constexpr int kKeySteps = kBlockN / 16;
  static constexpr int kOTiles = kHeadDim / 8;
  static constexpr bool kQInRegisters = kHeadDim == 64;
  static constexpr int kMinBlocksPerSm = kMinBlocksPerSm_;
  // Rows padded to D + 8 halves: conflict-free ldmatrix (step 05 says why).
  static constexpr int kStride = kHeadDim + 8;
  static constexpr int kChunksPerRow = kHeadDim / 8;
  static constexpr int kStages = 2;
  static constexpr int kQElems = kBlockM * kStride;
  static constexpr int kKVElems = kBlockN * kStride;
  static constexpr std::size_t kSmemBytes = sizeof(__half) * (kQElems + 2 * kStages * kKVElems);
  static_assert(kThreads % kChunksPerRow == 0);
};

// ---- Global -> shared, 16 bytes per cp.async; rows past the tensor zero-filled (step 05) --------
template <class T, int kRows>
__device__ __forceinline__ void load_tile(__half* smem, const __half* tile, int rows_left, int tid) {
  constexpr int kRowsPerPass = T::kThreads / T::kChunksPerRow;
  static_assert(kRows % kRowsPerPass == 0);
  const int chunk = tid % T::kChunksPerRow;
  const int first_row = tid / T::kChunksPerRow;
#pragma unroll
  for (int pass = 0; pass < kRows / kRowsPerPass; ++pass) {
    const int row = first_row + pass * kRowsPerPass;
    const bool valid = row < rows_left;
    const __half* src = tile + (valid ? row * T::kHeadDim : 0) + chunk * 8;
    ptx::cp_async_16(smem + row * T::kStride + chunk * 8, src, valid ? 16 : 0);
  }
}

// fp16_both: Q ← Q · scale·log2(e), in shared memory, once per CTA. Each product is rounded to
// fp16 (one more 2⁻¹² relative error per element of Q); zero-filled rows stay zero.
template <class T>
__device__ __forceinline__ void scale_q_tile(__half* s_q, float factor, int tid) {
  const __half2 f = __float2half2_rn(factor);
  for (int i = tid; i < T::kBlockM * T::kChunksPerRow; i += T::kThreads) {
    __half2* chunk = reinterpret_cast<__half2*>(s_q + (i / T::kChunksPerRow) * T::kStride +
                                                (i % T::kChunksPerRow) * 8);
#pragma unroll
    for (int e = 0; e < 4; ++e) chunk[e] = __hmul2(chunk[e], f);
  }
}

// ---- S = Q Kᵀ for the warp's 32 rows × kBlockN keys (step 05's, on Acc tiles) -----------------
template <class T>
__device__ __forceinline__ void gemm_qk(typename T::SAcc (&s)[T::kMTiles][T::kSTiles],
                                        const std::uint32_t (&q_frag)[T::kMTiles][T::kDSteps][4],
                                        const __half* q_lane, const __half* k_lane) {
#pragma unroll
  for (int mi = 0; mi < T::kMTiles; ++mi)
#pragma unroll
    for (int ni = 0; ni < T::kSTiles; ++ni) s[mi][ni].zero();
#pragma unroll
  for (int kk = 0; kk < T::kDSteps; ++kk) {
    std::uint32_t a[T::kMTiles][4];
#pragma unroll
    for (int mi = 0; mi < T::kMTiles; ++mi) {
      if constexpr (T::kQInRegisters) {
#pragma unroll
        for (int r = 0; r < 4; ++r) a[mi][r] = q_frag[mi][kk][r];
      } else {
        ptx::ldmatrix_x4(a[mi], q_lane + mi * 16 * T::kStride + kk * 16);
      }
    }
#pragma unroll
    for (int np = 0; np < T::kSTiles / 2; ++np) {
      std::uint32_t b[4];
      ptx::ldmatrix_x4(b, k_lane + np * 16 * T::kStride + kk * 16);
      const std::uint32_t b_lo[2] = {b[0], b[1]}, b_hi[2] = {b[2], b[3]};
#pragma unroll
      for (int mi = 0; mi < T::kMTiles; ++mi) {
        s[mi][2 * np].mma(a[mi], b_lo);
        s[mi][2 * np + 1].mma(a[mi], b_hi);
      }
    }
  }
}

// ---- Element mask: ragged last block and the causal diagonal (step 05) ------------------------
template <class T, bool kCausal>
__device__ __forceinline__ void apply_mask(typename T::SAcc (&s)[T::kMTiles][T::kSTiles],
                                           int warp_row0, int kv_start, int n, int g, int t) {
#pragma unroll
  for (int mi = 0; mi < T::kMTiles; ++mi)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = warp_row0 + mi * 16 + g + 8 * h;
      const int key_end = kCausal ? min(n, row + 1) : n;
      const int visible = key_end - kv_start - 2 * t;
#pragma unroll
      for (int ni = 0; ni < T::kSTiles; ++ni)
#pragma unroll
        for (int e = 0; e < 2; ++e)
          if (8 * ni + e >= visible) s[mi][ni].mask(h, e);
    }
}

// ---- Online softmax on the S tiles, in place (step 05's) --------------------------------------
// `s_scale` turns a score into log2 units: softmax_scale·log2(e), or 1 where Q carries it. The
// max of a fully masked row is clamped to 0 before it is subtracted (−inf − −inf = NaN). The
// history (row_sum and O) is rescaled by the factor O's type can hold (Acc::applied).
template <class T>
__device__ __forceinline__ void online_softmax(typename T::SAcc (&s)[T::kMTiles][T::kSTiles],
                                               float (&row_max)[T::kMTiles][2],
                                               float (&row_sum)[T::kMTiles][2],
                                               typename T::OAcc (&acc_o)[T::kMTiles][T::kOTiles],
                                               float s_scale) {
#pragma unroll
  for (int mi = 0; mi < T::kMTiles; ++mi)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float m = row_max[mi][h];
#pragma unroll
      for (int ni = 0; ni < T::kSTiles; ++ni) {
        const float2 x = s[mi][ni].pair(h);
        m = fmaxf(m, fmaxf(x.x, x.y));
      }
      m = frag::quad_max(m);

      const float m_scaled = (m == -INFINITY) ? 0.f : m * s_scale;
      const float rescale =
          T::OAcc::applied(ptx::exp2_approx(row_max[mi][h] * s_scale - m_scaled));
      row_max[mi][h] = m;
      row_sum[mi][h] *= rescale;
#pragma unroll
      for (int nd = 0; nd < T::kOTiles; ++nd) acc_o[mi][nd].rescale(h, rescale);
      float pair_sum[T::kSTiles];
#pragma unroll
      for (int ni = 0; ni < T::kSTiles; ++ni) {
        const float2 x = s[mi][ni].pair(h);
        const float p0 = ptx::exp2_approx(fmaf(x.x, s_scale, -m_scaled));
        const float p1 = ptx::exp2_approx(fmaf(x.y, s_scale, -m_scaled));
        s[mi][ni].set_pair(h, p0, p1);
        pair_sum[ni] = p0 + p1;
      }
      // Summed as a tree (step 05: a serial chain kept every fp32 p alive).
#pragma unroll
      for (int stride = 1; stride < T::kSTiles; stride *= 2)
#pragma unroll
        for (int ni = 0; ni + stride < T::kSTiles; ni += 2 * stride)
          pair_sum[ni] += pair_sum[ni + stride];
      row_sum[mi][h] += pair_sum[0];
    }
}

// ---- O += P V: S tiles 2kk and 2kk+1 are key step kk's A fragment (step 05) -------------------
template <class T>
__device__ __forceinline__ void gemm_pv(typename T::OAcc (&acc_o)[T::kMTiles][T::kOTiles],
                                        const typename T::SAcc (&p)[T::kMTiles][T::kSTiles],
                                        const __half* v_lane) {
#pragma unroll
  for (int kk = 0; kk < T::kKeySteps; ++kk) {
    std::uint32_t a[T::kMTiles][4];
#pragma unroll
    for (int mi = 0; mi < T::kMTiles; ++mi) {
      a[mi][0] = p[mi][2 * kk].half2_of(0);
      a[mi][1] = p[mi][2 * kk].half2_of(1);
      a[mi][2] = p[mi][2 * kk + 1].half2_of(0);
      a[mi][3] = p[mi][2 * kk + 1].half2_of(1);
    }
#pragma unroll
    for (int dp = 0; dp < T::kOTiles / 2; ++dp) {
      std::uint32_t b[4];
      ptx::ldmatrix_x4_trans(b, v_lane + kk * 16 * T::kStride + dp * 16);
      const std::uint32_t b_lo[2] = {b[0], b[1]}, b_hi[2] = {b[2], b[3]};
#pragma unroll
      for (int mi = 0; mi < T::kMTiles; ++mi) {
        acc_o[mi][2 * dp].mma(a[mi], b_lo);
        acc_o[mi][2 * dp + 1].mma(a[mi], b_hi);
      }
    }
  }
}

// ---- The kernel: step 05's, grid (ceil(N / kBlockM), B·H) -------------------------------------
template <class T, bool kCausal>
__global__ void __launch_bounds__(T::kThreads, T::kMinBlocksPerSm)
    fp16_accumulation_kernel(const __half* __restrict__ q, const __half* __restrict__ k,
                             const __half* __restrict__ v, __half* __restrict__ o, int n,
                             float scale_log2) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __half* s_q = reinterpret_cast<__half*>(smem_raw);
  __half* s_k = s_q + T::kQElems;
  __half* s_v = s_k + T::kStages * T::kKVElems;

  const int tid = threadIdx.x;
  const int warp = tid / kWarpSize;
  const int lane = tid % kWarpSize;
  const int g = frag::group_of(lane);
  const int t = frag::thread_in_group(lane);

  const int q_start = blockIdx.x * T::kBlockM;
  const int warp_row0 = q_start + warp * T::kRowsPerWarp;
  const std::int64_t head = std::int64_t(blockIdx.y) * n * T::kHeadDim;
  const __half* k_head = k + head;
  const __half* v_head = v + head;

  const int kv_end = kCausal ? min(n, q_start + T::kBlockM) : n;
  const int n_blocks = ceil_div(kv_end, T::kBlockN);

  load_tile<T, T::kBlockM>(s_q, q + head + std::int64_t(q_start) * T::kHeadDim, n - q_start, tid);
  ptx::cp_async_commit();
  load_tile<T, T::kBlockN>(s_k, k_head, n, tid);
  load_tile<T, T::kBlockN>(s_v, v_head, n, tid);
  ptx::cp_async_commit();

  const __half* q_lane =
      s_q + (warp * T::kRowsPerWarp + frag::ldsm_a_row(lane)) * T::kStride + frag::ldsm_a_col(lane);
  const int k_lane_offset = frag::ldsm_b_row(lane) * T::kStride + frag::ldsm_b_col(lane);
  const int v_lane_offset = frag::ldsm_a_row(lane) * T::kStride + frag::ldsm_a_col(lane);

  // fp16_both scales the Q tile before anyone reads it: wait for Q's group, scale, and a second
  // barrier so that no warp's ldmatrix sees a row another thread has not scaled yet.
  if constexpr (T::kQkHalf || T::kQInRegisters) {
    ptx::cp_async_wait<1>();
    __syncthreads();
  }
  if constexpr (T::kQkHalf) {
    scale_q_tile<T>(s_q, scale_log2, tid);
    __syncthreads();
  }
  const float s_scale = T::kQkHalf ? 1.f : scale_log2;

  std::uint32_t q_frag[T::kMTiles][T::kDSteps][4];
  if constexpr (T::kQInRegisters) {
#pragma unroll
    for (int mi = 0; mi < T::kMTiles; ++mi)
#pragma unroll
      for (int kk = 0; kk < T::kDSteps; ++kk)
        ptx::ldmatrix_x4(q_frag[mi][kk], q_lane + mi * 16 * T::kStride + kk * 16);
  }

  typename T::OAcc acc_o[T::kMTiles][T::kOTiles];
  float row_max[T::kMTiles][2];
  float row_sum[T::kMTiles][2];
#pragma unroll
  for (int mi = 0; mi < T::kMTiles; ++mi) {
#pragma unroll
    for (int nd = 0; nd < T::kOTiles; ++nd) acc_o[mi][nd].zero();
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      row_max[mi][h] = -INFINITY;
      row_sum[mi][h] = 0.f;
    }
  }

  const __half* k_next = k_head;
  const __half* v_next = v_head;
  int rows_left = n;
  for (int j = 0; j < n_blocks; ++j) {
    const int stage = j & 1;
    const int kv_start = j * T::kBlockN;
    ptx::cp_async_wait<0>();
    __syncthreads();
    if (j + 1 < n_blocks) {
      k_next += T::kBlockN * T::kHeadDim;
      v_next += T::kBlockN * T::kHeadDim;
      rows_left -= T::kBlockN;
      load_tile<T, T::kBlockN>(s_k + (stage ^ 1) * T::kKVElems, k_next, rows_left, tid);
      load_tile<T, T::kBlockN>(s_v + (stage ^ 1) * T::kKVElems, v_next, rows_left, tid);
      ptx::cp_async_commit();
    }

    typename T::SAcc s[T::kMTiles][T::kSTiles];
    gemm_qk<T>(s, q_frag, q_lane, s_k + stage * T::kKVElems + k_lane_offset);
    const bool ragged = kv_start + T::kBlockN > n;
    const bool diagonal = kCausal && kv_start + T::kBlockN - 1 > warp_row0;
    if (ragged || diagonal) apply_mask<T, kCausal>(s, warp_row0, kv_start, n, g, t);
    online_softmax<T>(s, row_max, row_sum, acc_o, s_scale);
    gemm_pv<T>(acc_o, s, s_v + stage * T::kKVElems + v_lane_offset);
  }

  // Epilogue (step 05's): the quad reduction of the row sums, 1/l in fp32, O widened to fp32 for
  // the product and rounded once to fp16 on the store. Every stored row has l >= 1.
  __half* o_head = o + head;
#pragma unroll
  for (int mi = 0; mi < T::kMTiles; ++mi)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float inv_sum = 1.f / frag::quad_sum(row_sum[mi][h]);
      const int row = warp_row0 + mi * 16 + g + 8 * h;
      if (row < n) {
        __half* dst = o_head + std::int64_t(row) * T::kHeadDim + 2 * t;
#pragma unroll
        for (int nd = 0; nd < T::kOTiles; ++nd) {
          const float2 x = acc_o[mi][nd].pair(h);
          *reinterpret_cast<__half2*>(dst + nd * 8) = __floats2half2_rn(x.x * inv_sum, x.y * inv_sum);
        }
      }
    }
}

// ---- Host side --------------------------------------------------------------------------------
template <class T, bool kCausal>
void launch_tile(const AttentionArgs& a, cudaStream_t stream) {
  const auto& sh = a.shape;
  auto* kernel = fp16_accumulation_kernel<T, kCausal>;
  if constexpr (T::kSmemBytes > kDefaultDynamicSmem)
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    int(T::kSmemBytes)));
  const dim3 grid(ceil_div(sh.seqlen, T::kBlockM), sh.batch * sh.heads);
  kernel<<<grid, T::kThreads, T::kSmemBytes, stream>>>(a.q, a.k, a.v, a.o, sh.seqlen,
                                                       a.softmax_scale * kLog2e);
  CUDA_CHECK_LAUNCH("fp16_accumulation_kernel");
}

// kMinBlocks64: the launch bounds' CTAs per SM at D = 64 (D = 128 always takes 1).
template <Accum kAccum, int kMinBlocks64>
void launch(const AttentionArgs& a, cudaStream_t stream) {
  ladder::dispatch_head_dim<64, 128>(a.shape.head_dim, [&]<int kHeadDim>() {
    using T = Tile<kHeadDim, kAccum, kHeadDim == 64 ? kMinBlocks64 : 1>;
    a.shape.causal ? launch_tile<T, true>(a, stream) : launch_tile<T, false>(a, stream);
  });
}

template <class T>
std::vector<ladder::KernelInfo> kernel_pair(const char* name) {
  return {ladder::kernel(ladder::strprintf("fp16_accumulation_kernel<D=%d,%s>", T::kHeadDim, name),
                         fp16_accumulation_kernel<T, false>, T::kThreads, T::kSmemBytes)
              .when_causal(false),
          ladder::kernel(ladder::strprintf("fp16_accumulation_kernel<D=%d,%s,causal>", T::kHeadDim, name),
                         fp16_accumulation_kernel<T, true>, T::kThreads, T::kSmemBytes)
              .when_causal(true)};
}

template <Accum kAccum, int kMinBlocks64 = 1>
ladder::Variant make_variant(const char* name, const char* description) {
  return ladder::attention_variant(name, description, launch<kAccum, kMinBlocks64>)
      .needs_sm(80)  // cp.async, ldmatrix, mma.sync.m16n8k16 (both accumulator types)
      .for_head_dims({64, 128})  // fp16 only (the default): there is no bf16 fp16-accumulate mma
      .batch_heads_on_grid_yz()
      .with_kernels([name](int head_dim) {
        return head_dim == 128 ? kernel_pair<Tile<128, kAccum>>(name)
                               : kernel_pair<Tile<64, kAccum, kMinBlocks64>>(name);
      });
}

constexpr const char* kPvApprox =
    "O accumulates in fp16 registers (mma .f16.f16.f16.f16): every k16 step rounds the running "
    "sum to 11 bits";
constexpr const char* kBothApprox =
    "S and O accumulate in fp16: each score keeps 11 bits, an error of |s|*2^-11 in the exponent "
    "of its probability";

LADDER_REGISTER_STEP(
    ladder::attention_step(30, "fp16_accumulation",
                           "fp16 accumulation: mma.sync with fp16 accumulators (seed 001's last direction)",
                           "05/bc64")
        .add(make_variant<Accum::F32>("fp32_accum", "step 05's bc64: fp32 accumulators for S and O"))
        .add(make_variant<Accum::F16Pv>("fp16_pv", "O += P V accumulated (and rescaled) in fp16")
                 .approximate_because(kPvApprox))
        .add(make_variant<Accum::F16Both>("fp16_both", "also S = Q K^T in fp16, scale folded into Q")
                 .approximate_because(kBothApprox))
        .add(make_variant<Accum::F16Pv, 3>("fp16_pv_3cta", "fp16_pv held to 168 registers: 3 CTAs per SM at D=64")
                 .approximate_because(kPvApprox)
                 .compared_with("30/fp16_pv")
                 .same_kernel_at(128, "30/fp16_pv"))
        .add(make_variant<Accum::F16Both, 3>("fp16_both_3cta", "fp16_both held to 168 registers: 3 CTAs per SM at D=64")
                 .approximate_because(kBothApprox)
                 .compared_with("30/fp16_both")
                 .same_kernel_at(128, "30/fp16_both"))
        .main_is("fp32_accum"));  // the only exact one; the others are the measurement

}  // namespace
