// Step 30 — fp16 accumulation: step 05's kernel with its accumulators in fp16.
//
// Seed 001's last named direction. Step 05 runs both products as mma.sync.m16n8k16 with fp16
// inputs and fp32 accumulators; the same instruction exists with an fp16 accumulator
// (.f16.f16.f16.f16), two half2 registers a lane instead of four floats. GeForce parts run it at
// twice the fp32-accumulate rate; data-center parts (the H200) at the same rate, so here it can
// only buy registers. The variants differ in the accumulator type alone (Tile's SAcc and OAcc):
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
// register h of a tile holds row g + 8h, columns 2t and 2t + 1, as one half2. The fragment loops
// (common/device/mma_attention.cuh) are step 05's, written against an accumulator type: fp32's is
// mma::AccF32 there, fp16's is AccF16 here.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "common/attention_launch.hpp"
#include "common/device/mma_attention.cuh"
#include "common/math.hpp"
#include "common/registry.hpp"
#include "common/strings.hpp"

namespace {

using ladder::AttentionArgs;
using ladder::ceil_div;
using ladder::mma::kWarpSize;
namespace ptx = ladder::ptx;
namespace frag = ladder::frag;
namespace mma = ladder::mma;
using ladder::kLog2e;

// ---- One 16x8 accumulator tile of mma.m16n8k16 in fp16: two half2 registers a lane ------------
// The same members as mma::AccF32 (rows g (h = 0) and g + 8 (h = 1), columns 2t and 2t + 1
// (e = 0, 1)): the kernel and the fragment loops are written against them only, so the three
// variants differ in nothing else.
struct AccF16 {  // c[h]: the half2 of row g + 8h
  using Frag = std::uint32_t[2];
  __device__ static void zero(Frag& c) { c[0] = c[1] = 0u; }
  __device__ static void mma(Frag& c, const std::uint32_t (&a)[4], const std::uint32_t (&b)[2]) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16 {%0,%1}, {%2,%3,%4,%5}, {%6,%7}, "
        "{%0,%1};\n"
        : "+r"(c[0]), "+r"(c[1])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
  __device__ static __half2& h2(Frag& c, int h) { return *reinterpret_cast<__half2*>(&c[h]); }
  __device__ static const __half2& h2(const Frag& c, int h) {
    return *reinterpret_cast<const __half2*>(&c[h]);
  }
  __device__ static float2 pair(const Frag& c, int h) { return __half22float2(h2(c, h)); }
  __device__ static void set_pair(Frag& c, int h, float lo, float hi) {
    c[h] = ptx::pack_half2(lo, hi);
  }
  __device__ static void mask(Frag& c, int h, int e) {
    constexpr std::uint32_t kMinusInf = 0xFC00u;  // fp16 −inf
    c[h] = e == 0 ? (c[h] & 0xFFFF0000u) | kMinusInf : (c[h] & 0x0000FFFFu) | (kMinusInf << 16);
  }
  __device__ static void rescale(Frag& c, int h, float f) {
    h2(c, h) = __hmul2(h2(c, h), __float2half2_rn(f));
  }
  // P is already packed: the S tile's register is the A operand's (the repack disappears).
  __device__ static std::uint32_t half2_of(const Frag& c, int h) { return c[h]; }
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
// memory (102 KB per CTA) caps the SM at two CTAs whatever the registers. Rows padded to D + 8
// halves, as in step 05.
template <int kHeadDim_, Accum kAccum, int kMinBlocksPerSm_ = 1>
struct Tile : mma::Shape<kHeadDim_, 64> {
  static constexpr bool kPvHalf = kAccum != Accum::F32;
  static constexpr bool kQkHalf = kAccum == Accum::F16Both;
  using OAcc = std::conditional_t<kPvHalf, AccF16, mma::AccF32>;
  using SAcc = std::conditional_t<kQkHalf, AccF16, mma::AccF32>;
  static constexpr bool kQInRegisters = kHeadDim_ == 64;
  static constexpr int kMinBlocksPerSm = kMinBlocksPerSm_;
};

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

// ---- The kernel: step 05's, on T's accumulator types ------------------------------------------
template <class T, bool kCausal>
__global__ void __launch_bounds__(T::kThreads, T::kMinBlocksPerSm)
    fp16_accumulation_kernel(const __half* __restrict__ q, const __half* __restrict__ k,
                             const __half* __restrict__ v, __half* __restrict__ o, int n,
                             float scale_log2) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __half* s_q = reinterpret_cast<__half*>(smem_raw);  // [kBlockM][kStride]
  __half* s_k = s_q + T::kQElems;                     // [kStages][kBlockN][kStride]
  __half* s_v = s_k + T::kStages * T::kKVElems;       // [kStages][kBlockN][kStride]

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

  // Block-level causal skip: the CTA's last row is q_start + kBlockM − 1, so no key past it is
  // ever needed and those blocks are never loaded.
  const int kv_end = kCausal ? min(n, q_start + T::kBlockM) : n;
  const int n_blocks = ceil_div(kv_end, T::kBlockN);

  // Prologue: Q (its own commit group), then the first K/V block.
  mma::load_tile<T, T::kBlockM>(s_q, q + head + std::int64_t(q_start) * T::kHeadDim, n - q_start,
                                tid);
  ptx::cp_async_commit();
  mma::load_tile<T, T::kBlockN>(s_k, k_head, n, tid);
  mma::load_tile<T, T::kBlockN>(s_v, v_head, n, tid);
  ptx::cp_async_commit();

  // This lane's ldmatrix row addresses (A map for Q and V, B map for K) in stage 0.
  const __half* q_lane =
      s_q + (warp * T::kRowsPerWarp + frag::ldsm_a_row(lane)) * T::kStride + frag::ldsm_a_col(lane);
  const int k_lane_offset = frag::ldsm_b_row(lane) * T::kStride + frag::ldsm_b_col(lane);
  const int v_lane_offset = frag::ldsm_a_row(lane) * T::kStride + frag::ldsm_a_col(lane);

  // The Q group is complete once at most one group is pending. fp16_both scales the Q tile
  // before anyone reads it: wait for Q's group, scale, and a second barrier so that no warp's
  // ldmatrix sees a row another thread has not scaled yet.
  if constexpr (T::kQkHalf || T::kQInRegisters) {
    ptx::cp_async_wait<1>();
    __syncthreads();
  }
  if constexpr (T::kQkHalf) {
    scale_q_tile<T>(s_q, scale_log2, tid);
    __syncthreads();
  }
  const float s_scale = T::kQkHalf ? 1.f : scale_log2;  // a score in log2 units

  // Q fragments, loaded once (D = 64).
  std::uint32_t q_frag[T::kMTiles][T::kDSteps][4];
  if constexpr (T::kQInRegisters) mma::load_q_fragments<T>(q_frag, q_lane);

  // The running state of the warp's rows: O = 0, m = −inf, l = 0.
  mma::OTiles<T> acc_o;
  float row_max[T::kMTiles][2];
  float row_sum[T::kMTiles][2];
  mma::init_rows<T>(acc_o, row_max, row_sum);

  // Where block j + 1 starts and how many of its rows exist: pointer increments, so the loop
  // does no 64-bit index arithmetic.
  const __half* k_next = k_head;
  const __half* v_next = v_head;
  int rows_left = n;
  for (int j = 0; j < n_blocks; ++j) {
    const int stage = j & 1;
    const int kv_start = j * T::kBlockN;

    // Block j is the only group in flight. After the barrier it is visible to every thread, and
    // every thread has finished block j − 1, so its stage can be refilled with block j + 1,
    // which then lands while this block is computed.
    ptx::cp_async_wait<0>();
    __syncthreads();
    if (j + 1 < n_blocks) {
      k_next += T::kBlockN * T::kHeadDim;
      v_next += T::kBlockN * T::kHeadDim;
      rows_left -= T::kBlockN;
      mma::load_tile<T, T::kBlockN>(s_k + (stage ^ 1) * T::kKVElems, k_next, rows_left, tid);
      mma::load_tile<T, T::kBlockN>(s_v + (stage ^ 1) * T::kKVElems, v_next, rows_left, tid);
      ptx::cp_async_commit();
    }

    mma::STiles<T> s;
    mma::gemm_qk<T>(s, q_frag, q_lane, s_k + stage * T::kKVElems + k_lane_offset);

    // Only the ragged last block and the blocks that reach past the warp's first row need the
    // element mask; the test is uniform across the warp.
    const bool ragged = kv_start + T::kBlockN > n;
    const bool diagonal = kCausal && kv_start + T::kBlockN - 1 > warp_row0;
    if (ragged || diagonal) mma::apply_mask<T, kCausal>(s, warp_row0, kv_start, n, g, t);

    mma::online_softmax<T>(s, row_max, row_sum, acc_o, s_scale);
    mma::gemm_pv<T>(acc_o, s, s_v + stage * T::kKVElems + v_lane_offset);
  }

  // Epilogue (step 05's): the quad reduction of the row sums, 1/l in fp32, O widened to fp32 for
  // the product and rounded once to fp16 on the store. Every stored row has l >= 1.
  const auto inv_sum = [&](int mi, int h) { return mma::quad_inverse_sum(row_sum[mi][h]); };
  mma::store_o<T>(o + head, acc_o, inv_sum, warp_row0, n, g, t);
}

// ---- Host side (the boilerplate is common/attention_launch.hpp's) ------------------------------
struct Fp16Accumulation {
  template <class T, bool kCausal>
  static void launch(const AttentionArgs& a, cudaStream_t stream) {
    mma::launch_kernel<T>(fp16_accumulation_kernel<T, kCausal>, mma::query_block_grid<T>(a.shape),
                          stream, "fp16_accumulation_kernel", a.q, a.k, a.v, a.o, a.shape.seqlen,
                          a.softmax_scale * kLog2e);
  }
  template <class T>
  static std::vector<ladder::KernelInfo> kernels(const char* variant) {
    const auto name = ladder::strprintf("fp16_accumulation_kernel<D=%d,%s", T::kHeadDim, variant);
    return mma::kernel_pair<T>(name + ">", name + ",causal>", fp16_accumulation_kernel<T, false>,
                               fp16_accumulation_kernel<T, true>);
  }
};

// kMinBlocks64: the launch bounds' CTAs per SM at D = 64 (D = 128 always takes 1). fp16 only (the
// default): there is no bf16 fp16-accumulate mma.
template <Accum kAccum, int kMinBlocks64 = 1>
ladder::Variant make_variant(const char* name, const char* description) {
  return mma::variant<Fp16Accumulation, Tile<64, kAccum, kMinBlocks64>, Tile<128, kAccum>>(
      name, description);
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
