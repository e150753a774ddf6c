// Step 27 — varlen prefill: step 26's kernel over a packed batch of sequences of their own lengths.
//
// Serving batches prompts of different lengths without padding them: Q and O are [total_q, H, D],
// K and V [total_k, Hkv, D], sequence b's tokens are rows cu_seqlens[b] .. cu_seqlens[b + 1] - 1
// (FlashAttention's varlen layout). The kernel is step 26's at each head dim (three consumers and
// 192 rows at D = 64, two and 128 rows at D = 128); the rows it reads are the skeleton's
// VarlenRows addressing (persistent.cuh). Three things change from step 26:
//
//   * the tile list (common/device/hopper/varlen_scheduler.cuh): Σ_b ceil(Nq_b / kBlockM) · H
//     tiles (kBlockM the tile's rows), none of padding, longest processing time first
//     (longest_first, main) or in the batch's order (in_order, the ablation); a tile names
//     (sequence, head, query block) and the kernel takes the sequence's first token and length
//     from cu_seqlens;
//   * the tensor maps (tma.cuh, make_varlen_tensor_map): the token is the row dimension with a
//     stride of H·D elements, the head the outer one, so a box is still one head's tile;
//   * the hazards of a packed layout. The box of a tile that crosses its sequence's end holds the
//     next sequence's rows, not zeros: past Nk_b they are keys of another sequence, masked like
//     a ragged end (n is the sequence's key count); past Nq_b they are queries computed for
//     nothing and must not be stored — the TMA store of a 64-row box would overwrite the next
//     sequence's output, so a warpgroup whose rows cross the end stores from registers, row by
//     row, with bounds. A sequence of one token is one such tile.
//
// Causal is per sequence and aligned to the end (shape.last_key); with Nq_b = Nk_b, which this
// step requires (fewer queries than keys is decode, step 28), that is step 26's diagonal in the
// sequence's own coordinates.
//
// The epilogue writes each row's log-sum-exp when it is asked for (a non-null lse), in the packed
// layout's [H][total_q] (shape.lse_index), for the varlen backward (step 38).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/check.hpp"
#include "common/device/hopper/hopper.cuh"
#include "common/dispatch.hpp"
#include "common/math.hpp"
#include "common/registry.hpp"
#include "common/strings.hpp"

namespace {

using ladder::AttentionArgs;
using ladder::ceil_div;
namespace hopper = ladder::hopper;
namespace ptx = ladder::ptx;

using hopper::kWarpgroupThreads;

// Step 26's tile per head dim: D = 64 step 22's, D = 128 step 21's.
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
// grid: min(tiles, SMs), one CTA per SM; 1 producer + T::kConsumers warpgroups.
template <class Scheduler, class T, bool kCausal>
__global__ void __launch_bounds__(T::kThreads, 1)
    persistent_kernel(const __grid_constant__ CUtensorMap tm_q,
                      const __grid_constant__ CUtensorMap tm_k,
                      const __grid_constant__ CUtensorMap tm_v,
                      const __grid_constant__ CUtensorMap tm_o,
                      const __grid_constant__ typename Scheduler::Params schedule,
                      typename T::Element* o, const int* cu_q, const int* cu_k, int group,
                      float scale_log2, float* lse, int total_q) {
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
    if (tid == 0) hopper::produce_tiles<T, kCausal>(st, scheduler, &tm_q, &tm_k, &tm_v, hopper::VarlenRows{cu_q, cu_k, group});
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
  for (hopper::VarlenTile w = scheduler.consumer_first(); w.valid; w = scheduler.consumer_next()) {
    const hopper::SequenceRows seq = hopper::VarlenRows{cu_q, cu_k, group}(w);
    const int n = seq.n;  // keys past it (the next sequence's, or zeros) are masked
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

    // The log-sum-exp of this thread's two rows of the sequence ([H][total_q]; null: inference).
    if (lse != nullptr)
      hopper::store_lse(row_max, row_sum, scale_log2, lse + std::int64_t(w.head) * total_q + seq.q_row, row0,
                        seq.n_q, t);
    // Epilogue: O / l into this warpgroup's own 64 rows of the Q buffer (its last S product,
    // the only reader of those rows, has completed), fenced into the async proxy, then one
    // thread stores them with the copy engine once the warpgroup's writes are all done.
    // A warpgroup whose 64 rows cross the sequence's end stores its rows below Nq_b from
    // registers instead (a box would write the next sequence's rows); it still syncs before the
    // Q buffer is released, since its other threads' S products read it. At 160 registers the
    // staging base and row pass through opaque copies, as issue_s's Q base does.
    hopper::store_o_tile_ragged<T, T::kOpaqueAddresses>(
        st, &tm_o, acc_o, row_sum, consumer, local_row0, t, store_thread, seq.q_row, sp.q_start, w.head, seq.n_q,
        [&](const float (&o_rows)[T::kHeadDim / 2]) {
          const int heads = schedule.heads;
          hopper::store_o_rows<T::kHeadDim>(o_rows, o + (std::int64_t(seq.q_row) * heads + w.head) * T::kHeadDim,
                                            row0, seq.n_q, t, std::int64_t(heads) * T::kHeadDim);
        });
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
template <bool kLongestFirst, class T, bool kCausal>
void launch_tile(const AttentionArgs& args, cudaStream_t stream) {
  using Scheduler = hopper::VarlenSchedule;
  const auto a = args.as<typename T::Element>();  // Q, K, V, O in the kernel's element type
  auto* kernel = persistent_kernel<Scheduler, T, kCausal>;
  const auto& sh = args.shape;
  if (args.cu_seqlens_q == nullptr || args.cu_seqlens_k == nullptr)
    throw std::logic_error("varlen_prefill was launched without cu_seqlens (AttentionArgs::cu_seqlens_q/k)");
  if (args.sm_count < 1) throw std::logic_error("a persistent grid needs the SM count (AttentionArgs::sm_count)");
  // Planned from the lengths cu_seqlens was built from; passed by value (a kernel parameter).
  const hopper::VarlenPlan plan = hopper::make_varlen_plan(sh.q_lens, sh.heads, T::kBlockM, kCausal, kLongestFirst);
  if (plan.n_tiles == 0) return;  // no queries: nothing to write
  const int grid = std::min(plan.n_tiles, args.sm_count);
  hopper::launch_persistent<T>(kernel, "persistent_kernel", grid, hopper::varlen_maps<T>(args), plan, stream, a.o,
                               args.cu_seqlens_q, args.cu_seqlens_k, sh.group(), args.softmax_scale * ladder::kLog2e,
                               args.lse, int(sh.total_q()));
}

template <bool kLongestFirst, class Element>
void launch_element(const AttentionArgs& a, cudaStream_t stream) {
  ladder::dispatch_head_dim<64, 128>(a.shape.head_dim, [&]<int kHeadDim>() {
    using T = Tile<kHeadDim, Element>;
    if (a.shape.causal) launch_tile<kLongestFirst, T, true>(a, stream);
    else launch_tile<kLongestFirst, T, false>(a, stream);
  });
}

template <bool kLongestFirst>
void launch(const AttentionArgs& a, cudaStream_t stream) {
  if (a.shape.dtype == ladder::DType::BF16) launch_element<kLongestFirst, __nv_bfloat16>(a, stream);
  else launch_element<kLongestFirst, __half>(a, stream);
}

// Both variants launch these kernels; only the plan (the tile order) differs.
template <int kHeadDim>
std::vector<ladder::KernelInfo> kernels() {
  std::vector<ladder::KernelInfo> out;
  auto add = [&]<class Element>(const char* type) {
    using T = Tile<kHeadDim, Element>;
    const auto name = ladder::strprintf("persistent_kernel<D=%d,%dx%d,%d stages,varlen%s>", kHeadDim,
                                        T::kBlockM, T::kBlockN, T::kStages, type);
    out.push_back(ladder::kernel(name, persistent_kernel<hopper::VarlenSchedule, T, false>, T::kThreads, T::kSmemBytes).when_causal(false));
    out.push_back(ladder::kernel(name + " causal", persistent_kernel<hopper::VarlenSchedule, T, true>, T::kThreads, T::kSmemBytes).when_causal(true));
    out[out.size() - 2].dtype = out.back().dtype = ladder::dtype_of<Element>();
  };
  add.template operator()<__half>("");
  add.template operator()<__nv_bfloat16>(",bf16");
  return out;
}

// The plan's query rows per tile at head dim d (the refusal's, checked before any launch).
int block_m_of(int d) { return d == 64 ? Tile<64, __half>::kBlockM : Tile<128, __half>::kBlockM; }

std::optional<std::string> refusal(const ladder::AttentionShape& s) {
  if (!s.varlen()) return "a packed variable-length batch only (--varlen); the dense problem is 26/group_order's";
  if (s.decode()) return "every sequence needs as many keys as queries (fewer queries than keys is decode: step 28)";
  if (auto why = hopper::varlen_plan_refusal(s.q_lens, block_m_of(s.head_dim), s.causal)) return why;
  return hopper::refuse_unless_sm90();
}

template <bool kLongestFirst>
ladder::Variant variant(const char* name, const char* description) {
  return ladder::attention_variant(name, description, launch<kLongestFirst>)
      .needs_sm(90)
      .with_lse()
      .for_head_dims({64, 128})
      .for_dtypes({ladder::DType::F16, ladder::DType::BF16})
      .serves({ladder::Feature::Gqa, ladder::Feature::Varlen})
      .refuse_if(refusal)
      .with_kernels([](int d) { return d == 128 ? kernels<128>() : kernels<64>(); });
}

LADDER_REGISTER_STEP(
    ladder::attention_step(27, "varlen_prefill", "Varlen prefill: a tile list over cu_seqlens, no padding, longest first", "26/group_order")
        .add(variant<true>("longest_first", "26/group_order's kernels over a packed batch (D=64: 192x128 tiles, 3 consumers; D=128: 128x128, 2): Σ ceil(Nq_b/rows)·H tiles, longest processing time first, snake rows"))
        .add(variant<false>("in_order", "the same tiles in the batch's order, sequence by sequence").compared_with("27/longest_first"))
        .main_is("longest_first"));

}  // namespace
