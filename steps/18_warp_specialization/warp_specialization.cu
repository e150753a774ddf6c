// Step 18 — warp specialization: a producer warpgroup loads, two consumer warpgroups compute.
//
// In step 17 the thread that issues the TMA copies is also a consumer, and the ring is recycled
// by a __syncthreads at the end of every block: both consumer warpgroups meet there, and the
// issuing thread cannot refill a stage before the slower of them has finished with it. Here the
// CTA gets a third warpgroup whose only job is the copies (FlashAttention-3's layout):
//
//   * warpgroup 0, the producer: one thread loops over the blocks, waits until a stage is
//     empty, and issues its K and V copies onto the stage's "full" barrier;
//   * warpgroups 1 and 2, the consumers: wait until a stage is full, compute, and release the
//     stage on its "empty" barrier (one arrival per consumer warp) — no CTA-wide barrier
//     anywhere in the loop, so each consumer runs at its own pace and the loads run ahead of
//     both as far as the ring allows;
//   * setmaxnreg: the producer needs a handful of registers and the consumers all they can get.
//     The kernel starts capped at 168 per thread (384 threads, one CTA per SM); the producer
//     drops to 24 and the consumers rise to 240 (24·128 + 240·256 = 64512 of the SM's 65536).
//
// The empty barriers' protocol (mbarrier.cuh): the producer waits for parity ((i / kStages) & 1)
// ^ 1, which a fresh barrier reports complete, so the first lap through the ring does not wait.
//
// What stays from step 17: the tiles, the tensor maps, the consumer's arithmetic.
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
#include "common/device/hopper/tma.cuh"
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
  static constexpr int kWarpgroups = 2;  // consumers
  static constexpr int kThreads = (1 + kWarpgroups) * kWarpgroupThreads;  // + the producer
  static constexpr int kProducerRegisters = 24;
  static constexpr int kConsumerRegisters = 240;
  static constexpr int kBlockM = 64 * kWarpgroups;  // query rows per CTA
  static constexpr int kBlockN = 128;               // keys per K/V block
  static constexpr int kStages = 2;                 // K/V ring depth
  static constexpr std::uint32_t kQBytes = kBlockM * kHeadDim * sizeof(Element);
  static constexpr std::uint32_t kKVBytes = kBlockN * kHeadDim * sizeof(Element);
  static constexpr std::size_t kBarrierBytes = (1 + 2 * kStages) * sizeof(std::uint64_t);
  // + kSwizzleAlign: the dynamic shared memory base is rounded up to the swizzle atom (smem.cuh).
  static constexpr std::size_t kSmemBytes =
      kQBytes + 2 * kStages * kKVBytes + kBarrierBytes + hopper::kSwizzleAlign;
  static_assert(kHeadDim % 64 == 0 && kBlockM % kBlockN == 0);
  static_assert(kProducerRegisters * kWarpgroupThreads +
                    kConsumerRegisters * kWarpgroups * kWarpgroupThreads <= 65536);
};

// ---- The kernel -------------------------------------------------------------------------------
// grid (B·H, ceil(N / kBlockM)) with the query blocks numbered from the end (heaviest causal CTAs
// first, as in step 06's h200 variant).
template <class T, bool kCausal>
__global__ void __launch_bounds__(T::kThreads, 1)
    ws_kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
               const __grid_constant__ CUtensorMap tm_v, typename T::Element* __restrict__ o, int n,
               float scale_log2) {
#if LADDER_SM90A
  using Element = typename T::Element;
  extern __shared__ unsigned char smem_raw[];
  auto* smem = hopper::aligned_smem_base<Element>(smem_raw);
  Element* s_q = smem;                                    // [D/64][kBlockM][64]
  Element* s_k = s_q + T::kBlockM * T::kHeadDim;          // [kStages][D/64][kBlockN][64]
  Element* s_v = s_k + T::kStages * T::kBlockN * T::kHeadDim;
  constexpr int kKVElems = T::kBlockN * T::kHeadDim;
  auto* q_full = reinterpret_cast<std::uint64_t*>(s_v + T::kStages * kKVElems);
  std::uint64_t* kv_full = q_full + 1;             // [kStages]: the copies have landed
  std::uint64_t* kv_empty = kv_full + T::kStages;  // [kStages]: the consumers are done with it

  const int tid = threadIdx.x;
  const int warpgroup = tid / kWarpgroupThreads;
  const int warp_in_wg = (tid % kWarpgroupThreads) / 32;
  const int lane = tid % 32;
  const int g = lane / 4;
  const int t = lane % 4;

  const int m_block = int(gridDim.y - 1 - blockIdx.y);
  const int bh = int(blockIdx.x);
  const int q_start = m_block * T::kBlockM;
  const int consumer = warpgroup - 1;  // 0, 1 in the consumer warpgroups
  const int row0 = q_start + consumer * 64 + warp_in_wg * 16 + g;  // this thread's rows: row0, row0 + 8
  const std::int64_t head = std::int64_t(bh) * n * T::kHeadDim;

  const int kv_end = kCausal ? min(n, q_start + T::kBlockM) : n;
  const int n_blocks = ceil_div(kv_end, T::kBlockN);
  // Blocks [0, n_full) need no mask (they end before N and, causal, before the CTA's first row).
  const int n_full = kCausal ? min(n / T::kBlockN, q_start / T::kBlockN) : n / T::kBlockN;
  const int n_masked = n_blocks - n_full;

  // One thread sets up the barriers; the fence and the __syncthreads make them visible to the
  // other threads and to the copy engine before anyone uses them.
  if (tid == 0) {
    hopper::tma_prefetch_map(&tm_q);
    hopper::tma_prefetch_map(&tm_k);
    hopper::tma_prefetch_map(&tm_v);
    hopper::mbarrier_init(q_full, 1);
    for (int s = 0; s < T::kStages; ++s) {
      hopper::mbarrier_init(&kv_full[s], 1);
      hopper::mbarrier_init(&kv_empty[s], T::kWarpgroups * 4);  // one arrival per consumer warp
    }
    hopper::mbarrier_init_fence();
  }
  __syncthreads();

  // The i-th block in processing order (block n_blocks - 1 - i) into stage i % kStages: one
  // arrival announcing both tiles' bytes, then the two copies. Rows past N arrive as zeros and
  // count as bytes like the others, so a ragged block completes its phase too.
  auto issue_kv = [&](int i) {
    const int stage = i % T::kStages;
    const int kv_row = (n_blocks - 1 - i) * T::kBlockN;
    hopper::mbarrier_arrive_expect_tx(&kv_full[stage], 2 * T::kKVBytes);
    hopper::tma_load_tile(s_k + stage * kKVElems, &tm_k, &kv_full[stage], kv_row, bh);
    hopper::tma_load_tile(s_v + stage * kKVElems, &tm_v, &kv_full[stage], kv_row, bh);
  };

  if (warpgroup == 0) {
    // ---- Producer ----
    hopper::setmaxnreg_dec<T::kProducerRegisters>();
    if (tid == 0) {
      hopper::mbarrier_arrive_expect_tx(q_full, T::kQBytes);
      hopper::tma_load_tile(s_q, &tm_q, q_full, q_start, bh);
      for (int i = 0; i < n_blocks; ++i) {
        hopper::mbarrier_wait(&kv_empty[i % T::kStages], ((i / T::kStages) & 1) ^ 1);
        issue_kv(i);
      }
    }
    return;  // nothing after the split waits for the producer's threads
  }

  // ---- Consumers ----
  hopper::setmaxnreg_inc<T::kConsumerRegisters>();

  // Descriptor bases. Q: this warpgroup's 64 rows of each column block. K, V: stage 0.
  const std::uint32_t q_addr = ptx::smem_addr(s_q) + consumer * 64 * 128;
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

  hopper::mbarrier_wait(q_full, 0);

  auto process_block = [&](int i, auto masked) {
    const int block = n_blocks - 1 - i;
    const int stage = i % T::kStages;
    const int kv_start = block * T::kBlockN;

    // The copy engine's bytes for this stage have landed when the phase completes; what it
    // wrote is then visible to this thread (and to wgmma).
    hopper::mbarrier_wait(&kv_full[stage], (i / T::kStages) & 1);

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
      const bool diagonal = kCausal && kv_start + T::kBlockN - 1 > q_start + consumer * 64;
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

    // This warp's share of both products has completed (wait<0> above): release the stage.
    // One arrival per warp, after all its lanes are past the wait.
    __syncwarp();
    if (lane == 0) hopper::mbarrier_arrive(&kv_empty[stage]);
  };

  int i = 0;
  for (; i < n_masked; ++i) process_block(i, std::true_type{});
  for (; i < n_blocks; ++i) process_block(i, std::false_type{});

  hopper::finalize_rows<T::kHeadDim>(acc_o, row_sum);
  hopper::store_o_rows<T::kHeadDim>(acc_o, o + head, row0, n, t);
#elif defined(__CUDA_ARCH__)
  __trap();  // built without sm_90a: never reached (the variant refuses), never silent
#endif  // LADDER_SM90A
}

// ---- Host side --------------------------------------------------------------------------------
template <class T, bool kCausal>
void launch_tile(const AttentionArgs& args, cudaStream_t stream) {
  constexpr int kHeadDim = T::kHeadDim;
  const auto a = args.as<typename T::Element>();  // Q, K, V, O in the kernel's element type
  auto* kernel = ws_kernel<T, kCausal>;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  int(T::kSmemBytes)));
  const auto& sh = args.shape;
  const int bh = sh.batch * sh.heads;
  const CUtensorMap tm_q = hopper::make_attention_tensor_map(a.q, bh, sh.seqlen, kHeadDim, T::kBlockM);
  const CUtensorMap tm_k = hopper::make_attention_tensor_map(a.k, bh, sh.seqlen, kHeadDim, T::kBlockN);
  const CUtensorMap tm_v = hopper::make_attention_tensor_map(a.v, bh, sh.seqlen, kHeadDim, T::kBlockN);
  const dim3 grid(bh, ceil_div(sh.seqlen, T::kBlockM));
  kernel<<<grid, T::kThreads, T::kSmemBytes, stream>>>(tm_q, tm_k, tm_v, a.o, sh.seqlen,
                                                       args.softmax_scale * ladder::kLog2e);
  CUDA_CHECK_LAUNCH("ws_kernel");
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
    const auto name = ladder::strprintf("ws_kernel<D=%d,%dx%d,%d stages%s>", kHeadDim, T::kBlockM,
                                        T::kBlockN, T::kStages, type);
    out.push_back(ladder::kernel(name, ws_kernel<T, false>, T::kThreads, T::kSmemBytes).when_causal(false));
    out.push_back(ladder::kernel(name + " causal", ws_kernel<T, true>, T::kThreads, T::kSmemBytes).when_causal(true));
    out[out.size() - 2].dtype = out.back().dtype = ladder::dtype_of<Element>();
  };
  add.template operator()<__half>("");
  add.template operator()<__nv_bfloat16>(",bf16");
  return out;
}

LADDER_REGISTER_STEP(
    ladder::attention_step(18, "warp_specialization", "Warp specialization: a producer warpgroup, full/empty barriers, setmaxnreg", "17/tma")
        .add(ladder::attention_variant("ws", "17 with a TMA producer warpgroup (24 regs) and 2 consumers (240 regs)",
                                       launch)
                 .needs_sm(90)
                 .for_head_dims({64, 128})
                 .for_dtypes({ladder::DType::F16, ladder::DType::BF16})
                 .refuse_if([](const ladder::AttentionShape&) { return hopper::refuse_unless_sm90(); })
                 .with_kernels([](int d) { return d == 128 ? kernels<128>() : kernels<64>(); }))
        .main_is("ws"));

}  // namespace
