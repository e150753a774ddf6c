// Step 46 — the exponential budget at FP8: a quarter (or a half) of P's exponentials on the FMA
// pipes.
//
// FP8 doubles the tensor rate and leaves the exponentials where they were. Per score, Q·Kᵀ and P·V
// cost 4·D FLOPs: at D = 128 that is 512 e4m3 FLOPs, 1/16 of an SM's clock (8192 a clock), and
// one exponential, 1/16 of a clock of the MUFU unit (16 a clock). exp/MMA, 64/D at 16 bits, is
// 128/D now: 1 at D = 128, so the SM's MUFU is as busy as its tensor cores at the peak, and the
// ping-pong of step 19 can hide one warpgroup's softmax under the other's products only if the
// softmax takes no longer than they do (chapter 46 counts it).
//
// Part VII's answer (step 32, FlashAttention-4's) is to compute some of the exponentials without
// the MUFU unit: 2^x by range reduction and a cubic on the FMA pipes (common/exp2_poly.hpp),
// 8 issued instructions for MUFU's one. At 16 bits and D = 64 it lost: issue slots were as scarce
// as MUFU time. At FP8 and D = 128 the count is different (the chapter's table): the products take
// half the time of fp16's, so the MUFU share doubles while the issue share of the softmax stays.
// kPolyEvery picks the n8 column tiles j of S with j % kPolyEvery == kPolyEvery − 1 (4: a quarter,
// 2: a half; hopper::softmax_exp2). The cubic's 1.03e-4 relative error is a six-hundredth of an
// e4m3 step: P's rounding to e4m3 hides it.
//
// Everything else is step 45's kernel (its ldmatrix.trans transpose, the 4-stage ring, P·2^8).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "common/device/hopper/fp8.cuh"
#include "common/device/hopper/hopper.cuh"
#include "common/dtype.hpp"
#include "common/math.hpp"
#include "common/registry.hpp"
#include "common/strings.hpp"

namespace {

using ladder::AttentionArgs;
namespace hopper = ladder::hopper;
namespace ptx = ladder::ptx;

using hopper::kWarpgroupThreads;

template <int kPolyEvery_>
struct Tile {
  using Element = std::uint8_t;  // e4m3, as bytes (O is bf16)
  static constexpr int kPolyEvery = kPolyEvery_;  // hopper::softmax_exp2: 4 a quarter, 2 a half
  static constexpr int kHeadDim = 128;
  static constexpr int kConsumers = 2;
  static constexpr int kThreads = (1 + kConsumers) * kWarpgroupThreads;
  // The producer warpgroup now computes (the transpose): more than the 24 a lone TMA thread needs.
  static constexpr int kProducerRegisters = 48;
  static constexpr int kConsumerRegisters = 224;
  static constexpr int kTransposeWarps = 3;  // producer warps 1-3; warp 0 issues the copies
  static constexpr int kBlockM = 64 * kConsumers;
  static constexpr int kBlockN = 128;
  static constexpr int kStages = 4;  // the 32 KB an O staging buffer would take (fp8.cuh)
  using Storage = hopper::Fp8AttentionStorage<kHeadDim, kBlockM, kBlockN, kStages>;
  static constexpr std::size_t kSmemBytes = hopper::smem_bytes_for<Storage>;
  static_assert(kBlockM % kBlockN == 0);
  static_assert(kBlockN == ladder::kE4M3KeyBlock, "the low-precision reference rounds P block by block over kE4M3KeyBlock keys");
  static_assert(kSmemBytes <= 227 * 1024, "an H200 CTA has 227 KiB of shared memory");
  // setmaxnreg moves registers between warps of the CTA's own allocation: what the launch gave
  // each thread (65536 / kThreads, rounded down to 8: 168), not the SM's 65536. A consumer's
  // increase that the producer's decrease does not pay for waits for ever.
  static constexpr int kLaunchRegisters = (65536 / kThreads) / 8 * 8;
  static_assert(kProducerRegisters * kWarpgroupThreads +
                    kConsumerRegisters * kConsumers * kWarpgroupThreads <= kLaunchRegisters * kThreads);
};

// The descales as the kernel folds them: the per-tensor ones already in scale_log2 and inv_v;
// the per-head arrays (AttentionArgs::q_head_descale, ...) null unless the problem has them.
struct Fp8Scales {
  float scale_log2;    // softmax_scale · log2(e) · q_descale · k_descale
  float inv_v;         // 1 / v_descale
  const float* q_head;  // [B·H], or null
  const float* k_head;  // [B·Hkv]
  const float* v_head;  // [B·Hkv]
};

// ---- The kernel -------------------------------------------------------------------------------
// grid: Scheduler::grid_size (about one CTA per SM); 1 producer + 2 consumer warpgroups.
template <class Scheduler, class T, bool kCausal>
__global__ void __launch_bounds__(T::kThreads, 1)
    fp8_forward_kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
                       const __grid_constant__ CUtensorMap tm_v, const __grid_constant__ CUtensorMap tm_o,
                       const __grid_constant__ typename Scheduler::Params schedule, int n, int group,
                       const Fp8Scales scales, __nv_bfloat16* o) {
#if LADDER_SM90A
  extern __shared__ unsigned char smem_raw[];
  auto& st = hopper::aligned_smem<typename T::Storage>(smem_raw);

  const int tid = threadIdx.x;
  const int warpgroup = hopper::warpgroup_index();
  const int warp_in_wg = (tid % kWarpgroupThreads) / 32;
  const int lane = tid % 32;
  const int g = lane / 4;
  const int t = lane % 4;
  const int consumer = warpgroup - 1;

  if (tid == 0) {
    hopper::tma_prefetch_map(&tm_q);
    hopper::tma_prefetch_map(&tm_k);
    hopper::tma_prefetch_map(&tm_v);
    hopper::init_barriers(st, T::kConsumers);
    for (int s = 0; s < T::kStages; ++s) hopper::mbarrier_init(&st.vt_full[s], T::kTransposeWarps);
    hopper::mbarrier_init_fence();
  }
  __syncthreads();

  Scheduler scheduler(schedule, &st.q_full, &st.q_empty);
  if (warpgroup == 0) {
    // ---- Producer: warp 0's first thread copies, warps 1-3 transpose ----
    hopper::setmaxnreg_dec<T::kProducerRegisters>();
    if (tid == 0) {
      hopper::produce_tiles<T, kCausal>(st, scheduler, &tm_q, &tm_k, &tm_v, hopper::GroupedRows{n, group});
    } else if (warp_in_wg >= 1) {
      // The same tiles in the same order as the copies (a static schedule: a function of the
      // CTA's index), the same ring position: block `it` of the CTA is in stage it % kStages.
      int it = 0;
      for (auto w = scheduler.producer_first(); w.valid; w = scheduler.producer_next()) {
        const hopper::Span sp = hopper::span_of<T, kCausal>(w, n);
        for (int i = 0; i < sp.n_blocks; ++i, ++it) {
          const int stage = hopper::ring_stage<T::kStages>(it);
          // V has landed (kv_full), and Vᵀ's previous lap is free: kv_full's next phase needs the
          // consumers' release of this stage, which they give only after their P·V of it.
          hopper::wait_kv_block(st, it);
          hopper::transpose_v_block_matrices<T::kTransposeWarps>(st.v[stage], st.vt[stage], warp_in_wg - 1, lane);
          // The generic-proxy stores must be visible to wgmma (the async proxy) before the release.
          hopper::fence_proxy_async_smem();
          __syncwarp();
          if (lane == 0) hopper::mbarrier_arrive(&st.vt_full[stage]);
        }
      }
    }
    return;
  }

  // ---- Consumers ----
  hopper::setmaxnreg_inc<T::kConsumerRegisters>();

  constexpr int kTurnThreads = 2 * kWarpgroupThreads;
  auto wait_turn = [&] { hopper::named_barrier_sync<kTurnThreads>(hopper::turn_barrier(consumer)); };
  auto pass_turn = [&] { hopper::named_barrier_arrive<kTurnThreads>(hopper::turn_barrier(consumer ^ 1)); };
  if (consumer == 1) pass_turn();

  // Descriptors built once (step 33): this warpgroup's 64 rows of Q, K and Vᵀ at stage 0. All three
  // are K-major 128-byte rows now.
  const std::uint64_t q_desc = hopper::desc_k_major(ptx::smem_addr(st.q) + consumer * 64 * hopper::kFp8RowBytes);
  const std::uint64_t k_desc = hopper::desc_k_major(ptx::smem_addr(st.k));
  const std::uint64_t vt_desc = hopper::desc_k_major(ptx::smem_addr(st.vt));
  const int local_row0 = consumer * 64 + warp_in_wg * 16 + g;
  const bool store_thread = (tid % kWarpgroupThreads) == 0;  // releases the Q buffer

  float acc_o[T::kHeadDim / 2];
  float row_max[2];
  float row_sum[2];
  float s[T::kBlockN / 2];
  std::uint32_t p[T::kBlockN / 32][4];  // P of the previous block in e4m3: half step 33's registers
  float rescale[2];

  auto issue_s = [&](int stage) { hopper::issue_qk_e4m3(s, q_desc, hopper::desc_advance(k_desc, stage * T::Storage::kKVBytes)); };
  auto issue_pv = [&](int stage) { hopper::issue_pv_e4m3(acc_o, p, hopper::desc_advance(vt_desc, stage * T::Storage::kKVBytes)); };
  auto wait_vt = [&](int position) {
    hopper::mbarrier_wait(&st.vt_full[hopper::ring_stage<T::kStages>(position)], hopper::ring_parity<T::kStages>(position));
  };

  int it = 0;
  for (hopper::WorkTile w = scheduler.consumer_first(); w.valid; w = scheduler.consumer_next()) {
    const hopper::Span sp = hopper::span_of<T, kCausal>(w, n);
    const int row0 = sp.q_start + local_row0;
    // This tile's head's descales (a head of Q, its K/V head w.bh / group): the same address in
    // every thread, one broadcast load each.
    float scale_log2 = scales.scale_log2, inv_v_descale = scales.inv_v;
    if (scales.q_head != nullptr) {
      const int kv_bh = w.bh / group;
      scale_log2 *= scales.q_head[w.bh] * scales.k_head[kv_bh];
      inv_v_descale /= scales.v_head[kv_bh];
    }
#pragma unroll
    for (int i = 0; i < T::kHeadDim / 2; ++i) acc_o[i] = 0.f;
    row_max[0] = row_max[1] = -INFINITY;
    row_sum[0] = row_sum[1] = 0.f;

    auto softmax_block = [&](int i, auto masked) {
      if constexpr (decltype(masked)::value) {
        const int kv_start = (sp.n_blocks - 1 - i) * T::kBlockN;
        const bool ragged = kv_start + T::kBlockN > n;
        const bool diagonal = kCausal && kv_start + T::kBlockN - 1 > sp.q_start + consumer * 64;
        if (ragged || diagonal) hopper::mask_scores<T::kBlockN, kCausal>(s, row0, kv_start, n, t);
      }
      hopper::online_softmax<T::kBlockN, hopper::kPLog2Offset, T::kPolyEvery>(s, row_max, row_sum, scale_log2, rescale);
    };

    scheduler.wait_q();

    // Block 0: S_0 alone.
    hopper::wait_kv_block(st, it);
    wait_turn();
    hopper::wgmma_fence();
    issue_s(hopper::ring_stage<T::kStages>(it));
    hopper::wgmma_commit();
    pass_turn();
    hopper::wgmma_wait<0>();
    hopper::fence_registers(s);
    softmax_block(0, std::true_type{});
    hopper::p_to_a_e4m3<T::kBlockN>(s, p);

    // Block i: S_i and P_{i-1} V_{i-1}, the second once block i-1's Vᵀ is written.
    auto iteration = [&](int i, auto masked) {
      const int stage = hopper::ring_stage<T::kStages>(it + i);
      const int prev_stage = hopper::ring_stage<T::kStages>(it + i - 1);
      hopper::wait_kv_block(st, it + i);
      wait_vt(it + i - 1);
      wait_turn();
      hopper::wgmma_fence();
      issue_s(stage);
      hopper::wgmma_commit();
      issue_pv(prev_stage);
      hopper::wgmma_commit();
      pass_turn();
      hopper::wgmma_wait<1>();
      hopper::fence_registers(s);
      softmax_block(i, masked);
      hopper::wgmma_wait<0>();
      hopper::fence_registers(acc_o);
      hopper::release_kv_stage(st, prev_stage, lane);
      hopper::rescale_o<T::kHeadDim>(acc_o, rescale);
      hopper::p_to_a_e4m3<T::kBlockN>(s, p);
    };
    int i = 1;
    for (; i < sp.n_masked; ++i) iteration(i, std::true_type{});
    for (; i < sp.n_blocks; ++i) iteration(i, std::false_type{});

    const int last_stage = hopper::ring_stage<T::kStages>(it + sp.n_blocks - 1);
    wait_vt(it + sp.n_blocks - 1);
    wait_turn();
    hopper::wgmma_fence();
    issue_pv(last_stage);
    hopper::wgmma_commit();
    if (consumer == 0 || scheduler.may_have_next()) pass_turn();
    hopper::wgmma_wait<0>();
    hopper::fence_registers(acc_o);
    hopper::release_kv_stage(st, last_stage, lane);
    it += sp.n_blocks;

    // V's descale joins the division by l (a power of two: exact). l carries P's 2^8, as O does.
#pragma unroll
    for (int h = 0; h < 2; ++h) row_sum[h] *= inv_v_descale;
    hopper::store_o_rows_fp8<T::kHeadDim>(st, acc_o, row_sum, o + std::int64_t(w.bh) * n * T::kHeadDim, row0, n, t,
                                          consumer, store_thread);
  }
#elif defined(__CUDA_ARCH__)
  __trap();
#endif  // LADDER_SM90A
}

// ---- Host side --------------------------------------------------------------------------------
// Q, K, V as bytes in 128-byte rows (one column block at D = 128), O as bf16 in 64-row boxes of
// one 64-column block (unused: the epilogue stores from registers, store_o_rows_fp8).
template <class T>
hopper::ForwardMaps fp8_maps(const AttentionArgs& args) {
  const auto a = args.as_fp8();
  const auto& sh = args.shape;
  const int heads = sh.batch * sh.heads, kv_heads = sh.batch * sh.hkv(), n = sh.seqlen;
  return {hopper::make_attention_tensor_map(a.q, heads, n, T::kHeadDim, T::kBlockM),
          hopper::make_attention_tensor_map(a.k, kv_heads, n, T::kHeadDim, T::kBlockN),
          hopper::make_attention_tensor_map(a.v, kv_heads, n, T::kHeadDim, T::kBlockN),
          hopper::make_attention_tensor_map(a.o, heads, n, T::kHeadDim, 64, 1)};
}

template <class Scheduler, class T, bool kCausal>
void launch_tile(const AttentionArgs& args, cudaStream_t stream) {
  const auto& sh = args.shape;
  const hopper::ScheduleArgs sched = hopper::dense_schedule<T>(args, stream, sh.group());
  // Per-head descales come with the scalars at 1 (AttentionArgs' contract): each is folded once.
  const Fp8Scales scales{args.softmax_scale * ladder::kLog2e * args.q_descale * args.k_descale, 1.f / args.v_descale,
                         args.q_head_descale, args.k_head_descale, args.v_head_descale};
  hopper::launch_persistent<T>(fp8_forward_kernel<Scheduler, T, kCausal>, "fp8_forward_kernel",
                               Scheduler::grid_size(sched), fp8_maps<T>(args), Scheduler::make_params(sched),
                               stream, sh.seqlen, sh.group(), scales, args.as_fp8().o);
}

// Causal: the snake. Without a mask: the row walk, or GQA's group walk (the heads that read one
// K/V block side by side).
template <int kPolyEvery>
void launch(const AttentionArgs& a, cudaStream_t stream) {
  using T = Tile<kPolyEvery>;
  if (a.shape.causal) launch_tile<hopper::Snake, T, true>(a, stream);
  else if (a.shape.gqa()) launch_tile<hopper::GroupWalk, T, false>(a, stream);
  else launch_tile<hopper::RowWalk<false>, T, false>(a, stream);
}

template <int kPolyEvery>
std::vector<ladder::KernelInfo> kernels() {
  using T = Tile<kPolyEvery>;
  const auto name = ladder::strprintf("fp8_forward_kernel<D=%d,%dx%d,%d stages,e4m3,ldsm.t,exp2 1/%d on FMA>", T::kHeadDim,
                                      T::kBlockM, T::kBlockN, T::kStages, kPolyEvery);
  std::vector<ladder::KernelInfo> out;
  out.push_back(ladder::kernel(name, fp8_forward_kernel<hopper::RowWalk<false>, T, false>, T::kThreads,
                               T::kSmemBytes).when_causal(false));
  out.push_back(ladder::kernel(name + " gqa", fp8_forward_kernel<hopper::GroupWalk, T, false>, T::kThreads,
                               T::kSmemBytes).when_causal(false));
  out.push_back(ladder::kernel(name + " causal,snake", fp8_forward_kernel<hopper::Snake, T, true>,
                               T::kThreads, T::kSmemBytes).when_causal(true));
  for (auto& k : out) k.dtype = ladder::DType::E4M3;
  return out;
}

ladder::Variant fp8_variant(const char* name, const char* what, ladder::AttentionLaunch fn,
                            std::vector<ladder::KernelInfo> (*kernels_of)()) {
  return ladder::attention_variant(name, what, fn)
      .needs_sm(90)
      .for_head_dims({128})
      .for_dtypes({ladder::DType::E4M3})
      .serves({ladder::Feature::Gqa, ladder::Feature::HeadScales})
      .refuse_if([](const ladder::AttentionShape&) { return hopper::refuse_unless_sm90(); })
      .with_kernels([kernels_of](int) { return kernels_of(); });
}

// The kernels' order of work is step 45's, so the low-precision reference's (kE4M3KeyBlock keys a
// block, the last first) is theirs too; the cubic's error is far below P's e4m3 rounding.
constexpr int kPolyQuarter = 4;
constexpr int kPolyHalf = 2;

LADDER_REGISTER_STEP(
    ladder::attention_step(46, "fp8_exp_budget", "The exponential budget at FP8: part of P's exponentials on the FMA pipes", "45/fp8")
        .add(fp8_variant("poly_quarter", "45/fp8 with a quarter of P's exponentials (every 4th n8 column tile) as the cubic on the FMA pipes",
                         launch<kPolyQuarter>, kernels<kPolyQuarter>))
        .add(fp8_variant("poly_half", "45/fp8 with half of P's exponentials (every other n8 column tile) as the cubic",
                         launch<kPolyHalf>, kernels<kPolyHalf>)));

}  // namespace
