// Step 37 — the GQA backward: a K/V head's gradients summed over its group inside one CTA.
//
// With grouped-query attention a K/V head serves `group` query heads (h / group == hk), so its
// gradients are sums over all of them: dK_hk = Σ_h scale · dS_hᵀ Q_h, dV_hk = Σ_h P_hᵀ dO_h.
// FlashAttention-3 and -4 run one CTA per (key block, query head) and add each CTA's dK and dV
// into fp32 accumulators (a bulk reduce-add per tile, zeroed buffers, a convert kernel after);
// the sums are unordered and the accumulators cost 2·B·Hkv·N·D·4 bytes of traffic each way.
//
// Here one CTA owns a key block of one K/V head and walks the query blocks of every head of its
// group in turn, head after head: dK and dV stay in registers across the whole group, in group
// order (deterministic), and are stored once, in the element type. Nothing else is summed
// differently: dQ is per query head as before (its bulk reduce-adds over key blocks). The grid
// shrinks by the group (B·Hkv·ceil(N / 128) CTAs, each `group` times as long): at B = 2, Hkv = 8,
// N = 4096 that is 512 CTAs, 3.9 per SM.
//
// The ring does not notice: its positions run on from one head's query blocks to the next's, the
// producer loads each head's Q, dO, lse and D in the same order. Step 36's kernel otherwise (its
// shared_space variant: descriptors built once, the Storage reached as shared memory).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "common/check.hpp"
#include "common/device/backward_prep.cuh"
#include "common/device/hopper/backward.cuh"  // and the Part IV pieces: wgmma, TMA, mbarriers, ...
#include "common/device/ptx.cuh"
#include "common/math.hpp"
#include "common/registry.hpp"
#include "common/strings.hpp"

namespace {

using ladder::BackwardArgs;
using ladder::ceil_div;
namespace bwd = ladder::bwd;
namespace hopper = ladder::hopper;
namespace ptx = ladder::ptx;
using bwd::kRowPad;   // rows of the padded per-row buffers: a stage's statistics are one bulk copy
using DqLayout = bwd::DqFragments;  // the dQ accumulator in the consumers' fragment order
using RowDot = bwd::RowDot<32, true>;  // D_i: a warp a row, neighbouring lanes added first

constexpr int kWarpgroupThreads = 128;

template <int kHeadDim_, class Element_, int kBlockM_>
struct Tile {
  using Element = Element_;  // __half or __nv_bfloat16
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kConsumers = 2;                                   // consumer warpgroups
  static constexpr int kThreads = (1 + kConsumers) * kWarpgroupThreads;  // + the producer
  static constexpr int kProducerRegisters = 24;
  static constexpr int kConsumerRegisters = 240;
  static constexpr int kBlockN = 64 * kConsumers;  // keys per CTA: 64 per consumer warpgroup
  static constexpr int kBlockM = kBlockM_;         // query rows per ring stage
  static constexpr int kStages = 2;                // Q/dO ring depth
  static constexpr int kDsStages = 2;              // dSᵀ double-buffered: one barrier per block
  static constexpr int kDqChunk = 64;              // dQ columns per wgmma chain
  static constexpr int kDqWarpFloats = 16 * kDqChunk;  // a warp's rows of one dQ product
  static constexpr std::uint32_t kKVBytes = kBlockN * kHeadDim * sizeof(Element);  // K or V
  static constexpr std::uint32_t kQBytes = kBlockM * kHeadDim * sizeof(Element);   // Q or dO
  static constexpr std::uint32_t kDsBytes = kBlockN * kBlockM * sizeof(Element);   // one dSᵀ buffer
  static constexpr std::uint32_t kRowBytes = kBlockM * sizeof(float);              // lse or D
  static_assert(kHeadDim % kDqChunk == 0 && kBlockM % 64 == 0 && kRowPad % kBlockM == 0 &&
                kRowBytes % 16 == 0);
  static constexpr int kDqProducts = (kBlockM / 64) * (kHeadDim / kDqChunk);
  static_assert(kDqProducts % kConsumers == 0 && kDqProducts >= kConsumers);
  static_assert(kProducerRegisters * kWarpgroupThreads +
                    kConsumerRegisters * kConsumers * kWarpgroupThreads <= 65536);
  static_assert(kKVBytes % hopper::kSwizzleAlign == 0 && kQBytes % hopper::kSwizzleAlign == 0);

  struct Storage {
    alignas(hopper::kSwizzleAlign) Element k[kBlockN * kHeadDim];  // [D/64][kBlockN][64]
    alignas(hopper::kSwizzleAlign) Element v[kBlockN * kHeadDim];
    alignas(hopper::kSwizzleAlign) Element q[kStages][kBlockM * kHeadDim];  // [D/64][kBlockM][64]
    alignas(hopper::kSwizzleAlign) Element d_o[kStages][kBlockM * kHeadDim];
    alignas(hopper::kSwizzleAlign) Element ds[kDsStages][kBlockN * kBlockM];  // [kBlockM/64][kBlockN][64]
    alignas(16) float dq[kConsumers * kWarpgroupThreads / 32][kDqWarpFloats];
    alignas(16) float lse[kStages][kBlockM];  // lse·log2(e) of the stage's query rows
    alignas(16) float d[kStages][kBlockM];    // D_i of the stage's query rows
    std::uint64_t kv_full;                    // K and V have landed
    std::uint64_t full[kStages];              // stage s's Q, dO, lse, D have landed
    std::uint64_t empty[kStages];             // every consumer thread is done with stage s
  };
  static constexpr std::size_t kSmemBytes = hopper::smem_bytes_for<Storage>;
};

// ---- The main kernel ------------------------------------------------------------------------------
// grid (ceil(N / kBlockN), B·Hkv): a CTA per key block of a K/V head; the key blocks of one K/V
// head are dispatched together (step 25's head_by_head), so the resident CTAs add into the dQ
// accumulators of about two query heads at a time.
template <class T, bool kCausal>
__global__ void __launch_bounds__(T::kThreads, 1)
    gqa_backward_kernel(const __grid_constant__ CUtensorMap tm_q,
                                const __grid_constant__ CUtensorMap tm_k,
                                const __grid_constant__ CUtensorMap tm_v,
                                const __grid_constant__ CUtensorMap tm_do,
                                const float* __restrict__ lse_log2, const float* __restrict__ d_rows,
                                float* __restrict__ dq_acc, typename T::Element* __restrict__ dk,
                                typename T::Element* __restrict__ dv, int n, int n_pad, int heads,
                                int kv_heads, float scale_log2, float scale) {
#if LADDER_SM90A
  using Element = typename T::Element;
  constexpr int kBlockM = T::kBlockM;
  constexpr int kBlockN = T::kBlockN;
  constexpr int kHeadDim = T::kHeadDim;
  constexpr int kStages = T::kStages;
  constexpr int kEmptyArrivals = T::kConsumers * kWarpgroupThreads;  // every consumer thread
  extern __shared__ unsigned char smem_raw[];
  auto& st = hopper::aligned_smem_shared<typename T::Storage>(smem_raw);

  const int tid = threadIdx.x;
  const int warpgroup = hopper::warpgroup_index();
  const int bkv = blockIdx.y;  // (batch, K/V head)
  const int group = heads / kv_heads;
  // The group's g-th query head, (batch, h) with h = hk·group + g: the heads that read K/V head hk.
  const int bh_first = (bkv / kv_heads) * heads + (bkv % kv_heads) * group;
  const int kv_start = blockIdx.x * kBlockN;
  const int m_begin = kCausal ? kv_start / kBlockM : 0;  // causal: no block that ends before the keys
  const int m_end = ceil_div(n, kBlockM);
  const int blocks_per_head = m_end - m_begin;  // the ring's positions per query head
  if (tid == 0) hopper::init_backward_cta<kStages>(st, kEmptyArrivals, &tm_q, &tm_k, &tm_v, &tm_do);
  __syncthreads();

  if (warpgroup == 0) {
    // ---- Producer: K and V once, then the query blocks through the ring (step 25's) ----
    hopper::setmaxnreg_dec<T::kProducerRegisters>();
    if (tid == 0) {
      hopper::mbarrier_arrive_expect_tx(&st.kv_full, 2 * T::kKVBytes);
      hopper::tma_load_tile(st.k, &tm_k, &st.kv_full, kv_start, bkv);
      hopper::tma_load_tile(st.v, &tm_v, &st.kv_full, kv_start, bkv);
      for (int g = 0; g < group; ++g) {  // the group's heads in order, each head's blocks in order
        const int bh = bh_first + g;
        const float* lse_head = lse_log2 + std::int64_t(bh) * n_pad;
        const float* d_head = d_rows + std::int64_t(bh) * n_pad;
        for (int m = m_begin; m < m_end; ++m)
          hopper::load_query_stage<T::kQBytes, T::kRowBytes, kStages>(
              st, g * blocks_per_head + m - m_begin, &tm_q, &tm_do, m * kBlockM, bh, lse_head, d_head);
      }
    }
    return;
  }

  // ---- Consumers ----
  hopper::setmaxnreg_inc<T::kConsumerRegisters>();
  const int consumer = warpgroup - 1;
  const int warp_in_wg = (tid % kWarpgroupThreads) / 32;
  const int lane = tid % 32;
  const int t = lane % 4;
  const int key_local = consumer * 64 + warp_in_wg * 16 + lane / 4;  // this thread's key rows (and + 8)

  // Every operand's descriptor, built once. K and V as the A operand of Sᵀ and dPᵀ: this
  // warpgroup's 64 rows, K-major. Q and dO as B of Sᵀ and dPᵀ (K-major) and of dK and dV
  // (MN-major, one kBlockM-row column block apart), at ring stage 0. dSᵀ (MN-major, as A of dQ)
  // at buffer 0, and K (MN-major, as B of dQ).
  constexpr std::uint32_t kRow = hopper::kSwizzleRowBytes;
  const std::uint64_t k_rows_desc = hopper::desc_k_major(ptx::smem_addr(st.k) + consumer * 64 * kRow);
  const std::uint64_t v_rows_desc = hopper::desc_k_major(ptx::smem_addr(st.v) + consumer * 64 * kRow);
  const std::uint64_t q_desc = hopper::desc_k_major(ptx::smem_addr(st.q));
  const std::uint64_t do_desc = hopper::desc_k_major(ptx::smem_addr(st.d_o));
  const std::uint64_t q_mn_desc = hopper::desc_mn_major(ptx::smem_addr(st.q), kBlockM * kRow);
  const std::uint64_t do_mn_desc = hopper::desc_mn_major(ptx::smem_addr(st.d_o), kBlockM * kRow);
  const std::uint64_t ds_desc = hopper::desc_mn_major(ptx::smem_addr(st.ds), kBlockN * kRow);
  const std::uint64_t k_mn_desc = hopper::desc_mn_major(ptx::smem_addr(st.k), kBlockN * kRow);

  float acc_dk[kHeadDim / 2], acc_dv[kHeadDim / 2];
#pragma unroll
  for (int i = 0; i < kHeadDim / 2; ++i) acc_dk[i] = acc_dv[i] = 0.f;
  hopper::mbarrier_wait(&st.kv_full, 0);

  // Query block m of the group's g-th head, at ring position `it`; dK and dV accumulate on.
  auto block = [&](int it, int m, float* dq_head, auto masked) {
    const int stage = hopper::ring_stage<kStages>(it);
    const std::uint32_t stage_bytes = stage * T::kQBytes;
    hopper::mbarrier_wait(&st.full[stage], hopper::ring_parity<kStages>(it));
    float s[kBlockM / 2];   // Sᵀ, then Pᵀ
    float dp[kBlockM / 2];  // dPᵀ, then dSᵀ
    float dq[T::kDqChunk / 2];
    std::uint32_t p_a[kBlockM / 16][4];   // Pᵀ as the A operand of dV
    std::uint32_t ds_a[kBlockM / 16][4];  // dSᵀ as the A operand of dK

    // Sᵀ = K Qᵀ and dPᵀ = V dOᵀ, issued together; the exponential runs while dPᵀ is in flight.
    hopper::wgmma_fence();
    hopper::issue_qk_desc<kHeadDim, kBlockN, Element>(s, k_rows_desc, hopper::desc_advance(q_desc, stage_bytes));
    hopper::wgmma_commit();
    hopper::issue_qk_desc<kHeadDim, kBlockN, Element>(dp, v_rows_desc, hopper::desc_advance(do_desc, stage_bytes));
    hopper::wgmma_commit();
    hopper::wgmma_wait<1>();
    hopper::fence_registers(s);
    if constexpr (decltype(masked)::value)
      hopper::mask_keys<kBlockM, kCausal>(s, kv_start + key_local, m * kBlockM, n, t);
    hopper::p_from_lse<kBlockM>(s, st.lse[stage], scale_log2, t);  // Pᵀ = exp2(Sᵀ·scale·log2e − lse·log2e)
    hopper::wgmma_wait<0>();
    hopper::fence_registers(dp);
    hopper::ds_from_dp<kBlockM>(dp, s, st.d[stage], t);  // dSᵀ = Pᵀ ∘ (dPᵀ − D)
    hopper::p_to_a<kBlockM, Element>(s, p_a);
    hopper::p_to_a<kBlockM, Element>(dp, ds_a);

    // dSᵀ into its buffer for dQ (its readers of two blocks ago are done: see step 25).
    const int ds_stage = it % T::kDsStages;
    hopper::stage_a_rows<kBlockM, kBlockN>(ds_a, st.ds[ds_stage], key_local, t);
    hopper::fence_proxy_async_smem();

    // dV += Pᵀ dO; dK follows the first dQ product, so the tensor cores run it while the warps
    // write that product out.
    hopper::wgmma_fence();
    hopper::issue_pv_desc<kBlockM, Element>(acc_dv, p_a, hopper::desc_advance(do_mn_desc, stage_bytes));
    hopper::wgmma_commit();

    hopper::named_barrier_sync<T::kConsumers * kWarpgroupThreads>(int(hopper::NamedBarrier::kDsStaged));
#pragma unroll
    for (int i = 0; i < T::kDqProducts / T::kConsumers; ++i) {
      const int product = consumer + i * T::kConsumers;
      const int mb = product / (kHeadDim / T::kDqChunk);  // 64-query block of the stage
      const int c = product % (kHeadDim / T::kDqChunk);   // 64-column block of D
      hopper::wgmma_fence();
      hopper::issue_ds_k_desc<kBlockN, Element>(
          dq, hopper::desc_advance(ds_desc, ds_stage * T::kDsBytes + mb * kBlockN * kRow),
          hopper::desc_advance(k_mn_desc, c * kBlockN * kRow));
      hopper::wgmma_commit();
      if (i == 0) {
        hopper::issue_pv_desc<kBlockM, Element>(acc_dk, ds_a, hopper::desc_advance(q_mn_desc, stage_bytes));
        hopper::wgmma_commit();
        hopper::wgmma_wait<1>();
        hopper::fence_registers(acc_dv);
        hopper::fence_registers(p_a);
      } else {
        hopper::wgmma_wait<0>();
      }
      hopper::fence_registers(dq);
      const int dq_lane = int(threadIdx.x) % 32;
      const int dq_warp = int(threadIdx.x) / 32 - kWarpgroupThreads / 32;  // among the consumers
      hopper::reduce_add_dq_rows(dq, st.dq[dq_warp], dq_lane, [&] {
        const int row = m * kBlockM + mb * 64 + (dq_warp % 4) * 16;  // < n_pad: kBlockM divides kRowPad
        return dq_head + DqLayout::offset<kHeadDim>(row, c * T::kDqChunk);
      });
    }
    // dK is done: the stage may be refilled. Every thread releases its own reads (step 25).
    hopper::wgmma_wait<0>();
    hopper::fence_registers(acc_dk);
    hopper::fence_registers(ds_a);
    hopper::mbarrier_arrive(&st.empty[stage]);
  };

  // Masked blocks first: keys past N, or (causal) the query blocks that straddle the diagonal.
  const bool ragged_keys = kv_start + kBlockN > n;
  const int m_masked_end = ragged_keys ? m_end
                           : kCausal ? min(m_end, ceil_div(kv_start + kBlockN - 1, kBlockM))
                                     : m_begin;
  for (int g = 0; g < group; ++g) {
    float* dq_head = dq_acc + std::int64_t(bh_first + g) * n_pad * kHeadDim;
    const int position = g * blocks_per_head - m_begin;  // + m: the ring position of block m
    int m = m_begin;
    for (; m < m_masked_end; ++m) block(position + m, m, dq_head, std::true_type{});
    for (; m < m_end; ++m) block(position + m, m, dq_head, std::false_type{});
  }

  // Epilogue: dK = scale · Σ_h dS_hᵀ Q_h, dV = Σ_h P_hᵀ dO_h, of K/V head bkv; rows past N are not stored.
#pragma unroll
  for (int i = 0; i < kHeadDim / 2; ++i) acc_dk[i] *= scale;
  const std::int64_t head = std::int64_t(bkv) * n * kHeadDim;
  hopper::store_o_rows<kHeadDim>(acc_dk, dk + head, kv_start + key_local, n, t);
  hopper::store_o_rows<kHeadDim>(acc_dv, dv + head, kv_start + key_local, n, t);
  if (lane == 0) hopper::tma_store_wait_all();  // the last reduce, before shared memory goes
#elif defined(__CUDA_ARCH__)
  __trap();  // built without sm_90a: never reached (the variant refuses), never silent
#endif  // LADDER_SM90A
}

// ---- Host side --------------------------------------------------------------------------------
template <int kHeadDim>
inline constexpr int kBlockMOf = kHeadDim == 64 ? 128 : 64;  // step 25's two_consumers tiles
template <int kHeadDim, class Element>
using TileOf = Tile<kHeadDim, Element, kBlockMOf<kHeadDim>>;

void launch(const BackwardArgs& args, cudaStream_t stream) {
  bwd::dispatch(args, [&]<class Element, int kHeadDim, bool kCausal>() {
    using T = TileOf<kHeadDim, Element>;
    const auto a = args.as<Element>();
    const auto& sh = args.shape;
    const int n = sh.seqlen;
    const int heads = sh.batch * sh.heads, kv_heads = sh.batch * sh.hkv();
    bwd::run<RowDot, DqLayout, Element, kHeadDim>(args, stream, 0, [&](const bwd::Workspace& ws) {
      auto map = [&](const Element* x, int bh, int rows) {
        return hopper::make_attention_tensor_map(x, bh, n, kHeadDim, rows);
      };
      const dim3 grid(unsigned(ceil_div(n, T::kBlockN)), unsigned(kv_heads));
      bwd::launch_main<T>(gqa_backward_kernel<T, kCausal>, "gqa_backward_kernel", grid, stream,
                          map(a.q, heads, T::kBlockM), map(a.k, kv_heads, T::kBlockN), map(a.v, kv_heads, T::kBlockN),
                          map(a.d_o, heads, T::kBlockM), ws.lse_log2, ws.delta, ws.dq_accum, a.dk, a.dv, n,
                          bwd::padded_rows(n), sh.heads, sh.hkv(), args.softmax_scale * ladder::kLog2e,
                          args.softmax_scale);
    });
  });
}

ladder::Variant variant(const char* name, const char* description) {
  auto rows = [=]<class Element, int kHeadDim>(std::vector<ladder::KernelInfo>& out, const char* type) {
    using T = TileOf<kHeadDim, Element>;
    const auto main = ladder::strprintf("gqa_backward_kernel<D=%d,%dx%d%s>", kHeadDim, T::kBlockN, T::kBlockM, type);
    bwd::add_kernel_rows<RowDot, DqLayout, T>(out, type, main, gqa_backward_kernel<T, false>,
                                              gqa_backward_kernel<T, true>);
  };
  const auto no_semaphores = [](int) { return 0; };
  return bwd::variant<DqLayout>(name, description, launch, no_semaphores, rows)
      .serves({ladder::Feature::Gqa})
      .batch_heads_on_grid_yz()
      .needs_sm(90)
      .refuse_if([](const ladder::AttentionShape&) { return hopper::refuse_unless_sm90(); })
      .nondeterministic();  // dQ: float adds from every key block, in no fixed order
}

LADDER_REGISTER_STEP(
    ladder::backward_step(37, "gqa_backward",
                          "The GQA backward: a K/V head's dK and dV summed over its group inside one CTA",
                          "36/shared_space")
        .add(variant("group_in_cta",
                     "36/shared_space with a CTA per key block of a K/V head, walking the query blocks of "
                     "every head of its group: dK and dV summed in registers, in group order"))
        .main_is("group_in_cta"));

}  // namespace
