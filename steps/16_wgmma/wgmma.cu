// Step 16 — wgmma: both products of attention on Hopper's warpgroup MMA.
//
// Step 06 is FlashAttention-2 on mma.sync: a warp multiplies 16×16 by 16×8 tiles whose operands
// it has first copied from shared memory into registers with ldmatrix. On Hopper that instruction
// leaves part of the tensor cores' rate unused (docs/part4_hopper.md). This step changes only the
// instruction:
//
//   * S = Q Kᵀ is wgmma.m64nNk16 with both operands in shared memory, read by the tensor cores
//     through descriptors (no ldmatrix, no operand registers): each warpgroup (4 warps) computes
//     its 64 query rows × kBlockN keys in D/16 instructions.
//   * O += P V is wgmma with A = P from registers (the S accumulator converted to the element
//     type in place, as in FA2) and B = V from shared memory, read transposed by the hardware
//     (MN-major).
//
// What stays from step 06: cp.async loads into a two-stage K/V double buffer with one
// __syncthreads per block, reverse iteration with the masked blocks first, the online softmax.
// Shared tiles change from step 06's XOR swizzle to the 128-byte swizzle wgmma reads (the same
// idea, one layout: see common/device/hopper/wgmma.cuh), and each warp's 16 rows become each
// warpgroup's 64.
//
// CTA: 2 warpgroups × 64 query rows = kBlockM 128; K/V blocks of kBlockN = 128 keys.
//
// The element type (fp16 or bf16) is a template parameter from here on: only wgmma's type suffix,
// P's conversion to the A operand and O's to the output depend on it (common/device/hopper/).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "common/check.hpp"
#include "common/device/hopper/arch.cuh"
#include "common/device/hopper/attention.cuh"
#include "common/device/hopper/mbarrier.cuh"
#include "common/device/hopper/smem.cuh"
#include "common/device/hopper/wgmma.cuh"
#include "common/device/ptx.cuh"
#include "common/dispatch.hpp"
#include "common/math.hpp"
#include "common/registry.hpp"
#include "common/strings.hpp"

namespace {

using ladder::AttentionArgs;
using ladder::ceil_div;
namespace hopper = ladder::hopper;
namespace ptx = ladder::ptx;

constexpr int kWarpgroupThreads = 128;

template <int kHeadDim_, class Element_ = __half>
struct Tile {
  using Element = Element_;  // __half or __nv_bfloat16
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kWarpgroups = 2;
  static constexpr int kThreads = kWarpgroups * kWarpgroupThreads;
  static constexpr int kBlockM = 64 * kWarpgroups;  // query rows per CTA
  static constexpr int kBlockN = 128;               // keys per K/V block
  static constexpr int kStages = 2;                 // K/V double buffer
  static constexpr int kChunksPerRow = kHeadDim / 8;   // 16-byte chunks
  static constexpr std::uint32_t kQBytes = kBlockM * kHeadDim * sizeof(Element);
  static constexpr std::uint32_t kKVBytes = kBlockN * kHeadDim * sizeof(Element);
  // + kSwizzleAlign: the dynamic shared memory base is rounded up to the swizzle atom (smem.cuh).
  static constexpr std::size_t kSmemBytes =
      kQBytes + 2 * kStages * kKVBytes + hopper::kSwizzleAlign;
  static_assert(kHeadDim % 64 == 0 && kBlockM % kBlockN == 0);
  static_assert(kThreads % kChunksPerRow == 0 && (kThreads / kChunksPerRow) % 8 == 0);
};

// ---- Global -> shared, written in the 128-byte swizzle ------------------------------------
// Chunk c (16 bytes) of row r of a [rows][D] tile goes to column block c / 8, at chunk
// (c % 8) ^ (r % 8) of the row: the layout TMA produces in step 17 and wgmma reads. A thread's
// chunk and its row % 8 never change between passes, so the swizzled offset is computed once.
template <class T, int kRows, bool kCheckBounds>
__device__ __forceinline__ void load_tile(typename T::Element* smem, const typename T::Element* tile,
                                          int rows_left, int tid) {
  constexpr int kRowsPerPass = T::kThreads / T::kChunksPerRow;
  const int chunk = tid % T::kChunksPerRow;
  const int first_row = tid / T::kChunksPerRow;
  auto* dst = smem + (chunk / 8) * kRows * 64 + first_row * 64 + ((chunk % 8) ^ (first_row % 8)) * 8;
  const auto* src = tile + first_row * T::kHeadDim + chunk * 8;
#pragma unroll
  for (int pass = 0; pass < kRows / kRowsPerPass; ++pass) {
    const int row = first_row + pass * kRowsPerPass;
    if constexpr (kCheckBounds) {
      const bool valid = row < rows_left;  // rows past N: zero-filled from a valid address
      ptx::cp_async_16(dst + pass * kRowsPerPass * 64,
                       valid ? src + pass * kRowsPerPass * T::kHeadDim : tile, valid ? 16 : 0);
    } else {
      ptx::cp_async_16(dst + pass * kRowsPerPass * 64, src + pass * kRowsPerPass * T::kHeadDim);
    }
  }
}

// ---- The kernel -------------------------------------------------------------------------------
// grid (B·H, ceil(N / kBlockM)) with the query blocks numbered from the end (heaviest causal CTAs
// first, as in step 06's h200 variant).
template <class T, bool kCausal>
__global__ void __launch_bounds__(T::kThreads, 1)
    wgmma_kernel(const typename T::Element* __restrict__ q, const typename T::Element* __restrict__ k,
                 const typename T::Element* __restrict__ v, typename T::Element* __restrict__ o, int n,
                 float scale_log2) {
#if LADDER_SM90A
  using Element = typename T::Element;
  extern __shared__ unsigned char smem_raw[];
  auto* smem = hopper::aligned_smem_base<Element>(smem_raw);
  Element* s_q = smem;                                    // [D/64][kBlockM][64]
  Element* s_k = s_q + T::kBlockM * T::kHeadDim;          // [kStages][D/64][kBlockN][64]
  Element* s_v = s_k + T::kStages * T::kBlockN * T::kHeadDim;
  constexpr int kKVElems = T::kBlockN * T::kHeadDim;

  const int tid = threadIdx.x;
  const int warpgroup = tid / kWarpgroupThreads;
  const int warp_in_wg = (tid % kWarpgroupThreads) / 32;
  const int lane = tid % 32;
  const int g = lane / 4;
  const int t = lane % 4;

  const int m_block = int(gridDim.y - 1 - blockIdx.y);
  const int bh = int(blockIdx.x);
  const int q_start = m_block * T::kBlockM;
  const int row0 = q_start + warpgroup * 64 + warp_in_wg * 16 + g;  // this thread's rows: row0, row0 + 8
  const std::int64_t head = std::int64_t(bh) * n * T::kHeadDim;

  const int kv_end = kCausal ? min(n, q_start + T::kBlockM) : n;
  const int n_blocks = ceil_div(kv_end, T::kBlockN);
  // Blocks [0, n_full) need no mask (they end before N and, causal, before the CTA's first row).
  const int n_full = kCausal ? min(n / T::kBlockN, q_start / T::kBlockN) : n / T::kBlockN;
  const int n_masked = n_blocks - n_full;

  // Prologue: Q, then the last K/V block (the only one that can be ragged).
  const int last = n_blocks - 1;
  const std::int64_t last_offset = head + std::int64_t(last) * T::kBlockN * T::kHeadDim;
  load_tile<T, T::kBlockM, true>(s_q, q + head + std::int64_t(q_start) * T::kHeadDim, n - q_start, tid);
  load_tile<T, T::kBlockN, true>(s_k + (last & 1) * kKVElems, k + last_offset, n - last * T::kBlockN, tid);
  load_tile<T, T::kBlockN, true>(s_v + (last & 1) * kKVElems, v + last_offset, n - last * T::kBlockN, tid);
  ptx::cp_async_commit();

  // Descriptor bases. Q: this warpgroup's 64 rows of each column block. K, V: stage 0.
  const std::uint32_t q_addr = ptx::smem_addr(s_q) + warpgroup * 64 * 128;
  const std::uint32_t k_addr = ptx::smem_addr(s_k);
  const std::uint32_t v_addr = ptx::smem_addr(s_v);
  constexpr std::uint32_t kQColumnBlock = T::kBlockM * 128;   // bytes between column blocks
  constexpr std::uint32_t kKVColumnBlock = T::kBlockN * 128;
  constexpr std::uint32_t kStageBytes = T::kKVBytes;

  float acc_o[T::kHeadDim / 2];
#pragma unroll
  for (int i = 0; i < T::kHeadDim / 2; ++i) acc_o[i] = 0.f;
  float row_max[2] = {-INFINITY, -INFINITY};
  float row_sum[2] = {0.f, 0.f};

  auto process_block = [&](int block, auto masked) {
    const int stage = block & 1;
    const int kv_start = block * T::kBlockN;

    // The block's cp.async writes are complete in this thread; fence them into the async proxy
    // (wgmma reads shared memory through it), then the barrier publishes everyone's. The barrier
    // also proves every warpgroup's wgmma of the previous block has completed (each waited for
    // it), so the other stage may be overwritten.
    ptx::cp_async_wait<0>();
    hopper::fence_proxy_async_smem();
    __syncthreads();
    if (block > 0) {
      const std::int64_t next = head + std::int64_t(kv_start - T::kBlockN) * T::kHeadDim;
      load_tile<T, T::kBlockN, false>(s_k + (stage ^ 1) * kKVElems, k + next, T::kBlockN, tid);
      load_tile<T, T::kBlockN, false>(s_v + (stage ^ 1) * kKVElems, v + next, T::kBlockN, tid);
      ptx::cp_async_commit();
    }

    // S = Q Kᵀ: D/16 k-steps, each one wgmma over all kBlockN keys.
    float s[T::kBlockN / 2];
    const std::uint32_t k_stage = k_addr + stage * kStageBytes;
    hopper::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < T::kHeadDim / 16; ++kk) {
      const std::uint32_t col = (kk % 4) * 32;  // bytes into the 128-byte row
      hopper::Wgmma<T::kBlockN, Element>::ss(s, hopper::desc_k_major(q_addr + (kk / 4) * kQColumnBlock + col),
                                    hopper::desc_k_major(k_stage + (kk / 4) * kKVColumnBlock + col),
                                    kk > 0);
    }
    hopper::wgmma_commit();
    hopper::wgmma_wait<0>();
    hopper::fence_registers(s);

    if constexpr (decltype(masked)::value) {
      const bool ragged = kv_start + T::kBlockN > n;
      const bool diagonal = kCausal && kv_start + T::kBlockN - 1 > q_start + warpgroup * 64;
      if (ragged || diagonal) hopper::mask_scores<T::kBlockN, kCausal>(s, row0, kv_start, n, t);
    }
    float rescale[2];
    hopper::online_softmax<T::kBlockN>(s, row_max, row_sum, scale_log2, rescale);
    hopper::rescale_o<T::kHeadDim>(acc_o, rescale);
    std::uint32_t p[T::kBlockN / 16][4];
    hopper::p_to_a<T::kBlockN, Element>(s, p);

    // O += P V: kBlockN/16 k-steps of 16 keys; the V descriptor advances 16 rows (2048 bytes).
    const std::uint32_t v_stage = v_addr + stage * kStageBytes;
    hopper::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < T::kBlockN / 16; ++kk)
      hopper::Wgmma<T::kHeadDim, Element>::rs(acc_o, p[kk],
                                     hopper::desc_mn_major(v_stage + kk * 16 * 128, kKVColumnBlock));
    hopper::wgmma_commit();
    hopper::wgmma_wait<0>();
    hopper::fence_registers(acc_o);
  };

  int block = n_blocks - 1;
  for (int i = 0; i < n_masked; ++i, --block) process_block(block, std::true_type{});
  for (; block >= 0; --block) process_block(block, std::false_type{});

  hopper::finalize_rows<T::kHeadDim>(acc_o, row_sum);
  hopper::store_o_rows<T::kHeadDim>(acc_o, o + head, row0, n, t);
#elif defined(__CUDA_ARCH__)
  __trap();  // built without sm_90a: never reached (the variant refuses), never silent
#endif  // LADDER_SM90A
}

// ---- Host side --------------------------------------------------------------------------------
template <class T, bool kCausal>
void launch_tile(const AttentionArgs& args, cudaStream_t stream) {
  const auto a = args.as<typename T::Element>();  // Q, K, V, O in the kernel's element type
  auto* kernel = wgmma_kernel<T, kCausal>;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  int(T::kSmemBytes)));
  const auto& sh = args.shape;
  const dim3 grid(sh.batch * sh.heads, ceil_div(sh.seqlen, T::kBlockM));
  kernel<<<grid, T::kThreads, T::kSmemBytes, stream>>>(a.q, a.k, a.v, a.o, sh.seqlen,
                                                       args.softmax_scale * ladder::kLog2e);
  CUDA_CHECK_LAUNCH("wgmma_kernel");
}

template <class Element>
void launch_element(const AttentionArgs& a, cudaStream_t stream) {
  ladder::dispatch_head_dim<64, 128>(a.shape.head_dim, [&]<int kHeadDim>() {
    using T = Tile<kHeadDim, Element>;
    if (a.shape.causal) launch_tile<T, true>(a, stream);
    else launch_tile<T, false>(a, stream);
  });
}

void launch(const AttentionArgs& a, cudaStream_t stream) {
  if (a.shape.dtype == ladder::DType::BF16) launch_element<__nv_bfloat16>(a, stream);
  else launch_element<__half>(a, stream);
}

template <int kHeadDim>
std::vector<ladder::KernelInfo> kernels() {
  std::vector<ladder::KernelInfo> out;
  auto add = [&]<class Element>(const char* type) {
    using T = Tile<kHeadDim, Element>;
    const auto name = ladder::strprintf("wgmma_kernel<D=%d,%dx%d%s>", kHeadDim, T::kBlockM,
                                        T::kBlockN, type);
    out.push_back(ladder::kernel(name, wgmma_kernel<T, false>, T::kThreads, T::kSmemBytes).when_causal(false));
    out.push_back(ladder::kernel(name + " causal", wgmma_kernel<T, true>, T::kThreads, T::kSmemBytes).when_causal(true));
    out[out.size() - 2].dtype = out.back().dtype = ladder::dtype_of<Element>();
  };
  add.template operator()<__half>("");
  add.template operator()<__nv_bfloat16>(",bf16");
  return out;
}

LADDER_REGISTER_STEP(
    ladder::attention_step(16, "wgmma", "wgmma: both GEMMs on Hopper's warpgroup MMA", "06/h200")
        .add(ladder::attention_variant("wgmma", "2 warpgroups x 64 rows, 128-key blocks, cp.async double buffer",
                                       launch)
                 .needs_sm(90)
                 .for_head_dims({64, 128})
                 .for_dtypes({ladder::DType::F16, ladder::DType::BF16})
                 .refuse_if([](const ladder::AttentionShape&) { return hopper::refuse_unless_sm90(); })
                 .with_kernels([](int d) { return d == 128 ? kernels<128>() : kernels<64>(); }))
        .main_is("wgmma"));

}  // namespace
