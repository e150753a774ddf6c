// Step 40 — the dQ writer warp: the consumers hand dQ to a warp that adds it.
//
// In steps 36 and 39 every consumer warp adds its own 16 rows of dQ: lane 0 waits until its
// staging buffer's last bulk add has read it, issues the next one, and in step 39 also waits for
// its turn (an acquire load that goes to the L2 and back) and for the previous add to complete.
// While lane 0 waits, its warp waits, and the tensor cores with it. FlashAttention-3 gives that
// work to a warp of its own (the producer warpgroup's second warp), and so does this step:
//
//   * the consumers store a block's dQ into one of kDqStages staging buffers (the whole block,
//     kBlockM × D floats in the accumulator's own fragment order, so it is one contiguous bulk
//     add) and arrive on that buffer's "full" barrier; they wait only when the buffer is still
//     being read from kDqStages blocks ago;
//   * the writer warp syncs on "full", issues the block's one bulk reduce-add, and arrives on the
//     buffer's "empty" barrier once the add has read it;
//   * ordered (step 39's order): before the add the writer waits for the block's turn, and it
//     passes the turn on as soon as the add is complete. One semaphore per (head, query block),
//     not per consumer warp: one add a block. A turn now waits for one add's latency, not for a
//     whole block of the key block before.
//
// atomic is step 36's shared_space kernel with the writer (no order: the adds of a query block's
// key blocks meet in the L2 in whatever order they come); ordered is step 39's ordered kernel
// with it (the same turns, walks and grid).
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

template <int kHeadDim_, class Element_, int kBlockM_, bool kOrdered_>
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
  static constexpr bool kOrdered = kOrdered_;      // dQ added in key-block order (step 39's turns)
  static constexpr int kDqChunk = 64;              // dQ columns per wgmma chain
  static constexpr int kDqWarpFloats = 16 * kDqChunk;  // a warp's rows of one dQ product
  static constexpr std::uint32_t kKVBytes = kBlockN * kHeadDim * sizeof(Element);  // K or V
  static constexpr std::uint32_t kQBytes = kBlockM * kHeadDim * sizeof(Element);   // Q or dO
  static constexpr std::uint32_t kDsBytes = kBlockN * kBlockM * sizeof(Element);   // one dSᵀ buffer
  static constexpr std::uint32_t kRowBytes = kBlockM * sizeof(float);              // lse or D
  static_assert(kHeadDim % kDqChunk == 0 && kBlockM % 64 == 0 && kRowPad % kBlockM == 0 &&
                kRowBytes % 16 == 0);
  static constexpr int kDqProducts = (kBlockM / 64) * (kHeadDim / kDqChunk);
  static_assert(kDqProducts == kConsumers, "one dQ product a consumer: a warp stages one piece a block");
  static constexpr int kDqTileFloats = 64 * kDqChunk;            // one product: 64 rows × 64 columns
  static constexpr int kDqBlockFloats = kBlockM * kHeadDim;      // a block's dQ, one bulk add
  // Staging buffers: two where they fit. At D = 64 the two dSᵀ buffers of 128 × 128 leave room for
  // one (the static_assert on kSmemBytes below says so if that changes).
  static constexpr int kDqStages = kHeadDim == 128 ? 2 : 1;
  static_assert(kDqStages <= hopper::kMaxDqStages);
  static constexpr int kDqArrivals = kConsumers * kWarpgroupThreads + 32;  // + the writer warp
  static_assert(kProducerRegisters * kWarpgroupThreads +
                    kConsumerRegisters * kConsumers * kWarpgroupThreads <= 65536);
  static_assert(kKVBytes % hopper::kSwizzleAlign == 0 && kQBytes % hopper::kSwizzleAlign == 0);

  struct Storage {
    alignas(hopper::kSwizzleAlign) Element k[kBlockN * kHeadDim];  // [D/64][kBlockN][64]
    alignas(hopper::kSwizzleAlign) Element v[kBlockN * kHeadDim];
    alignas(hopper::kSwizzleAlign) Element q[kStages][kBlockM * kHeadDim];  // [D/64][kBlockM][64]
    alignas(hopper::kSwizzleAlign) Element d_o[kStages][kBlockM * kHeadDim];
    alignas(hopper::kSwizzleAlign) Element ds[kDsStages][kBlockN * kBlockM];  // [kBlockM/64][kBlockN][64]
    alignas(16) float dq[kDqStages][kDqBlockFloats];  // a block's dQ, in DqFragments order
    alignas(16) float lse[kStages][kBlockM];  // lse·log2(e) of the stage's query rows
    alignas(16) float d[kStages][kBlockM];    // D_i of the stage's query rows
    std::uint64_t kv_full;                    // K and V have landed
    std::uint64_t full[kStages];              // stage s's Q, dO, lse, D have landed
    std::uint64_t empty[kStages];             // every consumer thread is done with stage s
  };
  static constexpr std::size_t kSmemBytes = hopper::smem_bytes_for<Storage>;
  static_assert(kSmemBytes <= 227 * 1024, "more shared memory than a Hopper CTA may have");
};

// ---- The main kernel ------------------------------------------------------------------------------
// grid (ceil(N / kBlockN), B·H): the key blocks of one head dispatched together (ordered and
// causal: the last first). rotate (ordered): the no-mask walk starts at each key block's diagonal
// and wraps (step 39).
template <class T, bool kCausal>
__global__ void __launch_bounds__(T::kThreads, 1)
    dq_writer_kernel(const __grid_constant__ CUtensorMap tm_q,
                                const __grid_constant__ CUtensorMap tm_k,
                                const __grid_constant__ CUtensorMap tm_v,
                                const __grid_constant__ CUtensorMap tm_do,
                                const float* __restrict__ lse_log2, const float* __restrict__ d_rows,
                                float* __restrict__ dq_acc, int* __restrict__ dq_sem,
                                typename T::Element* __restrict__ dk, typename T::Element* __restrict__ dv,
                                int n, int n_pad, int sems_per_head, bool rotate, float scale_log2, float scale) {
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
  const int bh = blockIdx.y;
  const int key_blocks = int(gridDim.x);
  const int key_block = T::kOrdered && kCausal ? key_blocks - 1 - int(blockIdx.x) : int(blockIdx.x);
  const int kv_start = key_block * kBlockN;
  const int diagonal = kv_start / kBlockM;  // the first query block that reaches this key block's keys
  const int m_begin = kCausal ? diagonal : 0;  // causal: no block that ends before the keys
  const int m_end = ceil_div(n, kBlockM);
  const int m_count = m_end - m_begin;
  // The i-th query block of the walk: in order, or (rotate) from the diagonal around.
  auto m_at = [&](int i) {
    if (kCausal || !rotate || !T::kOrdered) return m_begin + i;
    const int m = diagonal + i;
    return m < m_end ? m : m - m_end;
  };
  // This key block's turn at query block m: how many key blocks add into m before it.
  auto turn_at = [&](int m) {
    const int nearest = min(key_blocks - 1, (m * kBlockM + kBlockM - 1) / kBlockN);  // the last key block m meets
    if constexpr (kCausal) return nearest - key_block;  // from the last key block down to 0
    if (!rotate) return key_block;
    const int first = min(key_blocks - 1, m * kBlockM / kBlockN);  // starts nearest below m
    const int t = first - key_block;
    return t >= 0 ? t : t + key_blocks;
  };
  if (tid == 0) hopper::init_backward_cta<kStages>(st, kEmptyArrivals, &tm_q, &tm_k, &tm_v, &tm_do);
  __syncthreads();

  float* dq_head = dq_acc + std::int64_t(bh) * n_pad * kHeadDim;
  if (warpgroup == 0) {
    // ---- Producer: K and V once, then the query blocks through the ring (step 25's) ----
    hopper::setmaxnreg_dec<T::kProducerRegisters>();
    const int warp = tid / 32;
    if (tid == 0) {
      hopper::mbarrier_arrive_expect_tx(&st.kv_full, 2 * T::kKVBytes);
      hopper::tma_load_tile(st.k, &tm_k, &st.kv_full, kv_start, bh);
      hopper::tma_load_tile(st.v, &tm_v, &st.kv_full, kv_start, bh);
      const float* lse_head = lse_log2 + std::int64_t(bh) * n_pad;
      const float* d_head = d_rows + std::int64_t(bh) * n_pad;
      for (int i = 0; i < m_count; ++i)
        hopper::load_query_stage<T::kQBytes, T::kRowBytes, kStages>(st, i, &tm_q, &tm_do, m_at(i) * kBlockM,
                                                                    bh, lse_head, d_head);
    }
    if (warp != 1) return;
    // ---- The dQ writer (the producer warpgroup's second warp): one bulk add a block ----
    const int lane = tid % 32;
    for (int i = 0; i < m_count; ++i) {
      const int m = m_at(i);
      const int buffer = i % T::kDqStages;
      hopper::named_barrier_sync<T::kDqArrivals>(hopper::dq_full_barrier(buffer));  // staged and fenced
      if (lane == 0) {
        int* sem = T::kOrdered ? dq_sem + std::int64_t(bh) * sems_per_head + m : nullptr;
        if constexpr (T::kOrdered) {
          bwd::wait_turn(sem, turn_at(m));
          hopper::fence_proxy_async_global();  // the acquire before the async add
        }
        // The block's rows are one contiguous run of the accumulator (kBlockM divides kRowPad).
        hopper::bulk_reduce_add_f32(dq_head + DqLayout::offset<kHeadDim>(m * kBlockM, 0), st.dq[buffer],
                                    T::kDqBlockFloats * sizeof(float));
        hopper::tma_store_commit();
        if constexpr (T::kOrdered) {  // complete, then the next key block's turn
          hopper::tma_store_wait_all();
          hopper::fence_proxy_async_global();  // the async add before the release
          bwd::pass_turn(sem, turn_at(m) + 1);
        } else {
          hopper::tma_store_wait_read();  // read: the buffer may be refilled
        }
      }
      __syncwarp();
      // The consumers wait on "empty" for the blocks i + kDqStages, … only: no arrival is left over.
      if (i + T::kDqStages < m_count)
        hopper::named_barrier_arrive<T::kDqArrivals>(hopper::dq_empty_barrier(buffer));
    }
    if (lane == 0) hopper::tma_store_wait_all();  // the last add, before shared memory goes
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

  auto block = [&](int it, auto masked) {  // the walk's it-th query block
    const int m = m_at(it);
    const int buffer = it % T::kDqStages;
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
      // Into the staging buffer, once the writer has read its block of kDqStages ago; the
      // warp's 16 rows at their place in the block's run of the accumulator.
      if (i == 0 && it >= T::kDqStages)
        hopper::named_barrier_sync<T::kDqArrivals>(hopper::dq_empty_barrier(buffer));
      hopper::stage_dq_rows(dq, st.dq[buffer] + product * T::kDqTileFloats + warp_in_wg * T::kDqWarpFloats, lane);
    }
    hopper::fence_proxy_async_smem();  // the writer's bulk add reads what the stores wrote
    hopper::named_barrier_arrive<T::kDqArrivals>(hopper::dq_full_barrier(buffer));
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
  // (Causal: the straddling blocks are the walk's first; without a mask, all blocks or none.)
  int it = 0;
  for (; it < m_masked_end - m_begin; ++it) block(it, std::true_type{});
  for (; it < m_count; ++it) block(it, std::false_type{});

  // Epilogue: dK = scale · dSᵀ Q; rows past N are not stored.
#pragma unroll
  for (int i = 0; i < kHeadDim / 2; ++i) acc_dk[i] *= scale;
  const std::int64_t head = std::int64_t(bh) * n * kHeadDim;
  hopper::store_o_rows<kHeadDim>(acc_dk, dk + head, kv_start + key_local, n, t);
  hopper::store_o_rows<kHeadDim>(acc_dv, dv + head, kv_start + key_local, n, t);
#elif defined(__CUDA_ARCH__)
  __trap();  // built without sm_90a: never reached (the variant refuses), never silent
#endif  // LADDER_SM90A
}

// ---- Host side --------------------------------------------------------------------------------
template <int kHeadDim>
inline constexpr int kBlockMOf = kHeadDim == 64 ? 128 : 64;  // step 25's two_consumers tiles
template <int kHeadDim, class Element, bool kOrdered>
using TileOf = Tile<kHeadDim, Element, kBlockMOf<kHeadDim>, kOrdered>;

// Semaphores a head (ordered): one per query block; the smallest query block is 64 rows, so at
// most n_pad / 64 (<= n_pad, what the preprocess zeroes).
int semaphores_per_head(int n) { return bwd::padded_rows(n) / 64; }

template <bool kOrdered>
void launch(const BackwardArgs& args, cudaStream_t stream) {
  bwd::dispatch(args, [&]<class Element, int kHeadDim, bool kCausal>() {
    using T = TileOf<kHeadDim, Element, kOrdered>;
    const auto a = args.as<Element>();
    const int n = args.shape.seqlen;
    const int heads = args.shape.batch * args.shape.heads;
    const int sems = kOrdered ? semaphores_per_head(n) : 0;
    bwd::run<RowDot, DqLayout, Element, kHeadDim>(args, stream, sems, [&](const bwd::Workspace& ws) {
      auto map = [&](const Element* x, int rows) {
        return hopper::make_attention_tensor_map(x, heads, n, kHeadDim, rows);
      };
      const int key_blocks = ceil_div(n, T::kBlockN);
      const dim3 grid{unsigned(key_blocks), unsigned(heads)};
      // Step 39's rule: the rotated walk's cycle of waits only while a head's key blocks fit on the
      // GPU at once (one CTA an SM); beyond that, the ascending order.
      const bool rotate = !kCausal && key_blocks <= (args.sm_count > 0 ? args.sm_count : 1);
      bwd::launch_main<T>(dq_writer_kernel<T, kCausal>, "dq_writer_kernel", grid, stream, map(a.q, T::kBlockM),
                          map(a.k, T::kBlockN), map(a.v, T::kBlockN), map(a.d_o, T::kBlockM), ws.lse_log2, ws.delta,
                          ws.dq_accum, ws.dq_sem, a.dk, a.dv, n, bwd::padded_rows(n), sems, rotate,
                          args.softmax_scale * ladder::kLog2e, args.softmax_scale);
    });
  });
}

template <bool kOrdered>
ladder::Variant variant(const char* name, const char* description) {
  auto rows = [=]<class Element, int kHeadDim>(std::vector<ladder::KernelInfo>& out, const char* type) {
    using T = TileOf<kHeadDim, Element, kOrdered>;
    const auto main = ladder::strprintf("dq_writer_kernel<D=%d,%dx%d,%s%s>", kHeadDim, T::kBlockN, T::kBlockM,
                                        name, type);
    bwd::add_kernel_rows<RowDot, DqLayout, T>(out, type, main, dq_writer_kernel<T, false>,
                                              dq_writer_kernel<T, true>);
  };
  const auto sems = [](int n) { return kOrdered ? semaphores_per_head(n) : 0; };
  auto v = bwd::variant<DqLayout>(name, description, launch<kOrdered>, sems, rows)
               .batch_heads_on_grid_yz()
               .needs_sm(90)
               .refuse_if([](const ladder::AttentionShape&) { return hopper::refuse_unless_sm90(); });
  if (!kOrdered) v.nondeterministic();  // dQ: float adds from every key block, in no fixed order
  return v;
}

LADDER_REGISTER_STEP(
    ladder::backward_step(40, "dq_writer", "The dQ writer warp: the consumers hand dQ to a warp that adds it",
                          "39/ordered")
        .add(variant<false>("atomic",
                            "36/shared_space with each block's dQ staged whole and added by a writer warp (one "
                            "bulk add a block, off the consumers' path)"))
        .add(variant<true>("ordered",
                           "39/ordered with the writer warp: it waits for the block's turn and passes it on once "
                           "its add is complete (a semaphore per query block)"))
        .main_is("ordered"));

}  // namespace
