// Step 19 — overlap: the softmax runs while the tensor cores work (FlashAttention-3's two schedules).
//
// In step 18 a consumer warpgroup alternates: tensor cores busy (S = Q Kᵀ), then idle while it
// computes the softmax on the CUDA cores and the special-function unit (exp2), then busy again
// (O += P V). The exponentials alone run far below the tensor cores' rate, so the tensor cores
// idle for a large part of every block. Two changes hide it:
//
//   * Within a warpgroup (software pipelining): in iteration i the warpgroup issues S_i = Q K_iᵀ
//     and then O += P_{i-1} V_{i-1} before doing anything else, waits only for S_i
//     (wgmma_wait<1>: at most the P·V group still in flight), and computes softmax(S_i) while
//     P_{i-1} V_{i-1} runs. O is rescaled after that product completes. The cost: S_i and P_{i-1}
//     are live together (64 + 32 registers at 128 keys).
//   * Between the two warpgroups (ping-pong): each takes its turn to issue its GEMMs, in strict
//     alternation, through two named barriers. While one warpgroup's GEMMs occupy the tensor
//     cores, the other computes its softmax:
//
//        WG1:  [GEMMs i  ][softmax i ][GEMMs i+1][softmax i+1] ...
//        WG2:  ...........[GEMMs i  ][softmax i ][GEMMs i+1 ] ...
//
//     Turn-taking: consumer c waits on its turn barrier (turn_barrier(c), barriers.cuh; bar.sync,
//     256 threads) before issuing, and after issuing arrives on the other's (bar.arrive, its 128
//     threads). Consumer 1 arrives once up front so that consumer 0 goes first, and skips its very
//     last arrival, so that every bar.sync meets exactly one bar.arrive (n_blocks + 1 turns each).
//
// What stays from step 18: the producer, the ring, the tiles and the arithmetic. The variants
// are the ablation (registration block): the in-warpgroup overlap alone, with the ping-pong, and
// with a third ring stage — with the overlap a warpgroup holds K_i and V_{i-1} at once, so with two
// stages the producer has no stage to fill ahead of it.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "common/check.hpp"
#include "common/device/hopper/arch.cuh"
#include "common/device/hopper/attention.cuh"
#include "common/device/hopper/barriers.cuh"
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

template <int kHeadDim_, int kStages_, bool kPingPong_, class Element_ = __half>
struct Tile {
  using Element = Element_;  // __half or __nv_bfloat16
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kWarpgroups = 2;  // consumers
  static constexpr int kThreads = (1 + kWarpgroups) * kWarpgroupThreads;  // + the producer
  static constexpr int kProducerRegisters = 24;
  static constexpr int kConsumerRegisters = 240;
  static constexpr int kBlockM = 64 * kWarpgroups;  // query rows per CTA
  static constexpr int kBlockN = 128;               // keys per K/V block
  static constexpr int kStages = kStages_;          // K/V ring depth
  static constexpr bool kPingPong = kPingPong_;     // consumers take turns issuing their GEMMs
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
    pingpong_kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
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

  // Ping-pong turns: turn_barrier(c) is "consumer c may issue its GEMMs".
  constexpr int kTurnThreads = 2 * kWarpgroupThreads;
  auto wait_turn = [&] {
    if constexpr (T::kPingPong)
      hopper::named_barrier_sync<kTurnThreads>(hopper::turn_barrier(consumer));
  };
  auto pass_turn = [&] {
    if constexpr (T::kPingPong)
      hopper::named_barrier_arrive<kTurnThreads>(hopper::turn_barrier(consumer ^ 1));
  };
  if (consumer == 1) pass_turn();  // consumer 0 issues first

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

  // The two products, issued without waiting; the caller commits.
  auto issue_s = [&](float (&s)[T::kBlockN / 2], int stage) {
    const std::uint32_t k_stage = k_addr + stage * kStageBytes;
#pragma unroll
    for (int kk = 0; kk < T::kHeadDim / 16; ++kk) {
      const std::uint32_t col = (kk % 4) * 32;  // bytes into the 128-byte row
      hopper::Wgmma<T::kBlockN, Element>::ss(s, hopper::desc_k_major(q_addr + (kk / 4) * kQColumnBlock + col),
                                    hopper::desc_k_major(k_stage + (kk / 4) * kKVColumnBlock + col),
                                    kk > 0);
    }
  };
  auto issue_pv = [&](const std::uint32_t (&p)[T::kBlockN / 16][4], int stage) {
    const std::uint32_t v_stage = v_addr + stage * kStageBytes;
#pragma unroll
    for (int kk = 0; kk < T::kBlockN / 16; ++kk)
      hopper::Wgmma<T::kHeadDim, Element>::rs(acc_o, p[kk],
                                     hopper::desc_mn_major(v_stage + kk * 16 * 128, kKVColumnBlock));
  };
  // One warp's arrival per stage, once its lanes are past the wait for the product that read it.
  auto release = [&](int stage) {
    __syncwarp();
    if (lane == 0) hopper::mbarrier_arrive(&kv_empty[stage]);
  };
  // Mask (where the block can need it) and online softmax of block i; returns O's rescale.
  auto softmax_block = [&](float (&s)[T::kBlockN / 2], int i, auto masked, float (&rescale)[2]) {
    if constexpr (decltype(masked)::value) {
      const int kv_start = (n_blocks - 1 - i) * T::kBlockN;
      const bool ragged = kv_start + T::kBlockN > n;
      const bool diagonal = kCausal && kv_start + T::kBlockN - 1 > q_start + consumer * 64;
      if (ragged || diagonal) hopper::mask_scores<T::kBlockN, kCausal>(s, row0, kv_start, n, t);
    }
    hopper::online_softmax<T::kBlockN>(s, row_max, row_sum, scale_log2, rescale);
  };

  float s[T::kBlockN / 2];
  std::uint32_t p[T::kBlockN / 16][4];  // P of the previous block, the A operand in flight
  float rescale[2];

  // Block 0 (in processing order): S_0 alone. O is still zero, so its rescale is moot.
  hopper::mbarrier_wait(&kv_full[0], 0);
  wait_turn();
  hopper::wgmma_fence();
  issue_s(s, 0);
  hopper::wgmma_commit();
  pass_turn();
  hopper::wgmma_wait<0>();
  hopper::fence_registers(s);
  softmax_block(s, 0, std::true_type{}, rescale);
  hopper::p_to_a<T::kBlockN, Element>(s, p);

  // Block i: issue S_i and P_{i-1} V_{i-1}; softmax(S_i) under the second product.
  auto iteration = [&](int i, auto masked) {
    const int stage = i % T::kStages;
    const int prev_stage = (i - 1) % T::kStages;
    hopper::mbarrier_wait(&kv_full[stage], (i / T::kStages) & 1);
    wait_turn();
    hopper::wgmma_fence();
    issue_s(s, stage);
    hopper::wgmma_commit();
    issue_pv(p, prev_stage);
    hopper::wgmma_commit();
    pass_turn();
    hopper::wgmma_wait<1>();  // S_i is done; P_{i-1} V_{i-1} may still run
    hopper::fence_registers(s);
    softmax_block(s, i, masked, rescale);
    // What runs under P_{i-1} V_{i-1} is up to ptxas. P overwrites S's accumulator registers in
    // place: written to separate registers, it makes ptxas serialize every wgmma (warning C7513;
    // docs/19_pingpong.md).
    hopper::wgmma_wait<0>();  // P_{i-1} V_{i-1} is done: O and p may be touched, V_{i-1} freed
    hopper::fence_registers(acc_o);
    release(prev_stage);
    hopper::rescale_o<T::kHeadDim>(acc_o, rescale);
    hopper::p_to_a<T::kBlockN, Element>(s, p);
  };
  int i = 1;
  for (; i < n_masked; ++i) iteration(i, std::true_type{});
  for (; i < n_blocks; ++i) iteration(i, std::false_type{});

  // The last P·V. Consumer 1's last turn passes nothing: consumer 0 has no turn left to take.
  const int last_stage = (n_blocks - 1) % T::kStages;
  wait_turn();
  hopper::wgmma_fence();
  issue_pv(p, last_stage);
  hopper::wgmma_commit();
  if (consumer == 0) pass_turn();
  hopper::wgmma_wait<0>();
  hopper::fence_registers(acc_o);
  release(last_stage);

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
  auto* kernel = pingpong_kernel<T, kCausal>;
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
  CUDA_CHECK_LAUNCH("pingpong_kernel");
}

template <int kStages, bool kPingPong, class Element>
void launch_element(const AttentionArgs& a, cudaStream_t stream) {
  ladder::dispatch_head_dim<64, 128>(a.shape.head_dim, [&]<int kHeadDim>() {
    using T = Tile<kHeadDim, kStages, kPingPong, Element>;
    if (a.shape.causal) launch_tile<T, true>(a, stream);
    else launch_tile<T, false>(a, stream);
  });
}

template <int kStages, bool kPingPong>
void launch(const AttentionArgs& a, cudaStream_t stream) {
  if (a.shape.dtype == ladder::DType::BF16) launch_element<kStages, kPingPong, __nv_bfloat16>(a, stream);
  else launch_element<kStages, kPingPong, __half>(a, stream);
}

template <int kHeadDim, int kStages, bool kPingPong>
std::vector<ladder::KernelInfo> kernels() {
  std::vector<ladder::KernelInfo> out;
  auto add = [&]<class Element>(const char* type) {
    using T = Tile<kHeadDim, kStages, kPingPong, Element>;
    const auto name = ladder::strprintf("pingpong_kernel<D=%d,%dx%d,%d stages%s%s>", kHeadDim,
                                        T::kBlockM, T::kBlockN, T::kStages,
                                        kPingPong ? "" : ",no ping-pong", type);
    out.push_back(ladder::kernel(name, pingpong_kernel<T, false>, T::kThreads, T::kSmemBytes).when_causal(false));
    out.push_back(ladder::kernel(name + " causal", pingpong_kernel<T, true>, T::kThreads, T::kSmemBytes).when_causal(true));
    out[out.size() - 2].dtype = out.back().dtype = ladder::dtype_of<Element>();
  };
  add.template operator()<__half>("");
  add.template operator()<__nv_bfloat16>(",bf16");
  return out;
}

template <int kStages, bool kPingPong>
ladder::Variant variant(const char* name, const char* description) {
  return ladder::attention_variant(name, description, launch<kStages, kPingPong>)
      .needs_sm(90)
      .for_head_dims({64, 128})
      .for_dtypes({ladder::DType::F16, ladder::DType::BF16})
      .refuse_if([](const ladder::AttentionShape&) { return hopper::refuse_unless_sm90(); })
      .with_kernels([](int d) {
        return d == 128 ? kernels<128, kStages, kPingPong>() : kernels<64, kStages, kPingPong>();
      });
}

// The ablation: the in-warpgroup overlap alone, then with the ping-pong, then with a third ring
// stage (with the overlap, a warpgroup holds two stages at once: K_i and V_{i-1}).
LADDER_REGISTER_STEP(
    ladder::attention_step(19, "pingpong", "Overlap: softmax under the GEMMs, in-warpgroup and ping-pong", "18/ws")
        .add(variant<2, false>("overlap", "18 + S_i issued with P_{i-1}V_{i-1}, softmax(S_i) under the second"))
        .add(variant<2, true>("pingpong", "+ the 2 consumers take turns issuing their GEMMs (named barriers)"))
        .add(variant<3, true>("pingpong_3stage", "+ a 3-stage K/V ring"))
        .main_is("pingpong_3stage"));  // the fastest measured (docs/19_pingpong.md)

}  // namespace
