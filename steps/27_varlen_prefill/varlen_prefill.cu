// Step 27 — varlen prefill: step 26's kernel over a packed batch of sequences of their own lengths.
//
// Serving batches prompts of different lengths without padding them: Q and O are [total_q, H, D],
// K and V [total_k, Hkv, D], sequence b's tokens are rows cu_seqlens[b] .. cu_seqlens[b + 1] - 1
// (FlashAttention's varlen layout). Three things change from step 26:
//
//   * the tile list (common/device/hopper/varlen_scheduler.cuh): Σ_b ceil(Nq_b / kBlockM) · H
//     tiles, none of padding, longest processing time first (longest_first, main) or in the
//     batch's order (in_order, the ablation); a tile names (sequence, head, query block) and the
//     kernel takes the sequence's first token and length from cu_seqlens;
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
#include "common/device/hopper/arch.cuh"
#include "common/device/hopper/attention.cuh"
#include "common/device/hopper/barriers.cuh"
#include "common/device/hopper/gemm.cuh"
#include "common/device/hopper/mbarrier.cuh"
#include "common/device/hopper/pipeline.cuh"
#include "common/device/hopper/shared_storage.cuh"
#include "common/device/hopper/smem.cuh"
#include "common/device/hopper/tile_scheduler.cuh"
#include "common/device/hopper/tma.cuh"
#include "common/device/hopper/varlen_scheduler.cuh"
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

template <int kHeadDim_, class Element_>
struct Tile {
  using Element = Element_;  // __half or __nv_bfloat16
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kConsumers = 2;  // consumer warpgroups
  static constexpr int kThreads = (1 + kConsumers) * kWarpgroupThreads;  // + the producer
  static constexpr int kProducerRegisters = 24;
  static constexpr int kConsumerRegisters = 240;
  static constexpr int kBlockM = 64 * kConsumers;  // query rows per tile
  static constexpr int kBlockN = 128;              // keys per K/V block
  static constexpr int kStages = 3;                // K/V ring depth
  using Storage = hopper::AttentionStorage<Element, kHeadDim, kBlockM, kBlockN, kStages>;
  static constexpr std::size_t kSmemBytes = hopper::smem_bytes_for<Storage>;
  static_assert(kBlockM % kBlockN == 0);
  static_assert(kProducerRegisters * kWarpgroupThreads +
                    kConsumerRegisters * kConsumers * kWarpgroupThreads <= 65536);
};

// A tile's query rows and its K/V blocks, processed from the last block to the first.
struct Span {
  int q_start;   // first query row
  int n_blocks;  // K/V blocks to visit
  int n_masked;  // of which the first n_masked (in processing order) may need a mask
};
template <class T, bool kCausal>
__device__ __forceinline__ Span span_of(const hopper::VarlenTile& w, int n) {
  Span s;
  s.q_start = w.m_block * T::kBlockM;
  const int kv_end = kCausal ? min(n, s.q_start + T::kBlockM) : n;
  s.n_blocks = ceil_div(kv_end, T::kBlockN);
  // Blocks [0, n_full) need no mask (they end before N and, causal, before the tile's first row).
  const int n_full = kCausal ? min(n / T::kBlockN, s.q_start / T::kBlockN) : n / T::kBlockN;
  s.n_masked = s.n_blocks - n_full;
  return s;
}

#if LADDER_SM90A  // only the sm_90a kernel body uses it (elsewhere the kernel is a trapping stub)
// A sequence's place in the packed tensors, from cu_seqlens.
struct Sequence {
  int q0, n_q;  // first query token, queries
  int k0, n_k;  // first key token, keys
};
__device__ __forceinline__ Sequence sequence_of(const hopper::VarlenTile& w, const int* cu_q, const int* cu_k) {
  const int q0 = cu_q[w.b];
  const int k0 = cu_k[w.b];
  return {q0, cu_q[w.b + 1] - q0, k0, cu_k[w.b + 1] - k0};
}
#endif

// ---- The kernel -------------------------------------------------------------------------------
// grid: min(tiles, SMs), one CTA per SM; 1 producer + 2 consumer warpgroups.
template <class Scheduler, class T, bool kCausal>
__global__ void __launch_bounds__(T::kThreads, 1)
    persistent_kernel(const __grid_constant__ CUtensorMap tm_q,
                      const __grid_constant__ CUtensorMap tm_k,
                      const __grid_constant__ CUtensorMap tm_v,
                      const __grid_constant__ CUtensorMap tm_o,
                      const __grid_constant__ typename Scheduler::Params schedule,
                      typename T::Element* o, const int* cu_q, const int* cu_k, int group,
                      float scale_log2) {
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
  const int consumer = warpgroup - 1;  // 0, 1 in the consumer warpgroups

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
    if (tid == 0) {
      int it = 0;     // ring position: the CTA's it-th K/V block
      int local = 0;  // the CTA's tile count: the phase of q_full and q_empty
      for (hopper::VarlenTile w = scheduler.producer_first(); w.valid; w = scheduler.producer_next(), ++local) {
        const Sequence seq = sequence_of(w, cu_q, cu_k);
        const Span sp = span_of<T, kCausal>(w, seq.n_k);
        const int kv_head = w.head / group;
        auto load_kv = [&](int i) {
          hopper::load_kv_block(st, it++, &tm_k, &tm_v, seq.k0 + (sp.n_blocks - 1 - i) * T::kBlockN, kv_head);
        };
        // The tile's first blocks go into the ring as soon as the previous tile frees stages,
        // before Q, whose buffer frees only after the previous tile's epilogue: the loads of the
        // next tile overlap the end of this one.
        const int ahead = min(T::kStages, sp.n_blocks);
        int i = 0;
        for (; i < ahead; ++i) load_kv(i);
        hopper::mbarrier_wait(&st.q_empty, (local & 1) ^ 1);
        scheduler.publish();
        hopper::mbarrier_arrive_expect_tx(&st.q_full, T::Storage::kQBytes);
        hopper::tma_load_tile(st.q, &tm_q, &st.q_full, seq.q0 + sp.q_start, w.head);
        scheduler.prefetch_next();
        for (; i < sp.n_blocks; ++i) load_kv(i);
      }
      scheduler.producer_done(local);
    }
    return;  // nothing after the split waits for the producer's threads
  }

  // ---- Consumers ----
  hopper::setmaxnreg_inc<T::kConsumerRegisters>();

  // Ping-pong turns: turn_barrier(c) is "consumer c may issue its GEMMs" (barriers.cuh).
  constexpr int kTurnThreads = 2 * kWarpgroupThreads;
  auto wait_turn = [&] { hopper::named_barrier_sync<kTurnThreads>(hopper::turn_barrier(consumer)); };
  auto pass_turn = [&] { hopper::named_barrier_arrive<kTurnThreads>(hopper::turn_barrier(consumer ^ 1)); };
  if (consumer == 1) pass_turn();  // consumer 0 issues first

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
    hopper::issue_qk<T::kHeadDim, T::kBlockM, Element>(s, q_addr, k_addr + stage * T::Storage::kKVBytes);
  };
  auto issue_pv = [&](int stage) {
    hopper::issue_pv<T::kBlockN, Element>(acc_o, p, v_addr + stage * T::Storage::kKVBytes);
  };

  int it = 0;  // ring position, as in the producer
  for (hopper::VarlenTile w = scheduler.consumer_first(); w.valid; w = scheduler.consumer_next()) {
    const Sequence seq = sequence_of(w, cu_q, cu_k);
    const int n = seq.n_k;  // keys past it (the next sequence's, or zeros) are masked
    const Span sp = span_of<T, kCausal>(w, n);
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

    // The last P·V. The last turn of the CTA's last tile passes nothing from consumer 1:
    // consumer 0 has no turn left to take (within the CTA's life the turns simply alternate).
    // A scheduler that cannot know whether a tile follows has consumer 1 pass anyway, and
    // consumer 0 takes that turn after the loop.
    const int last_stage = hopper::ring_stage<T::kStages>(it + sp.n_blocks - 1);
    wait_turn();
    hopper::wgmma_fence();
    issue_pv(last_stage);
    hopper::wgmma_commit();
    if (consumer == 0 || scheduler.may_have_next()) pass_turn();
    hopper::wgmma_wait<0>();
    hopper::fence_registers(acc_o);
    hopper::release_kv_stage(st, last_stage, lane);
    it += sp.n_blocks;

    // Epilogue: O / l into this warpgroup's own 64 rows of the Q buffer (its last S product,
    // the only reader of those rows, has completed), fenced into the async proxy, then one
    // thread stores them with the copy engine once the warpgroup's writes are all done.
    // A warpgroup whose 64 rows cross the sequence's end stores its rows below Nq_b from
    // registers instead (a box would write the next sequence's rows); it still syncs before the
    // Q buffer is released, since its other threads' S products read it.
    hopper::finalize_rows<T::kHeadDim>(acc_o, row_sum);
    const int wg_row0 = sp.q_start + consumer * 64;
    const bool whole_box = wg_row0 + 64 <= seq.n_q;
    if (whole_box) {
      hopper::stage_o_rows<T::kHeadDim, T::kBlockM>(acc_o, st.q, local_row0, t);
      hopper::fence_proxy_async_smem();
    } else {
      const int heads = schedule.heads;
      hopper::store_o_rows<T::kHeadDim>(acc_o, o + (std::int64_t(seq.q0) * heads + w.head) * T::kHeadDim,
                                        row0, seq.n_q, t, std::int64_t(heads) * T::kHeadDim);
    }
    hopper::named_barrier_sync<kWarpgroupThreads>(hopper::epilogue_barrier(consumer));
    if (store_thread) {
      if (whole_box) {
#pragma unroll
        for (int cb = 0; cb < T::kHeadDim / 64; ++cb)
          hopper::tma_store_tile(&tm_o, st.q + cb * T::kBlockM * 64 + consumer * 64 * 64,
                                 seq.q0 + wg_row0, cb, w.head);
        hopper::tma_store_commit();
        hopper::tma_store_wait_read();  // the engine has read the rows: the buffer is free
      }
      hopper::mbarrier_arrive(&st.q_empty);
    }
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
  constexpr int kHeadDim = T::kHeadDim;
  using Scheduler = hopper::VarlenSchedule;
  const auto a = args.as<typename T::Element>();  // Q, K, V, O in the kernel's element type
  auto* kernel = persistent_kernel<Scheduler, T, kCausal>;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  int(T::kSmemBytes)));
  const auto& sh = args.shape;
  if (args.cu_seqlens_q == nullptr || args.cu_seqlens_k == nullptr)
    throw std::logic_error("varlen_prefill was launched without cu_seqlens (AttentionArgs::cu_seqlens_q/k)");
  if (args.sm_count < 1) throw std::logic_error("a persistent grid needs the SM count (AttentionArgs::sm_count)");
  // Planned from the lengths cu_seqlens was built from; passed by value (a kernel parameter).
  const hopper::VarlenPlan plan = hopper::make_varlen_plan(sh.q_lens, sh.heads, T::kBlockM, kCausal, kLongestFirst);
  if (plan.n_tiles == 0) return;  // no queries: nothing to write
  const CUtensorMap tm_q = hopper::make_varlen_tensor_map(a.q, sh.total_q(), sh.heads, kHeadDim, T::kBlockM);
  const CUtensorMap tm_k = hopper::make_varlen_tensor_map(a.k, sh.total_k(), sh.hkv(), kHeadDim, T::kBlockN);
  const CUtensorMap tm_v = hopper::make_varlen_tensor_map(a.v, sh.total_k(), sh.hkv(), kHeadDim, T::kBlockN);
  // O is stored by each consumer warpgroup: 64 rows, one 64-column block per copy.
  const CUtensorMap tm_o = hopper::make_varlen_tensor_map(a.o, sh.total_q(), sh.heads, kHeadDim, 64, 1);
  const int grid = std::min(plan.n_tiles, args.sm_count);
  kernel<<<grid, T::kThreads, T::kSmemBytes, stream>>>(tm_q, tm_k, tm_v, tm_o, plan, a.o, args.cu_seqlens_q,
                                                       args.cu_seqlens_k, sh.group(),
                                                       args.softmax_scale * ladder::kLog2e);
  CUDA_CHECK_LAUNCH("persistent_kernel");
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

std::optional<std::string> refusal(const ladder::AttentionShape& s) {
  if (!s.varlen()) return "a packed variable-length batch only (--varlen); the dense problem is 26/group_order's";
  if (s.decode()) return "every sequence needs as many keys as queries (fewer queries than keys is decode: step 28)";
  if (auto why = hopper::varlen_plan_refusal(s.q_lens, 128, s.causal)) return why;
  return hopper::refuse_unless_sm90();
}

template <bool kLongestFirst>
ladder::Variant variant(const char* name, const char* description) {
  return ladder::attention_variant(name, description, launch<kLongestFirst>)
      .needs_sm(90)
      .for_head_dims({64, 128})
      .for_dtypes({ladder::DType::F16, ladder::DType::BF16})
      .serves({ladder::Feature::Gqa, ladder::Feature::Varlen})
      .refuse_if(refusal)
      .with_kernels([](int d) { return d == 128 ? kernels<128>() : kernels<64>(); });
}

LADDER_REGISTER_STEP(
    ladder::attention_step(27, "varlen_prefill", "Varlen prefill: a tile list over cu_seqlens, no padding, longest first", "26/group_order")
        .add(variant<true>("longest_first", "26/group_order over a packed batch: Σ ceil(Nq_b/128)·H tiles, longest processing time first, snake rows"))
        .add(variant<false>("in_order", "the same tiles in the batch's order, sequence by sequence").compared_with("27/longest_first"))
        .main_is("longest_first"));

}  // namespace
