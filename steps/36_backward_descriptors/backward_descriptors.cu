// Step 36 — the backward's issue path: descriptors built once, shared memory by name.
//
// Step 25 runs FlashAttention-3's backward design: the same tiles, the same five products, the
// same order. Beside FlashAttention-4's port of it on the H200 it is 0.83-0.86× as fast, and
// Nsight Compute says why: at the same shape it executes 1.3× (D = 64) to 1.8× (D = 128) as many
// instructions for the same 33-67 M wgmmas, and its warps stall twice as often on fixed latencies
// ("wait") and on the long scoreboard. Two things are in the excess, both on the path that issues
// the warpgroup's products:
//
//   * wgmma descriptors built from byte addresses (desc_k_major, desc_mn_major) for each of a
//     block's 32-48 wgmmas: some seven uniform-datapath instructions each (ULOP3, USHF, UMOV,
//     UIADD3), 5× FlashAttention-4's. Step 33 took them out of the forward; here the descriptors
//     of K, V (the warpgroup's rows and all of them), Q, dO and dSᵀ (stage 0) are built once and
//     every operand is one of them plus a constant (desc_advance, gemm.cuh);
//   * shared memory read and written as generic memory. hopper::aligned_smem rounds the base
//     through an integer, which hides from the compiler that the Storage lives in shared memory,
//     so a block's 32 reads of lse and D are LD (long scoreboard: every exponential waits on one)
//     and its dSᵀ and dQ stores are ST. aligned_smem_shared keeps the pointer's provenance: LDS
//     and STS. And dSᵀ is staged with stmatrix, a warp's 16 × 16 slice per instruction where the
//     4-byte stores took eight.
//
// Nothing else changes: the tiles (128 keys per CTA; 128 query rows per block at D = 64, 64 at
// D = 128), the ring, the products and their order, the dQ bulk reduce-adds, the grid of step
// 25's head_by_head. Each variant adds one of the three changes to the one before.
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

// What a variant changes on the issue path (each includes the ones before it).
enum class Lean { kDescriptors, kSharedSpace, kStmatrix };

template <int kHeadDim_, class Element_, int kBlockM_, Lean kLean_>
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
  static constexpr bool kSharedSpace = kLean_ != Lean::kDescriptors;
  static constexpr bool kStmatrix = kLean_ == Lean::kStmatrix;
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

  __device__ __forceinline__ static Storage& storage(unsigned char* raw) {
    if constexpr (kSharedSpace) return hopper::aligned_smem_shared<Storage>(raw);
    else return hopper::aligned_smem<Storage>(raw);
  }
};

// ---- The main kernel ------------------------------------------------------------------------------
// grid (ceil(N / kBlockN), B·H): the key blocks of one head are dispatched together, so the
// resident CTAs add into the dQ accumulators of about two heads (step 25's head_by_head).
template <class T, bool kCausal>
__global__ void __launch_bounds__(T::kThreads, 1)
    backward_descriptors_kernel(const __grid_constant__ CUtensorMap tm_q,
                                const __grid_constant__ CUtensorMap tm_k,
                                const __grid_constant__ CUtensorMap tm_v,
                                const __grid_constant__ CUtensorMap tm_do,
                                const float* __restrict__ lse_log2, const float* __restrict__ d_rows,
                                float* __restrict__ dq_acc, typename T::Element* __restrict__ dk,
                                typename T::Element* __restrict__ dv, int n, int n_pad, float scale_log2,
                                float scale) {
#if LADDER_SM90A
  using Element = typename T::Element;
  constexpr int kBlockM = T::kBlockM;
  constexpr int kBlockN = T::kBlockN;
  constexpr int kHeadDim = T::kHeadDim;
  constexpr int kStages = T::kStages;
  constexpr int kEmptyArrivals = T::kConsumers * kWarpgroupThreads;  // every consumer thread
  extern __shared__ unsigned char smem_raw[];
  auto& st = T::storage(smem_raw);

  const int tid = threadIdx.x;
  const int warpgroup = hopper::warpgroup_index();
  const int bh = blockIdx.y;
  const int kv_start = blockIdx.x * kBlockN;
  const int m_begin = kCausal ? kv_start / kBlockM : 0;  // causal: no block that ends before the keys
  const int m_end = ceil_div(n, kBlockM);
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
      for (int m = m_begin; m < m_end; ++m)
        hopper::load_query_stage<T::kQBytes, T::kRowBytes, kStages>(st, m - m_begin, &tm_q, &tm_do, m * kBlockM,
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
  const std::uint32_t ds_addr = ptx::smem_addr(st.ds);

  float acc_dk[kHeadDim / 2], acc_dv[kHeadDim / 2];
#pragma unroll
  for (int i = 0; i < kHeadDim / 2; ++i) acc_dk[i] = acc_dv[i] = 0.f;
  float* dq_head = dq_acc + std::int64_t(bh) * n_pad * kHeadDim;
  hopper::mbarrier_wait(&st.kv_full, 0);

  auto block = [&](int m, auto masked) {
    const int it = m - m_begin;
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
    if constexpr (T::kStmatrix)
      hopper::stage_a_rows_stmatrix<kBlockM, kBlockN, Element>(ds_a, ds_addr + ds_stage * T::kDsBytes,
                                                               key_local - lane / 4, lane);
    else
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
template <int kHeadDim>
inline constexpr int kBlockMOf = kHeadDim == 64 ? 128 : 64;  // step 25's two_consumers tiles
template <int kHeadDim, class Element, Lean kLean>
using TileOf = Tile<kHeadDim, Element, kBlockMOf<kHeadDim>, kLean>;

template <Lean kLean>
void launch(const BackwardArgs& args, cudaStream_t stream) {
  bwd::dispatch(args, [&]<class Element, int kHeadDim, bool kCausal>() {
    using T = TileOf<kHeadDim, Element, kLean>;
    const auto a = args.as<Element>();
    const int n = args.shape.seqlen;
    const int heads = args.shape.batch * args.shape.heads;
    bwd::run<RowDot, DqLayout, Element, kHeadDim>(args, stream, 0, [&](const bwd::Workspace& ws) {
      auto map = [&](const Element* x, int rows) {
        return hopper::make_attention_tensor_map(x, heads, n, kHeadDim, rows);
      };
      const dim3 grid(unsigned(ceil_div(n, T::kBlockN)), unsigned(heads));
      bwd::launch_main<T>(backward_descriptors_kernel<T, kCausal>, "backward_descriptors_kernel", grid, stream,
                          map(a.q, T::kBlockM), map(a.k, T::kBlockN), map(a.v, T::kBlockN), map(a.d_o, T::kBlockM),
                          ws.lse_log2, ws.delta, ws.dq_accum, a.dk, a.dv, n, bwd::padded_rows(n),
                          args.softmax_scale * ladder::kLog2e, args.softmax_scale);
    });
  });
}

template <Lean kLean>
ladder::Variant variant(const char* name, const char* description) {
  auto rows = [=]<class Element, int kHeadDim>(std::vector<ladder::KernelInfo>& out, const char* type) {
    using T = TileOf<kHeadDim, Element, kLean>;
    const auto main = ladder::strprintf("backward_descriptors_kernel<D=%d,%dx%d,%s%s>", kHeadDim, T::kBlockN,
                                        T::kBlockM, name, type);
    bwd::add_kernel_rows<RowDot, DqLayout, T>(out, type, main, backward_descriptors_kernel<T, false>,
                                              backward_descriptors_kernel<T, true>);
  };
  const auto no_semaphores = [](int) { return 0; };
  return bwd::variant<DqLayout>(name, description, launch<kLean>, no_semaphores, rows)
      .batch_heads_on_grid_yz()
      .needs_sm(90)
      .refuse_if([](const ladder::AttentionShape&) { return hopper::refuse_unless_sm90(); })
      .nondeterministic();  // dQ: float adds from every key block, in no fixed order
}

LADDER_REGISTER_STEP(
    ladder::backward_step(36, "backward_descriptors",
                          "The backward's issue path: descriptors built once, shared memory by name",
                          "25/head_by_head")
        .add(variant<Lean::kDescriptors>("descriptors",
                                         "25/head_by_head with every wgmma descriptor built once and advanced "
                                         "by constants (step 33's change, in the backward)"))
        .add(variant<Lean::kSharedSpace>("shared_space",
                                         "descriptors, and the Storage reached through a pointer the compiler "
                                         "knows is shared memory: LDS/STS, not generic LD/ST"))
        .add(variant<Lean::kStmatrix>("stmatrix",
                                      "shared_space, and dS^T staged by stmatrix (a warp's 16 x 16 slice per "
                                      "instruction, not eight 4-byte stores)"))
        .main_is("shared_space"));

}  // namespace
