// Step 26 — GQA prefill: fewer K/V heads than Q heads, in the top forward kernel.
//
// With grouped-query attention Hq query heads share Hkv K/V heads: query head h (of batch b) reads
// K/V head h / G, G = Hq / Hkv, and K, V are [B, Hkv, N, D]. The kernel changes in one place —
// the coordinate of the K/V copies is the tile's head divided by G (the skeleton's GroupedRows
// addressing, persistent.cuh) — because the tile's head index is b·Hq + h and
// (b·Hq + h) / G = b·Hkv + h / G: the batch comes along for free.
//
// The kernel is the top dense forward at each head dim: step 22's round-robin consumer loop,
// templated on the number of consumer warpgroups. At D = 64 it is step 22's tile (three
// consumers, 192 rows, setmaxnreg 32/160, a 4-stage ring); at D = 128, where three consumers' O
// accumulators do not fit, step 21's (two consumers, 128 rows, 24/240, 3 stages), whose round
// robin is the ping-pong: the next of consumer c is (c + 1) % 2 = c ^ 1.
//
// K and V shrink by G, but prefill is bound by the tensor cores, not by those bytes: the FLOPs
// are the same as the dense problem's, and GQA should cost nothing — as long as the G heads that
// read one K/V block read it while it is still in L2. That is a property of the tile order:
//
//   * group_order (main): no mask, GroupWalk — the list numbered (K/V head, query block, head in
//     the group), the last fastest, so a row of the list (the tiles the CTAs run side by side)
//     holds whole groups at the same query blocks; causal, step 21's Snake, whose list already
//     has the head innermost (consecutive heads of a row are one group's, at one query block);
//   * head_major (the ablation): no mask, step 21's row walk — a whole head's query blocks before
//     the next head, so a group's other heads read the same K/V one head later, from L2 if it
//     still holds them (a K/V head is 2·N·D·2 bytes: 4 MiB at N = 8192, D = 128).
//
// As steps 33 and 34 do, the epilogue writes each row's log-sum-exp when it is asked for (a
// non-null lse, [B·Hq][N]): a training step's backward (step 37) recomputes P from it.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/device/hopper/hopper.cuh"
#include "common/dispatch.hpp"
#include "common/math.hpp"
#include "common/registry.hpp"
#include "common/strings.hpp"

namespace {

using ladder::AttentionArgs;
namespace hopper = ladder::hopper;
namespace ptx = ladder::ptx;

using hopper::kWarpgroupThreads;

// The tile of the top forward at each head dim: D = 64 step 22's, D = 128 step 21's.
template <int kHeadDim_, class Element_>
struct Tile {
  using Element = Element_;  // __half or __nv_bfloat16
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kConsumers = kHeadDim == 64 ? 3 : 2;  // consumer warpgroups
  static constexpr int kThreads = (1 + kConsumers) * kWarpgroupThreads;  // + the producer
  // The register file split between the roles (setmaxnreg): all 65,536 registers are handed out.
  static constexpr int kProducerRegisters = kConsumers == 3 ? 32 : 24;
  static constexpr int kConsumerRegisters = kConsumers == 3 ? 160 : 240;
  static constexpr int kBlockM = 64 * kConsumers;  // query rows per tile: 192 or 128
  static constexpr int kBlockN = 128;              // keys per K/V block
  static constexpr int kStages = kConsumers == 3 ? 4 : 3;  // K/V ring depth
  // At 160 registers a consumer, addresses that ptxas would hoist out of the loops and keep live
  // are spilled: opaque copies keep their computation where they are used (issue_s, the epilogue).
  static constexpr bool kOpaqueAddresses = kConsumers == 3;
  using Storage = hopper::AttentionStorage<Element, kHeadDim, kBlockM, kBlockN, kStages>;
  static constexpr std::size_t kSmemBytes = hopper::smem_bytes_for<Storage>;
  // 192 rows are not a multiple of 128 keys: nothing below assumes it (the causal bounds are
  // computed per tile and per warpgroup).
  static_assert(kConsumers <= hopper::kMaxConsumers);
  static_assert(kProducerRegisters * kWarpgroupThreads +
                    kConsumerRegisters * kConsumers * kWarpgroupThreads <= 65536);
  static_assert(kSmemBytes <= 232448, "more shared memory than a block may opt in to");
};

// ---- The kernel -------------------------------------------------------------------------------
// grid: Scheduler::grid_size (about one CTA per SM); 1 producer + T::kConsumers warpgroups.
template <class Scheduler, class T, bool kCausal>
__global__ void __launch_bounds__(T::kThreads, 1)
    persistent_kernel(const __grid_constant__ CUtensorMap tm_q,
                      const __grid_constant__ CUtensorMap tm_k,
                      const __grid_constant__ CUtensorMap tm_v,
                      const __grid_constant__ CUtensorMap tm_o,
                      const __grid_constant__ typename Scheduler::Params schedule, int n,
                      int group, float scale_log2, float* lse) {
#if LADDER_SM90A
  using Element = typename T::Element;
  extern __shared__ unsigned char smem_raw[];
  auto& st = hopper::aligned_smem<typename T::Storage>(smem_raw);

  const int tid = threadIdx.x;
  const int warpgroup = hopper::warpgroup_index();  // warp-uniform, and known to be (arch.cuh)
  const int warp_in_wg = (tid % kWarpgroupThreads) / 32;
  const int lane = tid % 32;
  const int g = lane / 4;
  const int t = lane % 4;
  const int consumer = warpgroup - 1;  // 0 .. kConsumers - 1 in the consumer warpgroups

  // One thread sets up the barriers; the fence and the __syncthreads make them visible to the
  // other threads and to the copy engine before anyone uses them.
  if (tid == 0) {
    hopper::tma_prefetch_map(&tm_q);
    hopper::tma_prefetch_map(&tm_k);
    hopper::tma_prefetch_map(&tm_v);
    hopper::tma_prefetch_map(&tm_o);
    hopper::init_barriers(st, T::kConsumers);
  }
  __syncthreads();

  Scheduler scheduler(schedule, &st.q_full, &st.q_empty);
  if (warpgroup == 0) {
    // ---- Producer ----
    hopper::setmaxnreg_dec<T::kProducerRegisters>();
    // The tile loop of every persistent step (persistent.cuh): K/V blocks ahead of Q, the ring
    // and the tile count running across the CTA's tiles.
    if (tid == 0) hopper::produce_tiles<T, kCausal>(st, scheduler, &tm_q, &tm_k, &tm_v, hopper::GroupedRows{n, group});
    return;  // nothing after the split waits for the producer's threads
  }

  // ---- Consumers ----
  hopper::setmaxnreg_inc<T::kConsumerRegisters>();

  // Round-robin turns: turn_barrier(c) is "consumer c may issue its GEMMs" (barriers.cuh); its
  // 256 threads are consumer c (bar.sync) and consumer c − 1 (bar.arrive, once its own GEMMs are
  // issued). Each barrier has one waiter and one arriver, so an arrival can never be counted for
  // the wrong turn: c − 1 arrives again only after taking another turn, which needs c to have passed.
  constexpr int kTurnThreads = 2 * kWarpgroupThreads;
  constexpr int kLast = T::kConsumers - 1;
  auto wait_turn = [&] { hopper::named_barrier_sync<kTurnThreads>(hopper::turn_barrier(consumer)); };
  auto pass_turn = [&] {  // to the next consumer in the round: c + 1, and 0 after the last
    hopper::named_barrier_arrive<kTurnThreads>(
        hopper::turn_barrier(hopper::next_consumer<T::kConsumers>(consumer)));
  };
  if (consumer == kLast) pass_turn();  // consumer 0 issues first

  // Descriptor bases: this warpgroup's 64 rows of each column block of Q; K and V at stage 0
  // (a stage is kKVBytes further on).
  const std::uint32_t q_addr = ptx::smem_addr(st.q) + consumer * 64 * hopper::kSwizzleRowBytes;
  const std::uint32_t k_addr = ptx::smem_addr(st.k);
  const std::uint32_t v_addr = ptx::smem_addr(st.v);
  const int local_row0 = consumer * 64 + warp_in_wg * 16 + g;  // rows local_row0, +8 of the tile
  // The thread that stores this warpgroup's rows of O (and releases the Q buffer).
  const bool store_thread = (tid % kWarpgroupThreads) == 0;

  float acc_o[T::kHeadDim / 2];
  float row_max[2];
  float row_sum[2];
  float s[T::kBlockN / 2];
  std::uint32_t p[T::kBlockN / 16][4];  // P of the previous block, the A operand in flight
  float rescale[2];

  auto issue_s = [&](int stage) {
    // At 160 registers every one counts: left alone, ptxas keeps the four Q descriptors of the
    // loop (one per k16 step) in registers for the consumer's whole life and spills other
    // values; an opaque copy of the base makes it recompute them here, four integer adds per
    // block.
    std::uint32_t q_base = q_addr;
    if constexpr (T::kOpaqueAddresses) asm volatile("" : "+r"(q_base));
    hopper::issue_qk<T::kHeadDim, T::kBlockM, Element>(s, q_base, k_addr + stage * T::Storage::kKVBytes);
  };
  auto issue_pv = [&](int stage) {
    hopper::issue_pv<T::kBlockN, Element>(acc_o, p, v_addr + stage * T::Storage::kKVBytes);
  };

  int it = 0;  // ring position, as in the producer
  for (hopper::WorkTile w = scheduler.consumer_first(); w.valid; w = scheduler.consumer_next()) {
    const hopper::Span sp = hopper::span_of<T, kCausal>(w, n);
    const int row0 = sp.q_start + local_row0;  // this thread's rows: row0, row0 + 8
#pragma unroll
    for (int i = 0; i < T::kHeadDim / 2; ++i) acc_o[i] = 0.f;
    row_max[0] = row_max[1] = -INFINITY;
    row_sum[0] = row_sum[1] = 0.f;

    // Mask (where the block can need it) and online softmax of block i; leaves O's rescale.
    auto softmax_block = [&](int i, auto masked) {
      if constexpr (decltype(masked)::value) {
        const int kv_start = (sp.n_blocks - 1 - i) * T::kBlockN;
        const bool ragged = kv_start + T::kBlockN > n;
        const bool diagonal = kCausal && kv_start + T::kBlockN - 1 > sp.q_start + consumer * 64;
        if (ragged || diagonal) hopper::mask_scores<T::kBlockN, kCausal>(s, row0, kv_start, n, t);
      }
      hopper::online_softmax<T::kBlockN>(s, row_max, row_sum, scale_log2, rescale);
    };

    scheduler.wait_q();  // the tile's Q has landed

    // Block 0 (in processing order): S_0 alone. O is still zero, so its rescale is moot.
    hopper::wait_kv_block(st, it);
    wait_turn();
    hopper::wgmma_fence();
    issue_s(hopper::ring_stage<T::kStages>(it));
    hopper::wgmma_commit();
    pass_turn();
    hopper::wgmma_wait<0>();
    hopper::fence_registers(s);
    softmax_block(0, std::true_type{});
    hopper::p_to_a<T::kBlockN, Element>(s, p);

    // Block i: issue S_i and P_{i-1} V_{i-1}; softmax(S_i) under the second product.
    auto iteration = [&](int i, auto masked) {
      const int stage = hopper::ring_stage<T::kStages>(it + i);
      const int prev_stage = hopper::ring_stage<T::kStages>(it + i - 1);
      hopper::wait_kv_block(st, it + i);
      wait_turn();
      hopper::wgmma_fence();
      issue_s(stage);
      hopper::wgmma_commit();
      issue_pv(prev_stage);
      hopper::wgmma_commit();
      pass_turn();
      hopper::wgmma_wait<1>();  // S_i is done; P_{i-1} V_{i-1} may still run
      hopper::fence_registers(s);
      softmax_block(i, masked);
      hopper::wgmma_wait<0>();  // P_{i-1} V_{i-1} is done: O and p may be touched, V_{i-1} freed
      hopper::fence_registers(acc_o);
      hopper::release_kv_stage(st, prev_stage, lane);
      hopper::rescale_o<T::kHeadDim>(acc_o, rescale);
      hopper::p_to_a<T::kBlockN, Element>(s, p);
    };
    int i = 1;
    for (; i < sp.n_masked; ++i) iteration(i, std::true_type{});
    for (; i < sp.n_blocks; ++i) iteration(i, std::false_type{});

    // The last P·V. The last turn of the CTA's last tile passes nothing from the last consumer:
    // consumer 0 has no turn left to take (within the CTA's life the turns go round in order,
    // every consumer taking n_blocks + 1 of them per tile). A scheduler that cannot know whether
    // a tile follows has the last consumer pass anyway, and consumer 0 takes that turn after the loop.
    const int last_stage = hopper::ring_stage<T::kStages>(it + sp.n_blocks - 1);
    wait_turn();
    hopper::wgmma_fence();
    issue_pv(last_stage);
    hopper::wgmma_commit();
    if (hopper::passes_final_turn<T::kConsumers>(consumer) || scheduler.may_have_next()) pass_turn();
    hopper::wgmma_wait<0>();
    hopper::fence_registers(acc_o);
    hopper::release_kv_stage(st, last_stage, lane);
    it += sp.n_blocks;

    // The log-sum-exp of this thread's two rows (null when no one asked: inference).
    if (lse != nullptr) hopper::store_lse(row_max, row_sum, scale_log2, lse + std::int64_t(w.bh) * n, row0, n, t);
    // Epilogue (persistent.cuh): O / l staged into this warpgroup's own rows of the Q buffer, one
    // thread's TMA store, then q_empty. At 160 registers the staging base and row pass through
    // opaque copies, as issue_s's Q base does, or ptxas hoists the 16 staging addresses out of
    // the tile loop and keeps them live (spilled).
    hopper::store_o_tile<T, T::kOpaqueAddresses>(st, &tm_o, acc_o, row_sum, consumer, local_row0, t, store_thread,
                                                 sp.q_start, w.bh);
  }
  if constexpr (!Scheduler::kKnowsLast) {
    if (consumer == 0) wait_turn();
  }
  if (store_thread) hopper::tma_store_wait_all();
#elif defined(__CUDA_ARCH__)
  __trap();  // built without sm_90a: never reached (the variant refuses), never silent
#endif  // LADDER_SM90A
}

// ---- Host side --------------------------------------------------------------------------------
template <class Scheduler, class T, bool kCausal>
void launch_tile(const AttentionArgs& args, cudaStream_t stream) {
  hopper::launch_dense<Scheduler, T, true>(persistent_kernel<Scheduler, T, kCausal>, "persistent_kernel", args, stream,
                                           args.shape.seqlen, args.shape.group(), args.softmax_scale * ladder::kLog2e,
                                           args.lse);
}

// Causal: step 21's snake for both variants; the variants differ in the unmasked walk.
template <class Scheduler, class Element>
void launch_element(const AttentionArgs& a, cudaStream_t stream) {
  ladder::dispatch_head_dim<64, 128>(a.shape.head_dim, [&]<int kHeadDim>() {
    using T = Tile<kHeadDim, Element>;
    if (a.shape.causal) launch_tile<hopper::Snake, T, true>(a, stream);
    else launch_tile<Scheduler, T, false>(a, stream);
  });
}

template <class Scheduler>
void launch(const AttentionArgs& a, cudaStream_t stream) {
  if (a.shape.dtype == ladder::DType::BF16) launch_element<Scheduler, __nv_bfloat16>(a, stream);
  else launch_element<Scheduler, __half>(a, stream);
}

template <class Scheduler, int kHeadDim>
std::vector<ladder::KernelInfo> kernels(const char* schedule) {
  std::vector<ladder::KernelInfo> out;
  auto add = [&]<class Element>(const char* type) {
    using T = Tile<kHeadDim, Element>;
    const auto name = ladder::strprintf("persistent_kernel<D=%d,%dx%d,%d stages,%s,gqa%s>", kHeadDim,
                                        T::kBlockM, T::kBlockN, T::kStages, schedule, type);
    const auto causal_name = ladder::strprintf("persistent_kernel<D=%d,%dx%d,%d stages,snake,gqa%s> causal", kHeadDim,
                                               T::kBlockM, T::kBlockN, T::kStages, type);
    out.push_back(ladder::kernel(name, persistent_kernel<Scheduler, T, false>, T::kThreads, T::kSmemBytes).when_causal(false));
    out.push_back(ladder::kernel(causal_name, persistent_kernel<hopper::Snake, T, true>, T::kThreads, T::kSmemBytes).when_causal(true));
    out[out.size() - 2].dtype = out.back().dtype = ladder::dtype_of<Element>();
  };
  add.template operator()<__half>("");
  add.template operator()<__nv_bfloat16>(",bf16");
  return out;
}

// `duplicate`: where this variant launches another's kernel (its id), or nothing.
template <class Scheduler>
ladder::Variant variant(const char* name, const char* schedule, const char* description,
                        std::optional<std::string> (*duplicate)(const ladder::AttentionShape&)) {
  return ladder::attention_variant(name, description, launch<Scheduler>)
      .needs_sm(90)
      .with_lse()
      .for_head_dims({64, 128})
      .for_dtypes({ladder::DType::F16, ladder::DType::BF16})
      .serves({ladder::Feature::Gqa})
      .refuse_if([](const ladder::AttentionShape&) { return hopper::refuse_unless_sm90(); })
      .same_kernel_when(duplicate)
      .with_kernels([schedule](int d) {
        return d == 128 ? kernels<Scheduler, 128>(schedule) : kernels<Scheduler, 64>(schedule);
      });
}

// Causal, both variants are one kernel (the snake); without GQA the two walks are one order.
std::optional<std::string> head_major_duplicate(const ladder::AttentionShape& s) {
  if (s.causal || !s.gqa()) return "26/group_order";
  return std::nullopt;
}
std::optional<std::string> no_duplicate(const ladder::AttentionShape&) { return std::nullopt; }

LADDER_REGISTER_STEP(
    ladder::attention_step(26, "gqa_prefill", "GQA prefill: a group of Q heads reads one K/V head; the tile order keeps the group together", "22/three_consumers")
        .add(variant<hopper::GroupWalk>("group_order", "group", "the top forward (D=64: 22/three_consumers' 192x128 tile, 3 consumers, setmaxnreg 32/160, 4 stages; D=128: 21/snake's 128x128 ping-pong, 24/240, 3 stages) reading K/V head h / G; unmasked, the group's heads innermost in the tile list", no_duplicate))
        .add(variant<hopper::RowWalk<false>>("head_major", "rows", "the same kernels reading K/V head h / G; unmasked, step 21's head-major row walk", head_major_duplicate)
                 .compared_with("26/group_order"))
        .main_is("group_order"));

}  // namespace
