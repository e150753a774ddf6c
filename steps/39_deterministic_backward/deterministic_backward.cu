// Step 39 — a deterministic backward: dQ added in key-block order.
//
// Every backward so far adds a query block's dQ into its fp32 accumulator from every key block's
// CTA in whatever order the CTAs get there: float addition is not associative, so reruns differ
// in the last bits (step 25's chapter measured by how much). Training that must reproduce a run
// bit for bit asks for a fixed order. Here the key blocks add their shares of each query block in
// an order fixed by the shape, the same on every run (FlashAttention-3's deterministic mode, with
// the semaphores of step 24's `deterministic` variant):
//
//   * a semaphore per (head, query block, consumer warp): each of the 8 consumer warps reduces
//     its own 16 rows × 64 columns of the block's dQ, the same rows in every CTA, so the warps of
//     one CTA never wait for one another, only for the same warp of the key block before it in the order;
//   * lane 0 waits (an acquire load) until the semaphore holds its turn, then issues its bulk
//     reduce-add; it passes the turn on (a release store) only once that add is complete, which
//     it checks a block later, at its next add, when it is long done: off the products' path.
//
// Which order? Ascending key blocks over the natural walk (every CTA from query block 0 up) is a
// staircase: key block kb's first add waits for kb − 1's, which waits for kb − 2's…, so CTA kb
// idles about kb blocks and a head's CTAs take nearly twice as long. The order must follow the
// order in which the CTAs reach a query block anyway:
//   * causal: key block kb starts at the diagonal, query block kb·kBlockN/kBlockM, so the LAST key
//     block that reaches a query block gets there first. The turns go from that key block down
//     to 0, and the grid is numbered in reverse (x = 0 is the last key block), so a CTA only ever
//     waits for one dispatched before it (FlashAttention-3's "SPT" order);
//   * no mask: key block kb starts its walk at that same query block and wraps around, so at
//     every step the CTAs of a head are at different query blocks; the turns of a query block go
//     from the key block that starts nearest below it downwards, cyclically. Each CTA waits only
//     for the next key block, which reached the query block a block earlier. That waits for CTAs
//     dispatched after it (the cycle closes), which is safe only while all of a head's key blocks
//     can be resident at once: with more key blocks than SMs the kernel takes the ascending order.
//
// Everything else is step 36's shared_space kernel.
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
  static_assert(kDqProducts == kConsumers, "one dQ product a consumer: a warp reduces one piece a block");
  static constexpr int kDqSlots = kConsumers * kWarpgroupThreads / 32;  // semaphores per query block
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
// grid (ceil(N / kBlockN), B·H): the key blocks of one head dispatched together (causal: the last
// first). rotate: the no-mask walk starts at each key block's diagonal and wraps (see above).
template <class T, bool kCausal>
__global__ void __launch_bounds__(T::kThreads, 1)
    deterministic_backward_kernel(const __grid_constant__ CUtensorMap tm_q,
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
  const int key_block = kCausal ? key_blocks - 1 - int(blockIdx.x) : int(blockIdx.x);
  const int kv_start = key_block * kBlockN;
  const int diagonal = kv_start / kBlockM;  // the first query block that reaches this key block's keys
  const int m_begin = kCausal ? diagonal : 0;  // causal: no block that ends before the keys
  const int m_end = ceil_div(n, kBlockM);
  const int m_count = m_end - m_begin;
  // The i-th query block of the walk: in order, or (rotate) from the diagonal around.
  auto m_at = [&](int i) {
    if (kCausal || !rotate) return m_begin + i;
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

  if (warpgroup == 0) {
    // ---- Producer: K and V once, then the query blocks through the ring (step 25's) ----
    hopper::setmaxnreg_dec<T::kProducerRegisters>();
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
  float* dq_head = dq_acc + std::int64_t(bh) * n_pad * kHeadDim;
  // This warp's semaphore of query block m, and the turn it passes once its add of block m is
  // complete (lane 0 only; -1: nothing to pass yet).
  const int slot = int(threadIdx.x) / 32 - kWarpgroupThreads / 32;  // among the consumer warps
  auto sem_of = [&](int m) { return dq_sem + std::int64_t(bh) * sems_per_head + m * T::kDqSlots + slot; };
  int pending_m = -1;
  auto pass_pending_turn = [&] {  // the last add is complete: its turn goes to the next key block
    if (pending_m < 0) return;
    hopper::tma_store_wait_all();
    hopper::fence_proxy_async_global();  // the async add before the release
    bwd::pass_turn(sem_of(pending_m), turn_at(pending_m) + 1);
  };
  hopper::mbarrier_wait(&st.kv_full, 0);

  auto block = [&](int it, auto masked) {  // the walk's it-th query block
    const int m = m_at(it);
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
      // In key-block order: the previous block's add is long complete (pass its turn on), then
      // wait for this block's turn. Only lane 0 adds, so only lane 0 waits.
      if (dq_lane == 0) {
        pass_pending_turn();
        bwd::wait_turn(sem_of(m), turn_at(m));
        hopper::fence_proxy_async_global();  // the acquire before the async add
        pending_m = m;
      }
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
  if (lane == 0) pass_pending_turn();  // the last add: complete, and its turn passed on
#elif defined(__CUDA_ARCH__)
  __trap();  // built without sm_90a: never reached (the variant refuses), never silent
#endif  // LADDER_SM90A
}

// ---- Host side --------------------------------------------------------------------------------
template <int kHeadDim>
inline constexpr int kBlockMOf = kHeadDim == 64 ? 128 : 64;  // step 25's two_consumers tiles
template <int kHeadDim, class Element>
using TileOf = Tile<kHeadDim, Element, kBlockMOf<kHeadDim>>;

// Semaphores a head: one per (query block, consumer warp); the smallest query block is 64 rows and
// a block has 8 consumer warps, so at most n_pad / 8 (<= n_pad, what the preprocess zeroes).
int semaphores_per_head(int n) { return bwd::padded_rows(n) / 64 * 8; }

void launch(const BackwardArgs& args, cudaStream_t stream) {
  bwd::dispatch(args, [&]<class Element, int kHeadDim, bool kCausal>() {
    using T = TileOf<kHeadDim, Element>;
    const auto a = args.as<Element>();
    const int n = args.shape.seqlen;
    const int heads = args.shape.batch * args.shape.heads;
    const int sems = semaphores_per_head(n);
    bwd::run<RowDot, DqLayout, Element, kHeadDim>(args, stream, sems, [&](const bwd::Workspace& ws) {
      auto map = [&](const Element* x, int rows) {
        return hopper::make_attention_tensor_map(x, heads, n, kHeadDim, rows);
      };
      const int key_blocks = ceil_div(n, T::kBlockN);
      const dim3 grid{unsigned(key_blocks), unsigned(heads)};
      // The rotated walk's cycle of waits is safe while a head's key blocks fit on the GPU at once
      // (one CTA an SM); beyond that, the ascending order (slower, never stuck).
      const bool rotate = !kCausal && key_blocks <= (args.sm_count > 0 ? args.sm_count : 1);
      bwd::launch_main<T>(deterministic_backward_kernel<T, kCausal>, "deterministic_backward_kernel", grid, stream,
                          map(a.q, T::kBlockM), map(a.k, T::kBlockN), map(a.v, T::kBlockN), map(a.d_o, T::kBlockM),
                          ws.lse_log2, ws.delta, ws.dq_accum, ws.dq_sem, a.dk, a.dv, n, bwd::padded_rows(n), sems, rotate,
                          args.softmax_scale * ladder::kLog2e, args.softmax_scale);
    });
  });
}

ladder::Variant variant(const char* name, const char* description) {
  auto rows = [=]<class Element, int kHeadDim>(std::vector<ladder::KernelInfo>& out, const char* type) {
    using T = TileOf<kHeadDim, Element>;
    const auto main = ladder::strprintf("deterministic_backward_kernel<D=%d,%dx%d%s>", kHeadDim, T::kBlockN,
                                        T::kBlockM, type);
    bwd::add_kernel_rows<RowDot, DqLayout, T>(out, type, main, deterministic_backward_kernel<T, false>,
                                              deterministic_backward_kernel<T, true>);
  };
  return bwd::variant<DqLayout>(name, description, launch, semaphores_per_head, rows)
      .batch_heads_on_grid_yz()
      .needs_sm(90)
      .refuse_if([](const ladder::AttentionShape&) { return hopper::refuse_unless_sm90(); });
}

LADDER_REGISTER_STEP(
    ladder::backward_step(39, "deterministic_backward", "A deterministic backward: dQ added in key-block order",
                          "36/shared_space")
        .add(variant("ordered",
                     "36/shared_space with each query block's dQ added by the key blocks in order (a "
                     "semaphore per query block and consumer warp): reruns bit-identical"))
        .main_is("ordered"));

}  // namespace
