// Step 47 — wider key blocks at FP8: 192 keys a block where step 45 takes 128.
//
// Step 45's profile (chapter 46) found no unit saturated: the tensor pipe busy 40% of the time,
// the issue slots 48%, and the warps waiting on latency, on the mbarriers of the ring, on the
// ping-pong's named barrier and on the wgmma wait. Each of those waits is paid once a K/V block,
// and at FP8 a block's products take half the time they took at 16 bits, so the same waits weigh
// twice as much. A wider block pays them once for more work: at 192 keys, once for 1.5× the
// products and exponentials. FlashAttention-3's FP8 forward at D = 128 takes 128 × 224 blocks
// with two stages for the same reason (tile_size.h).
//
// What it costs, and what had to change:
//   - shared memory: a 192-key stage holds K, V and Vᵀ, 80 KB; two stages fit with Q (176 KB),
//     three would not (256). Step 45's slack of four stages for the producer's transpose is gone;
//     `two_stages` is step 45's 128-key kernel with that ring alone, the ablation that tells the
//     ring's share of the difference from the block's;
//   - Vᵀ of 192 keys is no longer one 128-byte swizzled row a head dim: it lies in two 128-key
//     tiles side by side, the second half used (fp8_layout.hpp's vt_offset). A k32 slice never
//     straddles the two, so P·V's six instructions each read one tile with step 45's descriptor,
//     moved to the tile (issue_pv_e4m3), and the transpose's stores move the same way;
//   - registers: S is 96 floats a thread where it was 64, P 24 words where it was 16;
//   - S takes one m64n192k32 instruction a k step (wgmma_e4m3_ss with 96 accumulators);
//   - the low-precision reference follows the kernel's blocks: P is rounded against the running
//     max of 192-key blocks (Variant::rounds_p_in_blocks_of), or the rule would compare the
//     kernel's roundings with another order's (common/reference.cpp says why that matters).
// The causal mask keeps the same code: a 192-key block crosses the diagonal of a 128-row tile
// in more places, and span_of counts the masked blocks for any block size.
//
// `three_stages` gives the wide block back a deeper ring (the chapter's exercise 2): V's raw buffer,
// which only the transposers read, gets a ring of its own of two stages, and Vᵀ is packed (its last
// 64 keys in a 64-byte-swizzled tile behind the first 128: fp8_layout.hpp's vt_offset_packed), so
// that K and Vᵀ take three stages of 48 KB (208 KB with Q). The consumers wait for K alone
// (kv_full), the transposers for V (v_full) and release it (v_empty); P·V reads the packed tile
// with two descriptors (issue_pv_e4m3_packed).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>
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

template <int kBlockN_, int kStages_, int kVStages_ = kStages_>
struct Tile {
  using Element = std::uint8_t;  // e4m3, as bytes (O is bf16)
  static constexpr int kHeadDim = 128;
  static constexpr int kConsumers = 2;
  static constexpr int kThreads = (1 + kConsumers) * kWarpgroupThreads;
  // The producer warpgroup now computes (the transpose): more than the 24 a lone TMA thread needs.
  static constexpr int kProducerRegisters = 48;
  static constexpr int kConsumerRegisters = 224;
  static constexpr int kTransposeWarps = 3;  // producer warps 1-3; warp 0 issues the copies
  static constexpr int kBlockM = 64 * kConsumers;
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kStages = kStages_;
  static constexpr int kVStages = kVStages_;              // V's own ring, when it differs
  static constexpr bool kSplitV = kVStages_ != kStages_;  // V in a ring of its own, Vᵀ packed
  using Storage = std::conditional_t<kSplitV, hopper::Fp8SplitRingStorage<kHeadDim, kBlockM, kBlockN, kStages, kVStages_>,
                                     hopper::Fp8AttentionStorage<kHeadDim, kBlockM, kBlockN, kStages>>;
  static constexpr std::size_t kSmemBytes = hopper::smem_bytes_for<Storage>;
  static_assert(kSmemBytes <= 227 * 1024, "an H200 CTA has 227 KiB of shared memory");
  // setmaxnreg moves registers between warps of the CTA's own allocation: what the launch gave
  // each thread (65536 / kThreads, rounded down to 8: 168), not the SM's 65536. A consumer's
  // increase that the producer's decrease does not pay for waits for ever.
  static constexpr int kLaunchRegisters = (65536 / kThreads) / 8 * 8;
  static_assert(kProducerRegisters * kWarpgroupThreads +
                    kConsumerRegisters * kConsumers * kWarpgroupThreads <= kLaunchRegisters * kThreads);
};

// The step's tile, and its ablation: step 45's block with this step's two-stage ring; then the
// wide block with three K/Vᵀ stages and two of V.
using WideTile = Tile<192, 2>;
using TwoStageTile = Tile<128, 2>;
using SplitRingTile = Tile<192, 3, 2>;

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
    fp8_wide_keys_kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
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
    if constexpr (T::kSplitV)
      for (int s = 0; s < T::kVStages; ++s) {
        hopper::mbarrier_init(&st.v_full[s], 1);
        hopper::mbarrier_init(&st.v_empty[s], T::kTransposeWarps);
      }
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
          // V has landed, and Vᵀ's previous lap is free. In one ring (kv_full): kv_full's next phase
          // needs the consumers' release of this stage, which they give only after their P·V of it.
          // With V in its own ring (v_full): its copy was issued after the producer saw this stage
          // released (load_kv_block).
          const int v_stage = T::kSplitV ? hopper::ring_stage<T::kVStages>(it) : stage;
          if constexpr (T::kSplitV)
            hopper::mbarrier_wait(&st.v_full[v_stage], hopper::ring_parity<T::kVStages>(it));
          else
            hopper::wait_kv_block(st, it);
          const std::uint8_t* v = st.v[v_stage];
          hopper::transpose_v_block_matrices<T::kTransposeWarps, T::kBlockN, T::kHeadDim, T::kSplitV>(
              v, st.vt[stage], warp_in_wg - 1, lane);
          // The generic-proxy stores must be visible to wgmma (the async proxy) before the release.
          hopper::fence_proxy_async_smem();
          __syncwarp();
          if (lane == 0) {
            hopper::mbarrier_arrive(&st.vt_full[stage]);
            // Every load of V is done (its registers are stored): V's stage may be refilled.
            if constexpr (T::kSplitV) hopper::mbarrier_arrive(&st.v_empty[v_stage]);
          }
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
  // are K-major 128-byte rows; a stage of K is kKVBytes on, of Vᵀ kVtBytes (two tiles at 192 keys).
  const std::uint64_t q_desc = hopper::desc_k_major(ptx::smem_addr(st.q) + consumer * 64 * hopper::kFp8RowBytes);
  const std::uint64_t k_desc = hopper::desc_k_major(ptx::smem_addr(st.k));
  const std::uint64_t vt_desc = hopper::desc_k_major(ptx::smem_addr(st.vt));
  // The packed Vᵀ's 64-key tile (three_stages only): 64-byte rows, the 64-byte swizzle.
  const std::uint64_t vt_tail_desc = hopper::desc_k_major_rows<64>(ptx::smem_addr(st.vt) + ladder::fp8::kVtTileBytes);
  const int local_row0 = consumer * 64 + warp_in_wg * 16 + g;
  const bool store_thread = (tid % kWarpgroupThreads) == 0;  // releases the Q buffer

  float acc_o[T::kHeadDim / 2];
  float row_max[2];
  float row_sum[2];
  float s[T::kBlockN / 2];
  std::uint32_t p[T::kBlockN / 32][4];  // P of the previous block in e4m3: half step 33's registers
  float rescale[2];

  auto issue_s = [&](int stage) { hopper::issue_qk_e4m3(s, q_desc, hopper::desc_advance(k_desc, stage * T::Storage::kKVBytes)); };
  auto issue_pv = [&](int stage) {
    const std::uint32_t offset = stage * T::Storage::kVtBytes;
    if constexpr (T::kSplitV)
      hopper::issue_pv_e4m3_packed(acc_o, p, hopper::desc_advance(vt_desc, offset), hopper::desc_advance(vt_tail_desc, offset));
    else hopper::issue_pv_e4m3(acc_o, p, hopper::desc_advance(vt_desc, offset));
  };
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
      hopper::online_softmax<T::kBlockN, hopper::kPLog2Offset>(s, row_max, row_sum, scale_log2, rescale);
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
  hopper::launch_persistent<T>(fp8_wide_keys_kernel<Scheduler, T, kCausal>, "fp8_wide_keys_kernel",
                               Scheduler::grid_size(sched), fp8_maps<T>(args), Scheduler::make_params(sched),
                               stream, sh.seqlen, sh.group(), scales, args.as_fp8().o);
}

// Causal: the snake. Without a mask: the row walk, or GQA's group walk (the heads that read one
// K/V block side by side).
template <class T>
void launch(const AttentionArgs& a, cudaStream_t stream) {
  if (a.shape.causal) launch_tile<hopper::Snake, T, true>(a, stream);
  else if (a.shape.gqa()) launch_tile<hopper::GroupWalk, T, false>(a, stream);
  else launch_tile<hopper::RowWalk<false>, T, false>(a, stream);
}

template <class T>
std::vector<ladder::KernelInfo> kernels() {
  const auto name = ladder::strprintf("fp8_wide_keys_kernel<D=%d,%dx%d,%d stages%s,e4m3>", T::kHeadDim, T::kBlockM,
                                      T::kBlockN, T::kStages, T::kSplitV ? " (V: 2, Vt packed)" : "");
  std::vector<ladder::KernelInfo> out;
  out.push_back(ladder::kernel(name, fp8_wide_keys_kernel<hopper::RowWalk<false>, T, false>, T::kThreads,
                               T::kSmemBytes).when_causal(false));
  out.push_back(ladder::kernel(name + " gqa", fp8_wide_keys_kernel<hopper::GroupWalk, T, false>, T::kThreads,
                               T::kSmemBytes).when_causal(false));
  out.push_back(ladder::kernel(name + " causal,snake", fp8_wide_keys_kernel<hopper::Snake, T, true>, T::kThreads,
                               T::kSmemBytes).when_causal(true));
  for (auto& k : out) k.dtype = ladder::DType::E4M3;
  return out;
}

// P is rounded against the running max of the kernel's own key blocks: the low reference follows.
template <class T>
ladder::Variant fp8_variant(const char* name, const char* what) {
  return ladder::attention_variant(name, what, launch<T>)
      .needs_sm(90)
      .for_head_dims({128})
      .for_dtypes({ladder::DType::E4M3})
      .serves({ladder::Feature::Gqa, ladder::Feature::HeadScales})
      .rounds_p_in_blocks_of(T::kBlockN)
      .refuse_if([](const ladder::AttentionShape&) { return hopper::refuse_unless_sm90(); })
      .with_kernels([](int) { return kernels<T>(); });
}

LADDER_REGISTER_STEP(
    ladder::attention_step(47, "fp8_wide_keys", "FP8 with 192-key blocks: the per-block waits paid once for 1.5x the work", "45/fp8")
        .add(fp8_variant<WideTile>("wide", "45/fp8 with 128x192 tiles: S by m64n192k32, Vt in two 128-key tiles, a 2-stage ring (176 KB)"))
        .add(fp8_variant<TwoStageTile>("two_stages", "45/fp8 with the 2-stage ring of 47/wide and 45's 128-key blocks: the ring's share, apart")
                 .compared_with("45/fp8"))
        .add(fp8_variant<SplitRingTile>("three_stages", "47/wide with K and Vt in 3 stages, V's raw buffer in a 2-stage ring of its own, Vt's last 64 keys packed in a 64-byte-swizzled tile (208 KB)")
                 .compared_with("47/wide")));

}  // namespace
