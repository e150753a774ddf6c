// Step 25 — the attention backward on Hopper: wgmma, TMA and a producer warp.
//
// Step 24 computes the backward with mma.sync: a CTA owns a block of keys, keeps dK and dV in
// registers and walks the query blocks, recomputing P from Q, K and the forward's LSE. This step
// is the same algorithm (FlashAttention-2's, in FlashAttention-3's Hopper design) on Part IV's
// skeleton (common/device/hopper/):
//
//   * a producer warp loads the CTA's K and V once, then feeds a ring of query-block stages — Q,
//     dO and the rows' two statistics, lse·log2(e) and D_i = rowsum(dO∘O) — with TMA and
//     mbarriers (pipeline.cuh's protocol: full/empty pairs, parity from one position counter);
//   * each consumer warpgroup owns 64 keys of the block. Its five GEMMs are wgmma:
//       Sᵀ  = K Qᵀ          SS, both K-major                  (64 keys × kBlockM queries)
//       dPᵀ = V dOᵀ         SS, both K-major
//       Pᵀ  = exp2(Sᵀ·scale·log2e − lse·log2e),  dSᵀ = Pᵀ ∘ (dPᵀ − D)   in registers
//       dV += Pᵀ dO         RS: Pᵀ straight from the accumulator, dO MN-major (as V in P·V)
//       dK += dSᵀ Q         RS: dSᵀ from registers, Q MN-major
//       dQ  = dS K          SS, both MN-major (imm-trans-a/b): dS staged in shared memory
//     Computing Sᵀ and dPᵀ rather than S and dP (FlashAttention-3's "SdP_swapAB") puts the keys on
//     the accumulator's rows, which is exactly the A operand of dV and dK: P and dS never leave
//     registers for those two. Only dQ needs dS with queries on the rows; the warpgroups write
//     dSᵀ (rows keys, queries contiguous) and wgmma reads it transposed;
//   * dQ sums over every key block, i.e. over CTAs: each CTA adds its dS K into an fp32
//     accumulator in the workspace, a warp's 16 rows at a time staged in shared memory and added
//     by one bulk reduce-add in the L2 (float adds in no fixed order: reruns differ in the last
//     bits); the warpgroup's tensor cores run dK meanwhile;
//   * step 24's preprocess and convert (common/device/backward_prep.cuh) on this step's layout of
//     the accumulator: D_i and lse·log2(e) in rows padded to kRowPad (padding rows get lse = +inf
//     and D = 0, so their P and dS are exactly 0 without a mask), dQ = scale·accumulator.
//
// Ragged N: TMA zero-fills Q, dO, K, V rows past N; keys past N are masked (P = 0); query rows past
// N have P = 0 through their +inf lse; dK and dV rows past N are never stored. Causal: a key block
// skips the query blocks that end before its first key and masks the blocks that straddle the diagonal.
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
#include "steps/25_hopper_backward/test_probes.cuh"

namespace {

using ladder::BackwardArgs;
using ladder::ceil_div;
namespace bwd = ladder::bwd;
namespace hopper = ladder::hopper;
namespace ptx = ladder::ptx;
using step25::Probe;  // the test-only variants (test_probes.cuh)
using bwd::kRowPad;   // rows of the padded per-row buffers: a stage's statistics are one bulk copy
using DqLayout = bwd::DqFragments;  // the dQ accumulator in the consumers' fragment order
using RowDot = bwd::RowDot<32, true>;  // D_i: a warp a row, neighbouring lanes added first

constexpr int kWarpgroupThreads = 128;

template <int kHeadDim_, class Element_, int kConsumers_, int kBlockM_>
struct Tile {
  using Element = Element_;  // __half or __nv_bfloat16
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kConsumers = kConsumers_;                         // consumer warpgroups
  static constexpr int kThreads = (1 + kConsumers) * kWarpgroupThreads;  // + the producer
  static constexpr int kProducerRegisters = 24;
  static constexpr int kConsumerRegisters = 240;
  static constexpr int kBlockN = 64 * kConsumers;  // keys per CTA: 64 per consumer warpgroup
  static constexpr int kBlockM = kBlockM_;         // query rows per ring stage
  static constexpr int kStages = 2;                // Q/dO ring depth
  // dS is read by the dQ product of every warp of every consumer: the next block's dS goes to the
  // other buffer, so the one barrier per block also orders the reuse (see below).
  static constexpr int kDsStages = 2;
  static constexpr int kDqChunk = 64;  // dQ columns per wgmma chain (a 64-column block of K)
  // A warp's share of a 64 × 64 dQ product: its 16 rows, staged for one bulk reduce-add.
  static constexpr int kDqWarpFloats = 16 * kDqChunk;
  static constexpr std::uint32_t kKVBytes = kBlockN * kHeadDim * sizeof(Element);  // K or V
  static constexpr std::uint32_t kQBytes = kBlockM * kHeadDim * sizeof(Element);   // Q or dO
  static constexpr std::uint32_t kRowBytes = kBlockM * sizeof(float);              // lse or D
  static_assert(kHeadDim % kDqChunk == 0 && kBlockM % 64 == 0 && kRowPad % kBlockM == 0 &&
                kRowBytes % 16 == 0);
  // dQ is cut into 64 × 64 products (a 64-query column block of dSᵀ times a 64-column block of K),
  // dealt out to the consumers round-robin.
  static constexpr int kDqProducts = (kBlockM / 64) * (kHeadDim / kDqChunk);
  static_assert(kDqProducts % kConsumers == 0 && kDqProducts >= kConsumers,
                "every consumer takes the same number (at least one) of dQ products");
  static_assert(kProducerRegisters * kWarpgroupThreads +
                    kConsumerRegisters * kConsumers * kWarpgroupThreads <= 65536);
  static_assert(kKVBytes % hopper::kSwizzleAlign == 0 && kQBytes % hopper::kSwizzleAlign == 0);

  struct Storage {
    alignas(hopper::kSwizzleAlign) Element k[kBlockN * kHeadDim];  // [D/64][kBlockN][64]
    alignas(hopper::kSwizzleAlign) Element v[kBlockN * kHeadDim];
    alignas(hopper::kSwizzleAlign) Element q[kStages][kBlockM * kHeadDim];  // [D/64][kBlockM][64]
    alignas(hopper::kSwizzleAlign) Element d_o[kStages][kBlockM * kHeadDim];
    // dSᵀ: rows are the block's keys, columns its queries, [kBlockM/64][kBlockN][64].
    alignas(hopper::kSwizzleAlign) Element ds[kDsStages][kBlockN * kBlockM];
    // Each consumer warp's dQ rows of its current product, in fragment order (DqLayout).
    alignas(16) float dq[kConsumers * kWarpgroupThreads / 32][kDqWarpFloats];
    alignas(16) float lse[kStages][kBlockM];  // lse·log2(e) of the stage's query rows
    alignas(16) float d[kStages][kBlockM];    // D_i of the stage's query rows
    std::uint64_t kv_full;                    // K and V have landed
    std::uint64_t full[kStages];              // stage s's Q, dO, lse, D have landed
    std::uint64_t empty[kStages];             // every consumer thread is done with stage s
  };
  static constexpr std::size_t kSmemBytes = hopper::smem_bytes_for<Storage>;
  static constexpr bool kLateConsumers = false;  // the stress test's switch (test_probes.cuh)
  static constexpr bool kReleaseByWarp = false;  // the first release, timed against (test_probes.cuh)
};

// ---- The main kernel ------------------------------------------------------------------------------
// grid (B·H, ceil(N / kBlockN)): the key blocks of a head in y, so that (causal) the CTAs of key
// block 0, which visit every query block, are dispatched first and the short ones fill the end.
// With heads_on_y the grid is (ceil(N / kBlockN), B·H) instead: CTAs are dispatched head by head,
// so the resident ones add into the dQ accumulators of about two heads, not of every head.
template <class T, bool kCausal>
__global__ void __launch_bounds__(T::kThreads, 1)
    hopper_backward_kernel(const __grid_constant__ CUtensorMap tm_q,
                           const __grid_constant__ CUtensorMap tm_k,
                           const __grid_constant__ CUtensorMap tm_v,
                           const __grid_constant__ CUtensorMap tm_do,
                           const float* __restrict__ lse_log2, const float* __restrict__ d_rows,
                           float* __restrict__ dq_acc, typename T::Element* __restrict__ dk,
                           typename T::Element* __restrict__ dv, int n, int n_pad,
                           float scale_log2, float scale, bool heads_on_y) {
#if LADDER_SM90A
  using Element = typename T::Element;
  constexpr int kBlockM = T::kBlockM;
  constexpr int kBlockN = T::kBlockN;
  constexpr int kHeadDim = T::kHeadDim;
  constexpr int kStages = T::kStages;
  // Arrivals that free a stage: every consumer thread releases its own reads of the stage's lse
  // and D (WarpRelease: one lane per warp, after a __syncwarp).
  constexpr int kEmptyArrivals =
      T::kConsumers * (T::kReleaseByWarp ? kWarpgroupThreads / 32 : kWarpgroupThreads);
  extern __shared__ unsigned char smem_raw[];
  auto& st = hopper::aligned_smem<typename T::Storage>(smem_raw);

  const int tid = threadIdx.x;
  const int warpgroup = hopper::warpgroup_index();
  const int bh = heads_on_y ? blockIdx.y : blockIdx.x;
  const int kv_start = (heads_on_y ? blockIdx.x : blockIdx.y) * kBlockN;
  // The query blocks this key block meets: causal, none that ends before its first key.
  const int m_begin = kCausal ? kv_start / kBlockM : 0;
  const int m_end = ceil_div(n, kBlockM);
  if (tid == 0) hopper::init_backward_cta<kStages>(st, kEmptyArrivals, &tm_q, &tm_k, &tm_v, &tm_do);
  __syncthreads();

  if (warpgroup == 0) {
    // ---- Producer: K and V once, then the query blocks through the ring ----
    if constexpr (T::kConsumers > 1) hopper::setmaxnreg_dec<T::kProducerRegisters>();
    if (tid == 0) {
      hopper::mbarrier_arrive_expect_tx(&st.kv_full, 2 * T::kKVBytes);
      hopper::tma_load_tile(st.k, &tm_k, &st.kv_full, kv_start, bh);
      hopper::tma_load_tile(st.v, &tm_v, &st.kv_full, kv_start, bh);
      const float* lse_head = lse_log2 + std::int64_t(bh) * n_pad;
      const float* d_head = d_rows + std::int64_t(bh) * n_pad;
      for (int m = m_begin; m < m_end; ++m)  // ring position m − m_begin: Q, dO, lse and D
        hopper::load_query_stage<T::kQBytes, T::kRowBytes, kStages>(st, m - m_begin, &tm_q, &tm_do, m * kBlockM, bh,
                                                                    lse_head, d_head);
    }
    return;  // nothing after the split waits for the producer's threads
  }

  // ---- Consumers ----
  if constexpr (T::kConsumers > 1) hopper::setmaxnreg_inc<T::kConsumerRegisters>();
  const int consumer = warpgroup - 1;
  const int warp_in_wg = (tid % kWarpgroupThreads) / 32;
  const int lane = tid % 32;
  const int g = lane / 4;
  const int t = lane % 4;
  // This thread's rows of the warpgroup's accumulators: keys key_local, key_local + 8 of the block
  // (Sᵀ, dPᵀ, dK, dV); its dQ rows are the warp's 16 of a 64-query block (DqLayout).
  const int key_local = consumer * 64 + warp_in_wg * 16 + g;

  // Descriptor bases: this warpgroup's 64 keys of K and V (A of Sᵀ and dPᵀ); Q, dO, dS at stage 0.
  const std::uint32_t k_rows = ptx::smem_addr(st.k) + consumer * 64 * hopper::kSwizzleRowBytes;
  const std::uint32_t v_rows = ptx::smem_addr(st.v) + consumer * 64 * hopper::kSwizzleRowBytes;
  const std::uint32_t k_all = ptx::smem_addr(st.k);
  const std::uint32_t q_addr = ptx::smem_addr(st.q);
  const std::uint32_t do_addr = ptx::smem_addr(st.d_o);
  const std::uint32_t ds_addr = ptx::smem_addr(st.ds);

  float acc_dk[kHeadDim / 2], acc_dv[kHeadDim / 2];
#pragma unroll
  for (int i = 0; i < kHeadDim / 2; ++i) acc_dk[i] = acc_dv[i] = 0.f;
  float* dq_head = dq_acc + std::int64_t(bh) * n_pad * kHeadDim;
  hopper::mbarrier_wait(&st.kv_full, 0);

  auto block = [&](int m, auto masked) {
    const int it = m - m_begin;
    const int stage = hopper::ring_stage<kStages>(it);
    const std::uint32_t q_s = q_addr + stage * T::kQBytes;
    const std::uint32_t do_s = do_addr + stage * T::kQBytes;
    hopper::mbarrier_wait(&st.full[stage], hopper::ring_parity<kStages>(it));
    // Per block and left uninitialised: each product's first k16 step overwrites its accumulator
    // (accumulate = 0), so nothing of the previous block needs to stay live in them.
    float s[kBlockM / 2];   // Sᵀ, then Pᵀ
    float dp[kBlockM / 2];  // dPᵀ, then dSᵀ
    float dq[T::kDqChunk / 2];
    std::uint32_t p_a[kBlockM / 16][4];   // Pᵀ as the A operand of dV
    std::uint32_t ds_a[kBlockM / 16][4];  // dSᵀ as the A operand of dK

    // Sᵀ and dPᵀ, issued together; the exponential runs while dPᵀ is still in the tensor cores.
    hopper::wgmma_fence();
    hopper::issue_qk<kHeadDim, kBlockN, Element>(s, k_rows, q_s);
    hopper::wgmma_commit();
    hopper::issue_qk<kHeadDim, kBlockN, Element>(dp, v_rows, do_s);
    hopper::wgmma_commit();
    hopper::wgmma_wait<1>();
    hopper::fence_registers(s);
    if constexpr (decltype(masked)::value)
      hopper::mask_keys<kBlockM, kCausal>(s, kv_start + key_local, m * kBlockM, n, t);
    const float* lse = st.lse[stage];
    if constexpr (T::kLateConsumers) T::be_late();
    hopper::p_from_lse<kBlockM>(s, lse, scale_log2, t);  // Pᵀ = exp2(Sᵀ·scale·log2e − lse·log2e)
    hopper::wgmma_wait<0>();
    hopper::fence_registers(dp);
    const float* d = st.d[stage];
    if constexpr (T::kLateConsumers) T::be_late();
    hopper::ds_from_dp<kBlockM>(dp, s, d, t);  // dSᵀ = Pᵀ ∘ (dPᵀ − D)
    hopper::p_to_a<kBlockM, Element>(s, p_a);
    hopper::p_to_a<kBlockM, Element>(dp, ds_a);

    // dSᵀ into shared memory for dQ. Its buffer's previous readers are done: they read it two
    // blocks ago, and every consumer warp passed the previous block's barrier (below) only after
    // waiting for those products.
    const int ds_stage = it % T::kDsStages;
    hopper::stage_a_rows<kBlockM, kBlockN>(ds_a, st.ds[ds_stage], key_local, t);
    hopper::fence_proxy_async_smem();

    // dV += Pᵀ dO, A from registers; dK follows the first dQ product (below), so that the tensor
    // cores have dK to run while the warps write that product out.
    hopper::wgmma_fence();
    hopper::issue_pv<kBlockM, Element>(acc_dv, p_a, do_s);
    hopper::wgmma_commit();

    // dQ = dS K over the whole key block: every consumer's rows of dSᵀ must be in place.
    hopper::named_barrier_sync<T::kConsumers * kWarpgroupThreads>(int(hopper::NamedBarrier::kDsStaged));
    const std::uint32_t ds_s = ds_addr + ds_stage * (kBlockN * kBlockM * sizeof(Element));
#pragma unroll
    for (int i = 0; i < T::kDqProducts / T::kConsumers; ++i) {
      const int product = consumer + i * T::kConsumers;
      const int mb = product / (kHeadDim / T::kDqChunk);  // 64-query block of the stage
      const int c = product % (kHeadDim / T::kDqChunk);   // 64-column block of D
      // A: dSᵀ's column block mb, read transposed; B: K's column block c, read transposed.
      const std::uint32_t a_base = ds_s + mb * kBlockN * hopper::kSwizzleRowBytes;
      const std::uint32_t b_base = k_all + c * kBlockN * hopper::kSwizzleRowBytes;
      hopper::wgmma_fence();
      hopper::issue_ds_k<kBlockN, Element>(dq, a_base, b_base);
      hopper::wgmma_commit();
      if (i == 0) {
        // dK += dSᵀ Q, A from registers, queued behind this dQ product: waiting for all but the
        // newest group leaves dK running while dQ is written out.
        hopper::issue_pv<kBlockM, Element>(acc_dk, ds_a, q_s);
        hopper::wgmma_commit();
        hopper::wgmma_wait<1>();
        hopper::fence_registers(acc_dv);
        hopper::fence_registers(p_a);
      } else {
        hopper::wgmma_wait<0>();
      }
      hopper::fence_registers(dq);
      // The warp's 16 rows go to global memory by one bulk reduce-add: 8 shared stores a lane
      // and one bulk operation a warp. The warp and lane are re-read from threadIdx.x here
      // rather than kept live across the block.
      const int dq_lane = int(threadIdx.x) % 32;
      const int dq_warp = int(threadIdx.x) / 32 - kWarpgroupThreads / 32;  // among the consumers
      hopper::reduce_add_dq_rows(dq, st.dq[dq_warp], dq_lane, [&] {
        const int row = m * kBlockM + mb * 64 + (dq_warp % 4) * 16;  // < n_pad: kBlockM divides kRowPad
        return dq_head + DqLayout::offset<kHeadDim>(row, c * T::kDqChunk);
      });
    }
    // dK is done: dSᵀ's registers are free and the stage's Q and dO may be refilled. Each thread
    // arrives itself: its reads of lse and D are ordered before its own release (the arrive), and
    // the producer's acquire (its wait) before the next bulk copy into the stage, as CUTLASS's
    // pipelines release. A warp's lane 0 arriving for all 32 after a __syncwarp is the same in
    // practice but not in the memory model, which racecheck follows (chapter 25).
    hopper::wgmma_wait<0>();
    hopper::fence_registers(acc_dk);
    hopper::fence_registers(ds_a);
    if constexpr (T::kReleaseByWarp) {
      __syncwarp();
      if (lane == 0) hopper::mbarrier_arrive(&st.empty[stage]);
    } else {
      hopper::mbarrier_arrive(&st.empty[stage]);
    }
  };

  // Masked blocks first: every block of a key block with keys past N; causal, the query blocks
  // that straddle the diagonal (those before the first query block entirely at or after the
  // block's last key).
  const bool ragged_keys = kv_start + kBlockN > n;
  const int m_masked_end = ragged_keys ? m_end
                           : kCausal ? min(m_end, ceil_div(kv_start + kBlockN - 1, kBlockM))
                                     : m_begin;
  int m = m_begin;
  for (; m < m_masked_end; ++m) block(m, std::true_type{});
  for (; m < m_end; ++m) block(m, std::false_type{});

  // Epilogue: dK = scale · dSᵀ Q; rows past N are not stored.
#pragma unroll
  for (int i = 0; i < kHeadDim / 2; ++i) acc_dk[i] *= scale;
  const std::int64_t head = std::int64_t(bh) * n * kHeadDim;
  hopper::store_o_rows<kHeadDim>(acc_dk, dk + head, kv_start + key_local, n, t);
  hopper::store_o_rows<kHeadDim>(acc_dv, dv + head, kv_start + key_local, n, t);
  if (lane == 0) hopper::tma_store_wait_all();  // the last reduce, before shared memory goes
#elif defined(__CUDA_ARCH__)
  __trap();  // built without sm_90a: never reached (the variant refuses), never silent
#endif  // LADDER_SM90A
}

// ---- Host side --------------------------------------------------------------------------------
// The query rows per block of a variant at each head dimension.
template <int kConsumers, int kHeadDim>
inline constexpr int kBlockMOf = kConsumers == 1 ? 64 : (kHeadDim == 64 ? 128 : 64);
// The measured tile, or a test-only variant's change of it (test_probes.cuh).
template <int kHeadDim, class Element, int kConsumers, Probe kProbe = Probe::kNone>
using TileOf = step25::WithProbe<kProbe, Tile<kHeadDim, Element, kConsumers, kBlockMOf<kConsumers, kHeadDim>>>;

template <int kConsumers, bool kHeadsOnY, Probe kProbe>
void launch(const BackwardArgs& args, cudaStream_t stream) {
  bwd::dispatch(args, [&]<class Element, int kHeadDim, bool kCausal>() {
    using T = TileOf<kHeadDim, Element, kConsumers, kProbe>;
    const auto a = args.as<Element>();
    const int n = args.shape.seqlen;
    const int heads = args.shape.batch * args.shape.heads;
    bwd::run<RowDot, DqLayout, Element, kHeadDim>(args, stream, 0, [&](const bwd::Workspace& ws) {
      auto map = [&](const Element* x, int rows) {
        return hopper::make_attention_tensor_map(x, heads, n, kHeadDim, rows);
      };
      const unsigned key_blocks = unsigned(ceil_div(n, T::kBlockN));
      const dim3 grid = kHeadsOnY ? dim3(key_blocks, unsigned(heads)) : dim3(unsigned(heads), key_blocks);
      bwd::launch_main<T>(hopper_backward_kernel<T, kCausal>, "hopper_backward_kernel", grid, stream,
                          map(a.q, T::kBlockM), map(a.k, T::kBlockN), map(a.v, T::kBlockN), map(a.d_o, T::kBlockM),
                          ws.lse_log2, ws.delta, ws.dq_accum, a.dk, a.dv, n, bwd::padded_rows(n),
                          args.softmax_scale * ladder::kLog2e, args.softmax_scale, kHeadsOnY);
    });
  });
}

template <int kConsumers, bool kHeadsOnY = false, Probe kProbe = Probe::kNone>
ladder::Variant variant(const char* name, const char* description) {
  auto rows = [=]<class Element, int kHeadDim>(std::vector<ladder::KernelInfo>& out, const char* type) {
    using T = TileOf<kHeadDim, Element, kConsumers, kProbe>;
    const auto main = ladder::strprintf("hopper_backward_kernel<D=%d,%dx%d,%d stages%s%s>", kHeadDim, T::kBlockN,
                                        T::kBlockM, T::kStages, type, step25::probe_name(kProbe));
    bwd::add_kernel_rows<RowDot, DqLayout, T>(out, type, main, hopper_backward_kernel<T, false>,
                                              hopper_backward_kernel<T, true>);
  };
  const auto no_semaphores = [](int) { return 0; };
  auto v = bwd::variant<DqLayout>(name, description, launch<kConsumers, kHeadsOnY, kProbe>, no_semaphores, rows);
  // grid.y is the key blocks of a head, or (kHeadsOnY) the heads
  if (kHeadsOnY) v.batch_heads_on_grid_yz();
  else v.up_to_seqlen(std::int64_t(ladder::kMaxGridYZ) * 64 * kConsumers);
  return v.needs_sm(90)
      .refuse_if([](const ladder::AttentionShape&) { return hopper::refuse_unless_sm90(); })
      .nondeterministic();  // dQ: float adds from every key block, in no fixed order
}

LADDER_REGISTER_STEP(
    ladder::backward_step(25, "hopper_backward", "The Hopper backward: wgmma, TMA and a producer warp", "24/atomic")
        .add(variant<1>("one_consumer",
                        "64 keys per CTA, one consumer warpgroup: S^T, dP^T, dV, dK, dQ on wgmma, "
                        "Q/dO ring by TMA, dQ by fp32 bulk reduce-add"))
        .add(variant<2>("two_consumers",
                        "128 keys per CTA, two consumer warpgroups (64 keys each) and setmaxnreg; "
                        "FlashAttention-3's tiles: 128 query rows per block at D=64, 64 at D=128"))
        .add(variant<2, true>("head_by_head",
                              "two_consumers with the grid's axes swapped: the key blocks of one "
                              "head are dispatched together, so dQ's accumulators stay in L2"))
        .add(variant<2, true, Probe::kLateConsumers>("late_consumers",
                                    "head_by_head with every consumer warp late to read each stage's lse "
                                    "and D (a clock spin): dK and dV must not change")
                 .compared_with("25/head_by_head")
                 .test_only_because("a stress test of the ring's release (chapter 25, "
                                    "\"What racecheck reports\"); not a rung"))
        .add(variant<2, true, Probe::kWarpRelease>("warp_release",
                                    "head_by_head with the first release: lane 0 of each warp arrives "
                                    "for the warp after a __syncwarp")
                 .compared_with("25/head_by_head")
                 .test_only_because("the release racecheck flags, kept to time every thread's "
                                    "release against (chapter 25, \"What racecheck reports\"); not a rung"))
        .main_is("head_by_head"));

}  // namespace
