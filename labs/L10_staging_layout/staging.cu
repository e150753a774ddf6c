// Lab 10's kernel (given, do not edit): step 07's design (chapter 07) with the staging buffers S
// and P in YOUR layout (layout.hpp), beside the same kernel in the naive layout.
//
// 128 threads, Br = 32, Bc = 64, D = 64 or 128, causal or not, any N. Q, K and V are XOR-swizzled
// as in step 07's v3, so the only shared-memory traffic whose banks are in question is S's and
// P's, and it goes through exactly the four instructions of lab10.hpp, at the addresses the
// model counts:
//   S = Q Kᵀ (mma.sync, 2 × 2 warp grid) -> the S store -> __syncthreads -> the softmax (the S
//   read, the P store, one row per warp at a time) -> __syncthreads -> O += P V (the P read).
// The two variants registered as step 60 differ only in the layout: `yours` and `naive`.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <vector>

// <>, not "": your layout or the solution's, whichever folder the build put first on the include
// path (labs/CMakeLists.txt).
#include <layout.hpp>

#include "common/check.hpp"
#include "common/device/mma_fragments.cuh"
#include "common/device/ptx.cuh"
#include "common/device/swizzle.cuh"
#include "common/registry.hpp"
#include "common/strings.hpp"
#include "labs/L10_staging_layout/lab10.hpp"

namespace {

using ladder::AttentionArgs;
using ladder::ceil_div;
namespace ptx = ladder::ptx;
namespace frag = ladder::frag;
using lab10::kCols;
using lab10::kRows;
using lab10::kThreads;

struct YourLayout {
  static constexpr int kSFloats = layout::kSFloats;
  static constexpr int kPHalves = layout::kPHalves;
  __host__ __device__ static constexpr int s_index(int row, int col) { return layout::s_index(row, col); }
  __host__ __device__ static constexpr int p_index(int row, int col) { return layout::p_index(row, col); }
};
// (Its sizes are the model's check 1, not a static_assert: the checker says what is wrong.)

template <int kHeadDim_, class L>
struct Config {
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kPvCols = kHeadDim / 2;  // head dims of O per warp
  static constexpr int kPvTiles = kPvCols / 8;
  static constexpr int kQBytes = kRows * kHeadDim * 2;
  static constexpr int kKVBytes = kCols * kHeadDim * 2;
  static constexpr int kPBytes = ceil_div(L::kPHalves * 2, 128) * 128;  // S starts 128-byte aligned
  static constexpr int kSBytes = L::kSFloats * 4;
  static constexpr std::size_t kSmemBytes = std::size_t(kQBytes) + 2 * kKVBytes + kPBytes + kSBytes + 3 * kRows * 4;
};

// Q, K, V: row-major rows of D halves, 16-byte chunks XOR-swizzled (step 07's v3).
template <int kHeadDim>
__device__ __forceinline__ int qkv_offset(int row, int col) {
  return row * kHeadDim + ladder::swizzle::xor_col(col, row & 7);
}

template <class C, int kTileRows>
__device__ __forceinline__ void load_tile(__half* smem, const __half* tile, int rows_left, int tid) {
  constexpr int kChunks = C::kHeadDim / 8, kRowsPerPass = kThreads / kChunks;
#pragma unroll
  for (int pass = 0; pass < kTileRows / kRowsPerPass; ++pass) {
    const int row = tid / kChunks + pass * kRowsPerPass, chunk = tid % kChunks;
    const bool valid = row < rows_left;
    ptx::cp_async_16(smem + qkv_offset<C::kHeadDim>(row, chunk * 8), valid ? tile + row * C::kHeadDim + chunk * 8 : tile,
                     valid ? 16 : 0);
  }
}

// S = Q Kᵀ for the warp's 16 rows × 32 keys, then the S store (lab10::s_store).
template <class C, class L>
__device__ __forceinline__ void gemm_qk(float* s_s, const __half* s_q, const __half* s_k, int warp, int lane) {
  const int row0 = 16 * (warp / 2), key0 = 32 * (warp % 2);
  float acc[4][4] = {};
#pragma unroll
  for (int kk = 0; kk < C::kHeadDim / 16; ++kk) {
    std::uint32_t a[4];
    ptx::ldmatrix_x4(a, s_q + qkv_offset<C::kHeadDim>(row0 + frag::ldsm_a_row(lane), kk * 16 + frag::ldsm_a_col(lane)));
#pragma unroll
    for (int np = 0; np < 2; ++np) {
      std::uint32_t b[4];
      ptx::ldmatrix_x4(b, s_k + qkv_offset<C::kHeadDim>(key0 + np * 16 + frag::ldsm_b_row(lane),
                                                        kk * 16 + frag::ldsm_b_col(lane)));
      const std::uint32_t b_lo[2] = {b[0], b[1]}, b_hi[2] = {b[2], b[3]};
      ptx::mma_m16n8k16_f32(acc[2 * np], a, b_lo);
      ptx::mma_m16n8k16_f32(acc[2 * np + 1], a, b_hi);
    }
  }
#pragma unroll
  for (int i = 0; i < lab10::kSStores; ++i) {
    const lab10::Coord c = lab10::s_store(warp, lane, i);
    *reinterpret_cast<float2*>(s_s + L::s_index(c.row, c.col)) = make_float2(acc[i / 2][2 * (i % 2)], acc[i / 2][2 * (i % 2) + 1]);
  }
}

// The online softmax, one row per warp at a time: the S read, the row's max and sum by shuffles,
// the P store; lane 0 keeps the row's max, previous max and sum in shared memory. Keys past N and
// above the diagonal (causal) are −inf; key 0 is visible to every row, so the first block gives
// every row a finite max.
template <class L, bool kCausal>
__device__ __forceinline__ void softmax(const float* s_s, __half* s_p, float* s_max, float* s_max_prev, float* s_sum,
                                        int warp, int lane, int q_start, int kv_start, int n, float scale) {
#pragma unroll 1
  for (int r = 0; r < kRows / lab10::kWarps; ++r) {
    float x[2];
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      const lab10::Coord at = lab10::s_load(warp, lane, 2 * r + c);
      const int key_end = kCausal ? min(n, q_start + at.row + 1) : n;
      x[c] = kv_start + at.col < key_end ? s_s[L::s_index(at.row, at.col)] * scale : -INFINITY;
    }
    const int row = lab10::s_load(warp, lane, 2 * r).row;
    float m = fmaxf(x[0], x[1]);
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) m = fmaxf(m, __shfl_xor_sync(frag::kFullMask, m, offset));
    const float m_old = s_max[row], m_new = fmaxf(m_old, m);
    float p[2], sum = 0.f;
#pragma unroll
    for (int c = 0; c < 2; ++c) sum += p[c] = __expf(x[c] - m_new);
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(frag::kFullMask, sum, offset);
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      const lab10::Coord at = lab10::p_store(warp, lane, 2 * r + c);
      s_p[L::p_index(at.row, at.col)] = __float2half_rn(p[c]);
    }
    __syncwarp();  // every lane has read the old max before lane 0 replaces it
    if (lane == 0) {
      s_max_prev[row] = m_old;
      s_max[row] = m_new;
      s_sum[row] = s_sum[row] * __expf(m_old - m_new) + sum;
    }
  }
}

// O = O · exp(m_prev − m) + P V for the warp's 16 rows × D/2 head dims; the P read is lab10::p_ldsm.
template <class C, class L>
__device__ __forceinline__ void gemm_pv(float (&acc_o)[C::kPvTiles][4], const __half* s_p, const __half* s_v,
                                        const float* s_max, const float* s_max_prev, int warp, int lane) {
  const int row0 = 16 * (warp / 2), dim0 = C::kPvCols * (warp % 2);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = row0 + frag::group_of(lane) + 8 * h;
    const float rescale = __expf(s_max_prev[row] - s_max[row]);
#pragma unroll
    for (int nd = 0; nd < C::kPvTiles; ++nd) acc_o[nd][2 * h] *= rescale, acc_o[nd][2 * h + 1] *= rescale;
  }
#pragma unroll
  for (int kk = 0; kk < lab10::kPLdsm; ++kk) {
    std::uint32_t a[4];
    const lab10::Coord at = lab10::p_ldsm(warp, lane, kk);
    ptx::ldmatrix_x4(a, s_p + L::p_index(at.row, at.col));
#pragma unroll
    for (int dp = 0; dp < C::kPvTiles / 2; ++dp) {
      std::uint32_t b[4];
      ptx::ldmatrix_x4_trans(b, s_v + qkv_offset<C::kHeadDim>(kk * 16 + frag::ldsm_a_row(lane),
                                                              dim0 + dp * 16 + frag::ldsm_a_col(lane)));
      const std::uint32_t b_lo[2] = {b[0], b[1]}, b_hi[2] = {b[2], b[3]};
      ptx::mma_m16n8k16_f32(acc_o[2 * dp], a, b_lo);
      ptx::mma_m16n8k16_f32(acc_o[2 * dp + 1], a, b_hi);
    }
  }
}

// Grid (ceil(N / 32), B·H). Commit groups as in step 07: {Q, K0}, {V0}, then per block {next K}, {next V}.
template <class C, class L, bool kCausal>
__global__ void __launch_bounds__(kThreads)
    staging_kernel(const __half* __restrict__ q, const __half* __restrict__ k, const __half* __restrict__ v,
                   __half* __restrict__ o, int n, float scale) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  __half* s_q = reinterpret_cast<__half*>(smem_raw);
  __half* s_k = reinterpret_cast<__half*>(smem_raw + C::kQBytes);
  __half* s_v = reinterpret_cast<__half*>(smem_raw + C::kQBytes + C::kKVBytes);
  __half* s_p = reinterpret_cast<__half*>(smem_raw + C::kQBytes + 2 * C::kKVBytes);
  float* s_s = reinterpret_cast<float*>(smem_raw + C::kQBytes + 2 * C::kKVBytes + C::kPBytes);
  float* s_max = s_s + L::kSFloats;
  float* s_max_prev = s_max + kRows;
  float* s_sum = s_max_prev + kRows;

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int q_start = blockIdx.x * kRows;
  const std::int64_t head = std::int64_t(blockIdx.y) * n * C::kHeadDim;
  const int kv_end = kCausal ? min(n, q_start + kRows) : n;
  const int n_blocks = ceil_div(kv_end, kCols);

  if (tid < kRows) s_max[tid] = -INFINITY, s_sum[tid] = 0.f;
  load_tile<C, kRows>(s_q, q + head + std::int64_t(q_start) * C::kHeadDim, n - q_start, tid);
  load_tile<C, kCols>(s_k, k + head, n, tid);
  ptx::cp_async_commit();
  load_tile<C, kCols>(s_v, v + head, n, tid);
  ptx::cp_async_commit();

  float acc_o[C::kPvTiles][4] = {};
#pragma unroll 1
  for (int block = 0; block < n_blocks; ++block) {
    const int kv_start = block * kCols;
    const bool has_next = block + 1 < n_blocks;
    const std::int64_t next = head + std::int64_t(kv_start + kCols) * C::kHeadDim;
    ptx::cp_async_wait<1>();
    __syncthreads();  // K landed; the previous P V is done with P and the statistics
    gemm_qk<C, L>(s_s, s_q, s_k, warp, lane);
    __syncthreads();  // S complete; K free
    if (has_next) load_tile<C, kCols>(s_k, k + next, n - kv_start - kCols, tid);
    ptx::cp_async_commit();
    softmax<L, kCausal>(s_s, s_p, s_max, s_max_prev, s_sum, warp, lane, q_start, kv_start, n, scale);
    ptx::cp_async_wait<1>();
    __syncthreads();  // P and the statistics written; V landed
    gemm_pv<C, L>(acc_o, s_p, s_v, s_max, s_max_prev, warp, lane);
    __syncthreads();  // V and P free
    if (has_next) load_tile<C, kCols>(s_v, v + next, n - kv_start - kCols, tid);
    ptx::cp_async_commit();
  }

  const int row0 = 16 * (warp / 2), dim0 = C::kPvCols * (warp % 2);
  const int g = frag::group_of(lane), t = frag::thread_in_group(lane);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = row0 + g + 8 * h;
    if (q_start + row >= n) continue;
    const float inv_sum = 1.f / s_sum[row];
    __half* dst = o + head + std::int64_t(q_start + row) * C::kHeadDim + dim0 + 2 * t;
#pragma unroll
    for (int nd = 0; nd < C::kPvTiles; ++nd)
      *reinterpret_cast<__half2*>(dst + nd * 8) = __floats2half2_rn(acc_o[nd][2 * h] * inv_sum, acc_o[nd][2 * h + 1] * inv_sum);
  }
}

template <class C, class L, bool kCausal>
void launch_config(const AttentionArgs& a, cudaStream_t stream) {
  auto* kernel = staging_kernel<C, L, kCausal>;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(C::kSmemBytes)));
  const dim3 grid(ceil_div(a.shape.seqlen, kRows), a.shape.batch * a.shape.heads);
  kernel<<<grid, kThreads, C::kSmemBytes, stream>>>(a.q, a.k, a.v, a.o, a.shape.seqlen, a.softmax_scale);
  CUDA_CHECK_LAUNCH("staging_kernel");
}

template <class L>
void launch(const AttentionArgs& a, cudaStream_t stream) {
  const bool causal = a.shape.causal;
  switch (a.shape.head_dim) {
    case 64: return causal ? launch_config<Config<64, L>, L, true>(a, stream) : launch_config<Config<64, L>, L, false>(a, stream);
    case 128: return causal ? launch_config<Config<128, L>, L, true>(a, stream) : launch_config<Config<128, L>, L, false>(a, stream);
    default: throw std::invalid_argument(ladder::strprintf("lab 10: head_dim %d not instantiated", a.shape.head_dim));
  }
}

template <int kHeadDim, class L>
std::vector<ladder::KernelInfo> kernel_pair(const char* name) {
  using C = Config<kHeadDim, L>;
  const auto label = ladder::strprintf("%s<D=%d>", name, kHeadDim);
  return {ladder::kernel(label, staging_kernel<C, L, false>, kThreads, C::kSmemBytes).when_causal(false),
          ladder::kernel(label + " causal", staging_kernel<C, L, true>, kThreads, C::kSmemBytes).when_causal(true)};
}

template <class L>
ladder::Variant make_variant(const char* name, const char* description) {
  return ladder::attention_variant(name, description, launch<L>)
      .needs_sm(80)  // cp.async, ldmatrix, mma.sync.m16n8k16
      .for_head_dims({64, 128})
      .batch_heads_on_grid_yz()
      .with_kernels([name](int d) { return d == 128 ? kernel_pair<128, L>(name) : kernel_pair<64, L>(name); });
}

LADDER_REGISTER_STEP(
    ladder::attention_step(60, "lab_staging_layout", "Lab 10: the bank conflicts of a staging layout", "07/v3")
        .add(make_variant<YourLayout>("yours", "step 07's design, S and P in your layout (layout.hpp)"))
        .add(make_variant<lab10::NaiveLayout>("naive", "the same kernel, S and P dense row-major"))
        .main_is("yours"));

}  // namespace
