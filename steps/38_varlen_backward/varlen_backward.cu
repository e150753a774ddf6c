// Step 38 — the varlen backward: a packed batch of sequences of any lengths.
//
// A training batch of documents of different lengths is packed end to end (cu_seqlens gives
// where each starts: Q, O, dO, dQ [total, H, D], K, V, dK, dV [total, Hkv, D]); padding every
// sequence to the longest would spend most of the work on padding. Step 37's kernel runs on it
// with three changes:
//
//   * the grid's x numbers the key blocks of every sequence, the longest sequences first
//     (VarlenBackwardPlan, a kernel parameter computed on the host): a CTA finds its sequence
//     and key block with one binary search;
//   * TMA maps over the packed tensors (hopper::make_varlen_tensor_map): a block's rows are
//     tokens start + m·kBlockM … of the sequence. Rows past the sequence's end belong to the next
//     one: keys past it are masked (P = 0) as keys past N were; queries past it have lse = +inf
//     in the padded statistics, so their P and dS are exactly 0 without a test;
//   * the statistics and the dQ accumulator are padded per sequence (backward_varlen.cuh):
//     a sequence's rows start at a multiple of kRowPad, so a block's lse and D are one bulk copy
//     and its dQ rows past the end add into the sequence's own padding, which the convert skips.
//
// The GQA group loop, the ring, the products, dQ's bulk reduce-adds: step 37's.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "common/check.hpp"
#include "common/device/backward_prep.cuh"
#include "common/device/backward_varlen.cuh"
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
// grid (plan.key_blocks, Hkv): a CTA per key block of a sequence and a K/V head.
template <class T, bool kCausal>
__global__ void __launch_bounds__(T::kThreads, 1)
    varlen_backward_kernel(const __grid_constant__ CUtensorMap tm_q,
                                const __grid_constant__ CUtensorMap tm_k,
                                const __grid_constant__ CUtensorMap tm_v,
                                const __grid_constant__ CUtensorMap tm_do,
                                const float* __restrict__ lse_log2, const float* __restrict__ d_rows,
                                float* __restrict__ dq_acc, typename T::Element* __restrict__ dk,
                                typename T::Element* __restrict__ dv, const int* __restrict__ cu_seqlens,
                                int heads, int kv_heads, float scale_log2, float scale,
                                const __grid_constant__ ladder::bwd::VarlenBackwardPlan plan) {
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
  const int hk = blockIdx.y;  // the K/V head
  const int group = heads / kv_heads;
  const int h_first = hk * group;  // the group's g-th query head is h_first + g
  // This CTA's sequence and key block; the sequence's tokens [start, start + n), its padded rows
  // of the statistics and dQ from pad (of total_pad a head).
  const int entry = plan.entry_of(blockIdx.x);
  const int seq = plan.order[entry];
  const int start = cu_seqlens[seq];
  const int n = cu_seqlens[seq + 1] - start;
  const int pad = plan.pad_start[seq];
  const int kv_start = (blockIdx.x - plan.block_start[entry]) * kBlockN;
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
      hopper::tma_load_tile(st.k, &tm_k, &st.kv_full, start + kv_start, hk);
      hopper::tma_load_tile(st.v, &tm_v, &st.kv_full, start + kv_start, hk);
      for (int g = 0; g < group; ++g) {  // the group's heads in order, each head's blocks in order
        const int h = h_first + g;
        // The block's statistics: its rows of the sequence's padding, m·kBlockM from pad.
        const float* lse_head = lse_log2 + std::int64_t(h) * plan.total_pad + pad;
        const float* d_head = d_rows + std::int64_t(h) * plan.total_pad + pad;
        for (int m = m_begin; m < m_end; ++m)
          hopper::load_query_stage_at<T::kQBytes, T::kRowBytes, kStages>(
              st, g * blocks_per_head + m - m_begin, &tm_q, &tm_do, start + m * kBlockM, h, lse_head + m * kBlockM,
              d_head + m * kBlockM);
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
        const int row = m * kBlockM + mb * 64 + (dq_warp % 4) * 16;  // inside the sequence's padding
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
    // The head's accumulator from the sequence's padded rows: DqLayout::offset of the block's rows
    // (below, from m·kBlockM) is taken from pad, a multiple of kRowPad, so the 64-row tiles stay whole.
    float* dq_head = dq_acc + (std::int64_t(h_first + g) * plan.total_pad + pad) * kHeadDim;
    const int position = g * blocks_per_head - m_begin;  // + m: the ring position of block m
    int m = m_begin;
    for (; m < m_masked_end; ++m) block(position + m, m, dq_head, std::true_type{});
    for (; m < m_end; ++m) block(position + m, m, dq_head, std::false_type{});
  }

  // Epilogue: dK = scale · Σ_h dS_hᵀ Q_h, dV = Σ_h P_hᵀ dO_h, of K/V head hk: rows of tokens
  // start + key, [total, Hkv, D]; rows past the sequence's end are not stored.
#pragma unroll
  for (int i = 0; i < kHeadDim / 2; ++i) acc_dk[i] *= scale;
  const std::int64_t first = (std::int64_t(start) * kv_heads + hk) * kHeadDim;
  const std::int64_t stride = std::int64_t(kv_heads) * kHeadDim;
  hopper::store_o_rows<kHeadDim>(acc_dk, dk + first, kv_start + key_local, n, t, stride);
  hopper::store_o_rows<kHeadDim>(acc_dv, dv + first, kv_start + key_local, n, t, stride);
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
    const bwd::VarlenBackwardPlan plan = bwd::make_varlen_backward_plan(sh, T::kBlockN);
    bwd::run_varlen<RowDot, Element, kHeadDim>(args, stream, plan, [&](const bwd::Workspace& ws) {
      auto map = [&](const Element* x, std::int64_t tokens, int heads, int rows) {
        return hopper::make_varlen_tensor_map(x, tokens, heads, kHeadDim, rows);
      };
      const dim3 grid(unsigned(plan.key_blocks), unsigned(sh.hkv()));
      bwd::launch_main<T>(varlen_backward_kernel<T, kCausal>, "varlen_backward_kernel", grid, stream,
                          map(a.q, sh.total_q(), sh.heads, T::kBlockM), map(a.k, sh.total_k(), sh.hkv(), T::kBlockN),
                          map(a.v, sh.total_k(), sh.hkv(), T::kBlockN), map(a.d_o, sh.total_q(), sh.heads, T::kBlockM),
                          ws.lse_log2, ws.delta, ws.dq_accum, a.dk, a.dv, args.cu_seqlens_q, sh.heads, sh.hkv(),
                          args.softmax_scale * ladder::kLog2e, args.softmax_scale, plan);
    });
  });
}

ladder::Variant variant(const char* name, const char* description) {
  auto rows = [=]<class Element, int kHeadDim>(std::vector<ladder::KernelInfo>& out, const char* type) {
    using T = TileOf<kHeadDim, Element>;
    using ladder::bwd::kPrepThreads;
    const auto main = ladder::strprintf("varlen_backward_kernel<D=%d,%dx%d%s>", kHeadDim, T::kBlockN, T::kBlockM, type);
    const std::size_t first = out.size();
    out.push_back(ladder::kernel(ladder::strprintf("varlen_backward_preprocess_kernel<D=%d%s>", kHeadDim, type),
                                 bwd::varlen_backward_preprocess_kernel<RowDot, Element, kHeadDim>, kPrepThreads));
    out.push_back(ladder::kernel(main, varlen_backward_kernel<T, false>, T::kThreads, T::kSmemBytes).when_causal(false));
    out.push_back(ladder::kernel(main + " causal", varlen_backward_kernel<T, true>, T::kThreads, T::kSmemBytes)
                      .when_causal(true));
    out.push_back(ladder::kernel(ladder::strprintf("varlen_backward_convert_dq_kernel<D=%d%s>", kHeadDim, type),
                                 bwd::varlen_backward_convert_dq_kernel<Element, kHeadDim>, kPrepThreads));
    for (std::size_t i = first; i < out.size(); ++i) out[i].dtype = ladder::dtype_of<Element>();
  };
  const auto no_semaphores = [](int) { return 0; };
  return bwd::variant<DqLayout>(name, description, launch, no_semaphores, rows)
      .serves({ladder::Feature::Gqa, ladder::Feature::Varlen})
      .needs_sm(90)
      .refuse_if([](const ladder::AttentionShape& s) -> std::optional<std::string> {
        if (auto why = hopper::refuse_unless_sm90()) return why;
        return bwd::varlen_backward_refusal(s);
      })
      .nondeterministic();  // dQ: float adds from every key block, in no fixed order
}

LADDER_REGISTER_STEP(
    ladder::backward_step(38, "varlen_backward",
                          "The varlen backward: a packed batch of sequences of any lengths",
                          "37/group_in_cta")
        .add(variant("packed",
                     "37/group_in_cta on a packed batch (cu_seqlens): a CTA per key block of a sequence, "
                     "the longest sequences first; statistics and dQ padded per sequence"))
        .main_is("packed"));

}  // namespace
