// Step 34 — step 33's descriptors in step 22's three-consumer kernel (D = 64).
//
// Step 22 is the top of the ladder at D = 64: three consumer warpgroups take GEMM turns on a
// 192-row tile. Its loop builds each wgmma's descriptors from byte addresses, as step 21's did;
// here, as in step 33, the descriptors of Q (this warpgroup's rows), K and V (ring stage 0) are
// built once and every operand is one of them advanced by a byte offset (desc_advance,
// gemm.cuh). At 160 registers a consumer, the opaque copy of Q's base (step 22) stays: it is now a
// copy of the descriptor.
//
// Everything else is step 22's kernel, and, as in step 33, the epilogue writes each row's
// log-sum-exp for the backward when it is asked for (a non-null lse).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
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

template <int kStages_, class Element_>
struct Tile {
  using Element = Element_;  // __half or __nv_bfloat16
  static constexpr int kHeadDim = 64;
  static constexpr int kConsumers = 3;  // consumer warpgroups
  static constexpr int kThreads = (1 + kConsumers) * kWarpgroupThreads;  // + the producer
  // The register file split between the roles (setmaxnreg): all 65,536 registers are handed out.
  static constexpr int kProducerRegisters = 32;
  static constexpr int kConsumerRegisters = 160;
  static constexpr int kBlockM = 64 * kConsumers;  // query rows per tile: 192
  static constexpr int kBlockN = 128;              // keys per K/V block
  static constexpr int kStages = kStages_;         // K/V ring depth
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
// grid: Scheduler::grid_size (about one CTA per SM); 1 producer + 3 consumer warpgroups.
template <class Scheduler, class T, bool kCausal>
__global__ void __launch_bounds__(T::kThreads, 1)
    three_consumers_iterators_kernel(const __grid_constant__ CUtensorMap tm_q,
                      const __grid_constant__ CUtensorMap tm_k,
                      const __grid_constant__ CUtensorMap tm_v,
                      const __grid_constant__ CUtensorMap tm_o,
                      const __grid_constant__ typename Scheduler::Params schedule, int n,
                      float scale_log2, float* lse) {
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
  const int consumer = warpgroup - 1;  // 0, 1, 2 in the consumer warpgroups

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
    if (tid == 0) hopper::produce_tiles<T, kCausal>(st, scheduler, &tm_q, &tm_k, &tm_v, hopper::DenseRows{n});
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
    hopper::named_barrier_arrive<kTurnThreads>(hopper::turn_barrier((consumer + 1) % T::kConsumers));
  };
  if (consumer == kLast) pass_turn();  // consumer 0 issues first

  // The descriptors, built once for the CTA's life: this warpgroup's 64 rows of Q; K and V at
  // stage 0. Every wgmma's operand is one of them advanced by a byte offset (desc_advance): a
  // ring stage, a column block, a k16 step.
  const std::uint64_t q_desc = hopper::desc_k_major(ptx::smem_addr(st.q) + consumer * 64 * hopper::kSwizzleRowBytes);
  const std::uint64_t k_desc = hopper::desc_k_major(ptx::smem_addr(st.k));
  const std::uint64_t v_desc = hopper::desc_mn_major(ptx::smem_addr(st.v), T::kBlockN * hopper::kSwizzleRowBytes);
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
    // values; an opaque copy of the base makes it recompute them here, four uniform adds per
    // block.
    std::uint64_t q_base = q_desc;
    asm volatile("" : "+l"(q_base));
    hopper::issue_qk_desc<T::kHeadDim, T::kBlockM, Element>(
        s, q_base, hopper::desc_advance(k_desc, stage * T::Storage::kKVBytes));
  };
  auto issue_pv = [&](int stage) {
    hopper::issue_pv_desc<T::kBlockN, Element>(acc_o, p,
                                               hopper::desc_advance(v_desc, stage * T::Storage::kKVBytes));
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
    if (consumer != kLast || scheduler.may_have_next()) pass_turn();
    hopper::wgmma_wait<0>();
    hopper::fence_registers(acc_o);
    hopper::release_kv_stage(st, last_stage, lane);
    it += sp.n_blocks;

    // The log-sum-exp of this thread's two rows ([B·H][N]; null when no one asked: inference).
    if (lse != nullptr) hopper::store_lse(row_max, row_sum, scale_log2, lse + std::int64_t(w.bh) * n, row0, n, t);
    // Epilogue (persistent.cuh): O / l staged into this warpgroup's own rows of the Q buffer, one
    // thread's TMA store, then q_empty. `true`: the staging base and row pass through opaque
    // copies, as issue_s's Q descriptor does, or ptxas hoists the 16 staging addresses out of the
    // tile loop and keeps them live (spilled, at 160 registers).
    hopper::store_o_tile<T, true>(st, &tm_o, acc_o, row_sum, consumer, local_row0, t, store_thread, sp.q_start, w.bh);
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
  hopper::launch_dense<Scheduler, T>(three_consumers_iterators_kernel<Scheduler, T, kCausal>,
                                     "three_consumers_iterators_kernel", args, stream, args.shape.seqlen,
                                     args.softmax_scale * ladder::kLog2e, args.lse);
}

template <int kStages, class Element>
void launch_element(const AttentionArgs& a, cudaStream_t stream) {
  using T = Tile<kStages, Element>;
  if (a.shape.causal) launch_tile<hopper::Snake, T, true>(a, stream);
  else launch_tile<hopper::RowWalk<false>, T, false>(a, stream);
}

template <int kStages>
void launch(const AttentionArgs& a, cudaStream_t stream) {
  ladder::dispatch_head_dim<64>(a.shape.head_dim, [&]<int>() {
    if (a.shape.dtype == ladder::DType::BF16) launch_element<kStages, __nv_bfloat16>(a, stream);
    else launch_element<kStages, __half>(a, stream);
  });
}

template <int kStages>
std::vector<ladder::KernelInfo> kernels() {
  std::vector<ladder::KernelInfo> out;
  auto add = [&]<class Element>(const char* type) {
    using T = Tile<kStages, Element>;
    const auto name = ladder::strprintf("three_consumers_iterators_kernel<D=64,%dx%d,%d stages%s>", T::kBlockM,
                                        T::kBlockN, T::kStages, type);
    out.push_back(ladder::kernel(name, three_consumers_iterators_kernel<hopper::RowWalk<false>, T, false>, T::kThreads, T::kSmemBytes).when_causal(false));
    out.push_back(ladder::kernel(name + " causal,snake", three_consumers_iterators_kernel<hopper::Snake, T, true>, T::kThreads, T::kSmemBytes).when_causal(true));
    out[out.size() - 2].dtype = out.back().dtype = ladder::dtype_of<Element>();
  };
  add.template operator()<__half>("");
  add.template operator()<__nv_bfloat16>(",bf16");
  return out;
}

template <int kStages>
ladder::Variant variant(const char* name, const char* description) {
  return ladder::attention_variant(name, description, launch<kStages>)
      .needs_sm(90)
      .with_lse()
      .for_head_dims({64, 128})
      .for_dtypes({ladder::DType::F16, ladder::DType::BF16})
      .refuse_if([](const ladder::AttentionShape& s) -> std::optional<std::string> {
        if (s.head_dim == 128)
          return "three consumers' O accumulators do not fit at D = 128: 64 fp32 registers of O "
                 "per thread, beside S and P, exceed the 160 each consumer gets (21/snake runs D = 128)";
        return hopper::refuse_unless_sm90();
      })
      .with_kernels([](int d) { return d == 64 ? kernels<kStages>() : std::vector<ladder::KernelInfo>{}; });
}

LADDER_REGISTER_STEP(
    ladder::attention_step(34, "three_consumers_iterators", "Step 33's descriptors built once, in step 22's three-consumer kernel (D = 64)", "22/three_consumers")
        .add(variant<4>("three_iterators", "22/three_consumers with the Q, K and V descriptors built once per CTA and advanced by byte offsets")));

}  // namespace
