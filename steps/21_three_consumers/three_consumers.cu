// Step 21 — a third consumer warpgroup: FlashAttention-3's 192-row tile at D = 64.
//
// At D = 64 step 20 keeps the tensor pipe only about half busy. Per 128 × 128 block a warpgroup's
// two products (S = Q Kᵀ and O += P V, 64 rows each) are half as long as at D = 128, while its
// softmax (16,384 exponentials per 128 × 128 block, on the 16-per-clock MUFU unit, plus the FMAs,
// maxima and conversions) is just as long: the tensor cores and the exponential unit are about
// equally loaded, and one partner warpgroup's GEMMs are too short to cover a softmax. Here the
// CTA has THREE consumer warpgroups (192 query rows, 64 each) and the producer:
//
//   * the ping-pong becomes a round-robin: consumer c issues its GEMMs after consumer c − 1 has
//     issued its own (named barrier 1 + c), then hands the turn to c + 1; while one warpgroup's
//     products run, the other two compute their softmax;
//   * registers: 4 warpgroups share the 65,536 registers, so setmaxnreg gives the producer 32 and
//     each consumer 160 (32·128 + 3·160·128 = 65,536) instead of 24 and 240 — enough at D = 64
//     (S 64 + P 32 + O 32 fp32/packed registers per thread), not at D = 128 (O alone is 64);
//   * so the consumer count is a template parameter: 3 at D = 64; at D = 128 the step is step 20
//     (with 2 consumers this file compiles to step 20's instructions, and the registration hands
//     D = 128 problems to step 20's own kernel: one kernel, one row).
//
// What stays from step 20: the persistent grid and its static scheduler, the ring across tiles,
// the in-warpgroup overlap, the TMA store epilogue, the arithmetic.
//
// Measured (docs/21_three_consumers.md): the premise holds only in part. With many waves a busy
// SM gains 3-4%; at B=4 H=8 N=4096 the 192-row tiles round worse onto 132 SMs and the step is
// 0.95x step 20. No unit is saturated: one warpgroup's softmax chain sets the pace.
//
// Like step 20 it runs fp16 and bf16: the element type is a template parameter, and only the
// tensor maps' type, wgmma's type suffix and the two conversions (P to the A operand, O to the
// output) depend on it (common/device/hopper/).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <variant>
#include <vector>

#include "common/check.hpp"
#include "common/device/hopper/arch.cuh"
#include "common/device/hopper/attention.cuh"
#include "common/device/hopper/mbarrier.cuh"
#include "common/device/hopper/tma.cuh"
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

template <int kHeadDim_, int kStages_, class Element_, int kConsumers>
struct Tile {
  using Element = Element_;  // __half or __nv_bfloat16
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kWarpgroups = kConsumers;  // consumers: 3 (2 would be step 20's tile)
  static constexpr int kThreads = (1 + kWarpgroups) * kWarpgroupThreads;  // + the producer
  // The register file split between the roles (setmaxnreg): all 65,536 registers are handed out.
  static constexpr int kProducerRegisters = kWarpgroups == 2 ? 24 : 32;
  static constexpr int kConsumerRegisters = kWarpgroups == 2 ? 240 : 160;
  static constexpr int kBlockM = 64 * kWarpgroups;  // query rows per CTA: 128 or 192
  static constexpr int kBlockN = 128;               // keys per K/V block
  static constexpr int kStages = kStages_;          // K/V ring depth
  static constexpr std::uint32_t kQBytes = kBlockM * kHeadDim * sizeof(Element);
  static constexpr std::uint32_t kKVBytes = kBlockN * kHeadDim * sizeof(Element);
  static constexpr std::size_t kBarrierBytes = (2 + 2 * kStages) * sizeof(std::uint64_t);
  // +1024: the dynamic shared memory base is rounded up to the swizzle atom's alignment.
  static constexpr std::size_t kSmemBytes = kQBytes + 2 * kStages * kKVBytes + kBarrierBytes + 1024;
  // 192 rows are not a multiple of 128 keys: nothing below assumes it (the causal bounds are
  // computed per tile and per warpgroup).
  static_assert(kHeadDim % 64 == 0 && kWarpgroups >= 2 && kWarpgroups <= 3);
  static_assert(kProducerRegisters * kWarpgroupThreads +
                    kConsumerRegisters * kWarpgroups * kWarpgroupThreads <= 65536);
  static_assert(kSmemBytes <= 232448, "more shared memory than a block may opt in to");
};

// ---- The kernel -------------------------------------------------------------------------------
// grid min(tiles, SMs); each CTA walks tiles blockIdx.x, + gridDim.x, ... (work_of below).
template <class T, bool kCausal>
__global__ void __launch_bounds__(T::kThreads, 1)
    three_consumers_kernel(const __grid_constant__ CUtensorMap tm_q,
                           const __grid_constant__ CUtensorMap tm_k,
                           const __grid_constant__ CUtensorMap tm_v,
                           const __grid_constant__ CUtensorMap tm_o, int bh_count, int n,
                           float scale_log2) {
#if LADDER_SM90A
  using Element = typename T::Element;
  extern __shared__ unsigned char smem_raw[];
  auto* smem = reinterpret_cast<Element*>((reinterpret_cast<std::uintptr_t>(smem_raw) + 1023) &
                                          ~std::uintptr_t(1023));
  Element* s_q = smem;                                    // [D/64][kBlockM][64]
  Element* s_k = s_q + T::kBlockM * T::kHeadDim;          // [kStages][D/64][kBlockN][64]
  Element* s_v = s_k + T::kStages * T::kBlockN * T::kHeadDim;
  constexpr int kKVElems = T::kBlockN * T::kHeadDim;
  auto* q_full = reinterpret_cast<std::uint64_t*>(s_v + T::kStages * kKVElems);
  std::uint64_t* q_empty = q_full + 1;             // every consumer is done with the Q buffer
  std::uint64_t* kv_full = q_empty + 1;            // [kStages]: the copies have landed
  std::uint64_t* kv_empty = kv_full + T::kStages;  // [kStages]: the consumers are done with it

  const int tid = threadIdx.x;
  const int warpgroup = tid / kWarpgroupThreads;
  const int warp_in_wg = (tid % kWarpgroupThreads) / 32;
  const int lane = tid % 32;
  const int g = lane / 4;
  const int t = lane % 4;

  const int consumer = warpgroup - 1;  // 0 .. kWarpgroups - 1 in the consumer warpgroups
  const int m_blocks = ceil_div(n, T::kBlockM);
  const int n_tiles = m_blocks * bh_count;

  // The scheduler: tile index -> (head, query block).
  struct Work {
    int bh, q_start, n_blocks, n_masked;
  };
  auto work_of = [&](int tile) {
    Work w;
    int m_block;
    if constexpr (kCausal) {
      m_block = m_blocks - 1 - tile / bh_count;  // heaviest first
      w.bh = tile % bh_count;
    } else {
      m_block = tile % m_blocks;  // head-major
      w.bh = tile / m_blocks;
    }
    w.q_start = m_block * T::kBlockM;
    const int kv_end = kCausal ? min(n, w.q_start + T::kBlockM) : n;
    w.n_blocks = ceil_div(kv_end, T::kBlockN);
    // Blocks [0, n_full) need no mask (they end before N and, causal, before the tile's first row).
    const int n_full = kCausal ? min(n / T::kBlockN, w.q_start / T::kBlockN) : n / T::kBlockN;
    w.n_masked = w.n_blocks - n_full;
    return w;
  };

  // The CTA's r-th tile: step 20's snake walk, right to left in odd rows when causal (balances
  // the heaviest-first tiles across CTAs), the row walk without a mask.
  auto tile_of = [&](int r) {
    const int g = int(gridDim.x), c = int(blockIdx.x);
    return (kCausal && (r & 1)) ? r * g + (g - 1 - c) : r * g + c;
  };

  // One thread sets up the barriers; the fence and the __syncthreads make them visible to the
  // other threads and to the copy engine before anyone uses them.
  if (tid == 0) {
    hopper::tma_prefetch_map(&tm_q);
    hopper::tma_prefetch_map(&tm_k);
    hopper::tma_prefetch_map(&tm_v);
    hopper::tma_prefetch_map(&tm_o);
    hopper::mbarrier_init(q_full, 1);
    hopper::mbarrier_init(q_empty, T::kWarpgroups);  // one arrival per consumer warpgroup
    for (int s = 0; s < T::kStages; ++s) {
      hopper::mbarrier_init(&kv_full[s], 1);
      hopper::mbarrier_init(&kv_empty[s], T::kWarpgroups * 4);  // one arrival per consumer warp
    }
    hopper::mbarrier_init_fence();
  }
  __syncthreads();

  if (warpgroup == 0) {
    // ---- Producer ----
    hopper::setmaxnreg_dec<T::kProducerRegisters>();
    if (tid == 0) {
      int it = 0;  // ring position: the CTA's it-th block uses stage it % kStages
      for (int local = 0, tile = tile_of(0); tile < n_tiles; tile = tile_of(++local)) {
        const Work w = work_of(tile);
        auto load_kv = [&](int i) {
          const int stage = it % T::kStages;
          const int kv_row = (w.n_blocks - 1 - i) * T::kBlockN;
          hopper::mbarrier_wait(&kv_empty[stage], ((it / T::kStages) & 1) ^ 1);
          hopper::mbarrier_arrive_expect_tx(&kv_full[stage], 2 * T::kKVBytes);
          hopper::tma_load_tile(s_k + stage * kKVElems, &tm_k, &kv_full[stage], kv_row, w.bh);
          hopper::tma_load_tile(s_v + stage * kKVElems, &tm_v, &kv_full[stage], kv_row, w.bh);
          ++it;
        };
        // The tile's first blocks go into the ring as soon as the previous tile frees stages,
        // before Q, whose buffer frees only after the previous tile's epilogue: the loads of the
        // next tile overlap the end of this one.
        const int ahead = min(T::kStages, w.n_blocks);
        int i = 0;
        for (; i < ahead; ++i) load_kv(i);
        hopper::mbarrier_wait(q_empty, (local & 1) ^ 1);
        hopper::mbarrier_arrive_expect_tx(q_full, T::kQBytes);
        hopper::tma_load_tile(s_q, &tm_q, q_full, w.q_start, w.bh);
        for (; i < w.n_blocks; ++i) load_kv(i);
      }
    }
    return;  // nothing after the split waits for the producer's threads
  }

  // ---- Consumers ----
  hopper::setmaxnreg_inc<T::kConsumerRegisters>();

  // Round-robin turns: named barrier 1 + c is "consumer c may issue its GEMMs"; its 256 threads
  // are consumer c (bar.sync) and consumer c − 1 (bar.arrive, once its own GEMMs are issued).
  // Each barrier has one waiter and one arriver, so an arrival can never be counted for the
  // wrong turn: c − 1 arrives again only after taking another turn, which needs c to have passed.
  constexpr int kTurnThreads = 2 * kWarpgroupThreads;
  constexpr int kLast = T::kWarpgroups - 1;
  auto wait_turn = [&] { hopper::named_barrier_sync<kTurnThreads>(1 + consumer); };
  auto pass_turn = [&] {  // to the next consumer in the round: c + 1, and 0 after the last
    const int next = T::kWarpgroups == 2 ? consumer ^ 1 : (consumer + 1) % T::kWarpgroups;
    hopper::named_barrier_arrive<kTurnThreads>(1 + next);
  };
  if (consumer == kLast) pass_turn();  // consumer 0 issues first

  // Descriptor bases. Q: this warpgroup's 64 rows of each column block. K, V: stage 0.
  const std::uint32_t q_addr = ptx::smem_addr(s_q) + consumer * 64 * 128;
  const std::uint32_t k_addr = ptx::smem_addr(s_k);
  const std::uint32_t v_addr = ptx::smem_addr(s_v);
  constexpr std::uint32_t kQColumnBlock = T::kBlockM * 128;   // bytes between column blocks
  constexpr std::uint32_t kKVColumnBlock = T::kBlockN * 128;
  constexpr std::uint32_t kStageBytes = T::kKVBytes;
  const int local_row0 = consumer * 64 + warp_in_wg * 16 + g;  // rows local_row0, +8 of the tile
  // The thread that stores this warpgroup's rows of O (and releases the Q buffer).
  const bool store_thread = (tid % kWarpgroupThreads) == 0;

  float acc_o[T::kHeadDim / 2];
  float row_max[2];
  float row_sum[2];
  float s[T::kBlockN / 2];
  std::uint32_t p[T::kBlockN / 16][4];  // P of the previous block, the A operand in flight
  float rescale[2];

  // The two products, issued without waiting; the caller commits.
  auto issue_s = [&](int stage) {
    const std::uint32_t k_stage = k_addr + stage * kStageBytes;
    // At 160 registers every one counts: left alone, ptxas keeps the four Q descriptors of the
    // loop (one per k16 step) in registers for the consumer's whole life and spills other
    // values; an opaque copy of the base makes it recompute them here, four integer adds per
    // block. (Not needed with 240 registers: two consumers compile exactly step 20's code.)
    std::uint32_t q_base = q_addr;
    if constexpr (T::kWarpgroups == 3) asm volatile("" : "+r"(q_base));
#pragma unroll
    for (int kk = 0; kk < T::kHeadDim / 16; ++kk) {
      const std::uint32_t col = (kk % 4) * 32;  // bytes into the 128-byte row
      hopper::Wgmma<T::kBlockN, Element>::ss(s, hopper::desc_k_major(q_base + (kk / 4) * kQColumnBlock + col),
                                    hopper::desc_k_major(k_stage + (kk / 4) * kKVColumnBlock + col),
                                    kk > 0);
    }
  };
  auto issue_pv = [&](int stage) {
    const std::uint32_t v_stage = v_addr + stage * kStageBytes;
#pragma unroll
    for (int kk = 0; kk < T::kBlockN / 16; ++kk)
      hopper::Wgmma<T::kHeadDim, Element>::rs(acc_o, p[kk],
                                     hopper::desc_mn_major(v_stage + kk * 16 * 128, kKVColumnBlock));
  };
  // One warp's arrival per stage, once its lanes are past the wait for the product that read it.
  auto release = [&](int stage) {
    __syncwarp();
    if (lane == 0) hopper::mbarrier_arrive(&kv_empty[stage]);
  };

  int it = 0;  // ring position, as in the producer
  for (int local = 0, tile = tile_of(0); tile < n_tiles; tile = tile_of(++local)) {
    const Work w = work_of(tile);
    const int row0 = w.q_start + local_row0;  // this thread's rows: row0, row0 + 8
#pragma unroll
    for (int i = 0; i < T::kHeadDim / 2; ++i) acc_o[i] = 0.f;
    row_max[0] = row_max[1] = -INFINITY;
    row_sum[0] = row_sum[1] = 0.f;

    // Mask (where the block can need it) and online softmax of block i; leaves O's rescale.
    auto softmax_block = [&](int i, auto masked) {
      if constexpr (decltype(masked)::value) {
        const int kv_start = (w.n_blocks - 1 - i) * T::kBlockN;
        const bool ragged = kv_start + T::kBlockN > n;
        const bool diagonal = kCausal && kv_start + T::kBlockN - 1 > w.q_start + consumer * 64;
        if (ragged || diagonal) hopper::mask_scores<T::kBlockN, kCausal>(s, row0, kv_start, n, t);
      }
      hopper::online_softmax<T::kBlockN>(s, row_max, row_sum, scale_log2, rescale);
    };

    hopper::mbarrier_wait(q_full, local & 1);

    // Block 0 (in processing order): S_0 alone. O is still zero, so its rescale is moot.
    hopper::mbarrier_wait(&kv_full[it % T::kStages], (it / T::kStages) & 1);
    wait_turn();
    hopper::wgmma_fence();
    issue_s(it % T::kStages);
    hopper::wgmma_commit();
    pass_turn();
    hopper::wgmma_wait<0>();
    hopper::fence_registers(s);
    softmax_block(0, std::true_type{});
    hopper::p_to_a<T::kBlockN, Element>(s, p);

    // Block i: issue S_i and P_{i-1} V_{i-1}; softmax(S_i) under the second product.
    auto iteration = [&](int i, auto masked) {
      const int stage = (it + i) % T::kStages;
      const int prev_stage = (it + i - 1) % T::kStages;
      hopper::mbarrier_wait(&kv_full[stage], ((it + i) / T::kStages) & 1);
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
      release(prev_stage);
      hopper::rescale_o<T::kHeadDim>(acc_o, rescale);
      hopper::p_to_a<T::kBlockN, Element>(s, p);
    };
    int i = 1;
    for (; i < w.n_masked; ++i) iteration(i, std::true_type{});
    for (; i < w.n_blocks; ++i) iteration(i, std::false_type{});

    // The last P·V. The last turn of the CTA's last tile passes nothing from the last consumer:
    // consumer 0 has no turn left to take (within the CTA's life the turns go round in order,
    // every consumer taking n_blocks + 1 of them per tile).
    const int last_stage = (it + w.n_blocks - 1) % T::kStages;
    wait_turn();
    hopper::wgmma_fence();
    issue_pv(last_stage);
    hopper::wgmma_commit();
    if (consumer != kLast || tile_of(local + 1) < n_tiles) pass_turn();
    hopper::wgmma_wait<0>();
    hopper::fence_registers(acc_o);
    release(last_stage);
    it += w.n_blocks;

    // Epilogue: O / l into this warpgroup's own 64 rows of the Q buffer (its last S product,
    // the only reader of those rows, has completed), fenced into the async proxy, then one
    // thread stores them with the copy engine once the warpgroup's writes are all done.
    hopper::finalize_rows<T::kHeadDim>(acc_o, row_sum);
    // ptxas would compute this thread's 16 staging addresses once, before the tile loop, and keep
    // them live (64-bit each) through the main loop: at 160 registers a consumer, spilled. Opaque
    // copies of the base and the row, made here, keep their computation here.
    Element* o_stage = s_q;
    int o_row = local_row0;
    if constexpr (T::kWarpgroups == 3) asm volatile("" : "+l"(o_stage), "+r"(o_row));
    hopper::stage_o_rows<T::kHeadDim, T::kBlockM>(acc_o, o_stage, o_row, t);
    hopper::fence_proxy_async_smem();
    hopper::named_barrier_sync<kWarpgroupThreads>(1 + T::kWarpgroups + consumer);  // after the turns' ids
    if (store_thread) {
#pragma unroll
      for (int cb = 0; cb < T::kHeadDim / 64; ++cb)
        hopper::tma_store_tile(&tm_o, s_q + cb * T::kBlockM * 64 + consumer * 64 * 64,
                               w.q_start + consumer * 64, cb, w.bh);
      hopper::tma_store_commit();
      hopper::tma_store_wait_read();  // the engine has read the rows: the buffer is free
      hopper::mbarrier_arrive(q_empty);
    }
  }
  if (store_thread) hopper::tma_store_wait_all();
#elif defined(__CUDA_ARCH__)
  __trap();  // built without sm_90a: never reached (the variant refuses), never silent
#endif  // LADDER_SM90A
}

// ---- Host side --------------------------------------------------------------------------------
int sm_count() {
  int device = 0;
  int count = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device));
  return count;
}

template <class T, bool kCausal>
void launch_tile(const AttentionArgs& args, cudaStream_t stream) {
  constexpr int kHeadDim = T::kHeadDim;
  const auto a = args.as<typename T::Element>();  // Q, K, V, O in the kernel's element type
  auto* kernel = three_consumers_kernel<T, kCausal>;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  int(T::kSmemBytes)));
  const auto& sh = args.shape;
  const int bh = sh.batch * sh.heads;
  const CUtensorMap tm_q = hopper::make_attention_tensor_map(a.q, bh, sh.seqlen, kHeadDim, T::kBlockM);
  const CUtensorMap tm_k = hopper::make_attention_tensor_map(a.k, bh, sh.seqlen, kHeadDim, T::kBlockN);
  const CUtensorMap tm_v = hopper::make_attention_tensor_map(a.v, bh, sh.seqlen, kHeadDim, T::kBlockN);
  // O is stored by each consumer warpgroup: 64 rows, one 64-column block per copy.
  const CUtensorMap tm_o = hopper::make_attention_tensor_map(a.o, bh, sh.seqlen, kHeadDim, 64, 1);
  static const int sms = sm_count();  // one CTA per SM (the kernel fills one SM on its own)
  const std::int64_t tiles = std::int64_t(bh) * ceil_div(sh.seqlen, T::kBlockM);
  const int grid = int(std::min<std::int64_t>(tiles, sms));
  kernel<<<grid, T::kThreads, T::kSmemBytes, stream>>>(tm_q, tm_k, tm_v, tm_o, bh, sh.seqlen,
                                                       args.softmax_scale * ladder::kLog2e);
  CUDA_CHECK_LAUNCH("three_consumers_kernel");
}

// The tile of each head dimension. D = 64: three consumers (192 rows), where their registers
// suffice; kStages64 is the ring depth. D = 128: O alone is 64 registers a thread and three
// consumers do not fit in 160, so the step is step 20 there. Tile<128, 3, Element, 2> is step 20's
// tile, and this file compiles it to step 20's instructions; but a row the ladder leaves out as
// "the same kernel as 20/persistent_snake" must launch exactly that kernel (a CPU test checks the
// function pointers), so at D = 128 the variant hands the problem to step 20's registered variant.
template <int kStages64, class Element>
using Tile64 = Tile<64, kStages64, Element, 3>;

const ladder::Variant* step20_variant() {  // null where step 20 is not linked in
  return ladder::Registry::instance().find_variant("20/persistent_snake");
}

template <int kStages64, class Element>
void launch_element(const AttentionArgs& a, cudaStream_t stream) {
  using T = Tile64<kStages64, Element>;
  if (a.shape.causal) launch_tile<T, true>(a, stream);
  else launch_tile<T, false>(a, stream);
}

template <int kStages64>
void launch(const AttentionArgs& a, cudaStream_t stream) {
  if (a.shape.head_dim == 128) {
    const ladder::Variant* step20 = step20_variant();
    if (!step20)
      throw std::logic_error("21/three_consumers at D=128 runs 20/persistent_snake, which this "
                             "executable does not contain");
    std::get<ladder::AttentionLaunch>(step20->launch)(a, stream);
    return;
  }
  ladder::dispatch_head_dim<64>(a.shape.head_dim, [&]<int>() {
    if (a.shape.dtype == ladder::DType::BF16) launch_element<kStages64, __nv_bfloat16>(a, stream);
    else launch_element<kStages64, __half>(a, stream);
  });
}

template <int kStages64>
std::vector<ladder::KernelInfo> kernels() {
  std::vector<ladder::KernelInfo> out;
  auto add = [&]<class Element>(const char* type) {
    using T = Tile64<kStages64, Element>;
    const auto name = ladder::strprintf("three_consumers_kernel<D=64,%dx%d,%d stages,%d consumers%s>",
                                        T::kBlockM, T::kBlockN, T::kStages, T::kWarpgroups, type);
    out.push_back(ladder::kernel(name, three_consumers_kernel<T, false>, T::kThreads, T::kSmemBytes));
    out.push_back(ladder::kernel(name + " causal", three_consumers_kernel<T, true>, T::kThreads, T::kSmemBytes));
    out[out.size() - 2].dtype = out.back().dtype = ladder::dtype_of<Element>();
  };
  add.template operator()<__half>("");
  add.template operator()<__nv_bfloat16>(",bf16");
  return out;
}

template <int kStages64>
ladder::Variant variant(const char* name, const char* description) {
  return ladder::attention_variant(name, description, launch<kStages64>)
      .needs_sm(90)
      .for_head_dims({64, 128})
      .for_dtypes({ladder::DType::F16, ladder::DType::BF16})
      .refuse_if([](const ladder::AttentionShape&) { return hopper::refuse_unless_sm90(); })
      // At D = 128 the step is step 20 (see Tile64): the same kernel, not measured twice.
      .same_kernel_at(128, "20/persistent_snake")
      .with_kernels([](int d) {
        if (d != 128) return kernels<kStages64>();
        const ladder::Variant* step20 = step20_variant();
        return step20 && step20->kernels ? step20->kernels(128) : std::vector<ladder::KernelInfo>{};
      });
}

LADDER_REGISTER_STEP(
    ladder::attention_step(21, "three_consumers", "Three consumer warpgroups: a 192-row tile, GEMM turns in a round-robin (D = 64)", "20/persistent_snake")
        .add(variant<3>("three_consumers", "20/persistent_snake with 3 consumer warpgroups at D=64 (192x128 tile, round-robin turns, setmaxnreg 32/160)"))
        .add(variant<4>("three_consumers_4stage", "the same with a 4-stage K/V ring at D=64"))
        .main_is("three_consumers_4stage"));  // the fastest measured (docs/21_three_consumers.md)

}  // namespace
