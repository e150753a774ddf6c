// Lab 06 — the K/V mbarrier ring of a warp-specialized Hopper kernel. GIVEN (do not edit): the
// kernel that runs YOUR answers in ring.hpp (stage, parities, byte count, release point). Run
//   labs/check.sh L06
// The checker runs your answers in a model of the protocol first (no GPU), then this kernel.
//
// This is step 18's kernel (steps/18_warp_specialization, chapter docs/18_warp_specialization.md),
// fp16, D = 64 or 128: one CTA per 128 query rows, a producer warpgroup whose one thread issues the
// TMA copies of each K/V block into a ring of lab06::kStages stages, two consumer warpgroups that
// compute on them with wgmma. The ring's two barriers per stage:
//   full[s]   count 1: the producer's arrive.expect_tx, then the copies' bytes complete the phase;
//   empty[s]  count 8: one arrival per consumer warp once it is done with the stage.
// What differs from step 18, for the lab: every ring decision calls ring.hpp; every wait of the
// ring is bounded (ring_wait below), so a wrong parity ends the launch with a record of who waited
// for what, instead of hanging the GPU; the release is written at each of its three candidate
// points and kept at the one ring::kRelease names.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>
#include <vector>

// <>, not "": the build puts labs/L06_mbarrier_ring/ (your answers) or its solution/ first on the
// include path (labs/CMakeLists.txt), and the checker's model includes the same file.
#include <ring.hpp>

#include "common/check.hpp"
#include "common/device/hopper/arch.cuh"
#include "common/device/hopper/attention.cuh"
#include "common/device/hopper/mbarrier.cuh"
#include "common/device/hopper/smem.cuh"
#include "common/device/hopper/tma.cuh"
#include "common/device/hopper/wgmma.cuh"
#include "common/device/ptx.cuh"
#include "common/dispatch.hpp"
#include "common/math.hpp"
#include "common/registry.hpp"
#include "common/strings.hpp"
#include "labs/L06_mbarrier_ring/lab06.hpp"

namespace {

using ladder::AttentionArgs;
using ladder::ceil_div;
using lab06::Release;
namespace hopper = ladder::hopper;
namespace ptx = ladder::ptx;

constexpr int kWarpgroupThreads = 128;

template <int kHeadDim_>
struct Tile {
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kWarpgroups = 2;  // consumers
  static constexpr int kThreads = (1 + kWarpgroups) * kWarpgroupThreads;  // + the producer
  static constexpr int kProducerRegisters = 24;
  static constexpr int kConsumerRegisters = 240;
  static constexpr int kBlockM = 64 * kWarpgroups;  // query rows per CTA
  static constexpr int kBlockN = lab06::kBlockN;    // keys per K/V block
  static constexpr int kStages = lab06::kStages;    // K/V ring depth
  static constexpr std::uint32_t kQBytes = kBlockM * kHeadDim * sizeof(__half);
  static constexpr std::uint32_t kKVBytes = kBlockN * kHeadDim * sizeof(__half);
  static constexpr std::size_t kBarrierBytes = (1 + 2 * kStages) * sizeof(std::uint64_t);
  static constexpr std::size_t kSmemBytes = kQBytes + 2 * kStages * kKVBytes + kBarrierBytes + hopper::kSwizzleAlign;
  static_assert(kHeadDim % 64 == 0 && kBlockM % kBlockN == 0);
  static_assert(kWarpgroups * kWarpgroupThreads / 32 == lab06::kConsumerWarps);
  static_assert(sizeof(__half) == lab06::kElementBytes);
  static_assert(kProducerRegisters * kWarpgroupThreads +
                    kConsumerRegisters * kWarpgroups * kWarpgroupThreads <= 65536);
};

// ---- The bounded wait --------------------------------------------------------------------------
// g_abort: set by the first wait of a launch that times out; every later wait of the launch gives
// up at once. g_stalls: the first producer's and the first consumer's wait that gave up, kept
// until the checker takes them (take_stalls).
struct DeviceStalls {
  unsigned seen[2];
  lab06::Stall stall[2];  // producer, consumer
};
__device__ unsigned g_abort;
__device__ DeviceStalls g_stalls;
// The deadline of a wait, lab06::stall_ms() in ns: set once by the host before the first launch.
__device__ std::uint64_t g_stall_ns;

#if LADDER_SM90A
// hopper::mbarrier_wait with a deadline. false: the phase did not complete within stall_ms() (or
// another wait of this launch gave up first). A consumer goes on regardless — every warp of a
// warpgroup must reach the same wgmma — and computes garbage the check then rejects; the producer
// stops issuing copies, so nothing is in flight when the CTA exits.
__device__ bool ring_wait(std::uint64_t* bar, std::uint32_t parity, lab06::Waiter waiter, int stage, int block) {
  if (hopper::mbarrier_try_wait(bar, parity)) return true;
  const std::uint64_t start = ptx::globaltimer_ns();
  for (;;) {
    if (hopper::mbarrier_try_wait(bar, parity)) return true;
    const bool timed_out = ptx::globaltimer_ns() - start > g_stall_ns;
    if (timed_out || *static_cast<volatile unsigned*>(&g_abort)) {
      if (timed_out) atomicExch(&g_abort, 1u);
      const int slot = waiter == lab06::Waiter::kProducer ? 0 : 1;
      if (atomicCAS(&g_stalls.seen[slot], 0u, 1u) == 0u)
        g_stalls.stall[slot] = {int(waiter), stage, int(parity), block, int(blockIdx.x), int(blockIdx.y),
                                int(threadIdx.x / 32), int(timed_out)};
      return false;
    }
  }
}
#endif  // LADDER_SM90A

// ---- The kernel -------------------------------------------------------------------------------
// grid (B·H, ceil(N / kBlockM)), the query blocks numbered from the end (heaviest causal first).
template <class T, bool kCausal>
__global__ void __launch_bounds__(T::kThreads, 1)
    ring_kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
                const __grid_constant__ CUtensorMap tm_v, __half* __restrict__ o, int n, float scale_log2) {
#if LADDER_SM90A
  extern __shared__ unsigned char smem_raw[];
  __half* s_q = hopper::aligned_smem_base<__half>(smem_raw);  // [D/64][kBlockM][64]
  __half* s_k = s_q + T::kBlockM * T::kHeadDim;               // [kStages][D/64][kBlockN][64]
  __half* s_v = s_k + T::kStages * T::kBlockN * T::kHeadDim;
  constexpr int kKVElems = T::kBlockN * T::kHeadDim;
  auto* q_full = reinterpret_cast<std::uint64_t*>(s_v + T::kStages * kKVElems);
  std::uint64_t* kv_full = q_full + 1;             // [kStages]: the copies have landed
  std::uint64_t* kv_empty = kv_full + T::kStages;  // [kStages]: the consumers are done with it

  const int tid = threadIdx.x;
  const int warpgroup = tid / kWarpgroupThreads;
  const int warp_in_wg = (tid % kWarpgroupThreads) / 32;
  const int lane = tid % 32;
  const int g = lane / 4;
  const int t = lane % 4;

  const int m_block = int(gridDim.y - 1 - blockIdx.y);
  const int bh = int(blockIdx.x);
  const int q_start = m_block * T::kBlockM;
  const int consumer = warpgroup - 1;  // 0, 1 in the consumer warpgroups
  const int row0 = q_start + consumer * 64 + warp_in_wg * 16 + g;  // this thread's rows: row0, row0 + 8
  const std::int64_t head = std::int64_t(bh) * n * T::kHeadDim;

  const int kv_end = kCausal ? min(n, q_start + T::kBlockM) : n;
  const int n_blocks = ceil_div(kv_end, T::kBlockN);
  // Blocks [0, n_full) need no mask (they end before N and, causal, before the CTA's first row).
  const int n_full = kCausal ? min(n / T::kBlockN, q_start / T::kBlockN) : n / T::kBlockN;
  const int n_masked = n_blocks - n_full;

  // One thread sets up the barriers; the fence and the __syncthreads make them visible to the
  // other threads and to the copy engine before anyone uses them.
  if (tid == 0) {
    hopper::tma_prefetch_map(&tm_q);
    hopper::tma_prefetch_map(&tm_k);
    hopper::tma_prefetch_map(&tm_v);
    hopper::mbarrier_init(q_full, 1);
    for (int s = 0; s < T::kStages; ++s) {
      hopper::mbarrier_init(&kv_full[s], 1);
      hopper::mbarrier_init(&kv_empty[s], lab06::kConsumerWarps);  // one arrival per consumer warp
    }
    hopper::mbarrier_init_fence();
  }
  __syncthreads();

  if (warpgroup == 0) {
    // ---- Producer: block i (block n_blocks - 1 - i of the sequence) into stage ring::stage(i) ----
    hopper::setmaxnreg_dec<T::kProducerRegisters>();
    if (tid == 0) {
      hopper::mbarrier_arrive_expect_tx(q_full, T::kQBytes);
      hopper::tma_load_tile(s_q, &tm_q, q_full, q_start, bh);
      for (int i = 0; i < n_blocks; ++i) {
        const int stage = ring::stage(i, T::kStages);
        if (!ring_wait(&kv_empty[stage], ring::empty_parity(i, T::kStages), lab06::Waiter::kProducer, stage, i))
          break;  // the stage never emptied: issue nothing more (see ring_wait)
        // One arrival announcing the block's bytes, then the two copies that bring them.
        const int kv_row = (n_blocks - 1 - i) * T::kBlockN;
        const int rows_in_tensor = min(T::kBlockN, n - kv_row);
        hopper::mbarrier_arrive_expect_tx(&kv_full[stage], ring::expect_bytes(T::kBlockN, T::kHeadDim, rows_in_tensor));
        hopper::tma_load_tile(s_k + stage * kKVElems, &tm_k, &kv_full[stage], kv_row, bh);
        hopper::tma_load_tile(s_v + stage * kKVElems, &tm_v, &kv_full[stage], kv_row, bh);
      }
    }
    return;  // nothing after the split waits for the producer's threads
  }

  // ---- Consumers ----
  hopper::setmaxnreg_inc<T::kConsumerRegisters>();

  // Descriptor bases. Q: this warpgroup's 64 rows of each column block. K, V: stage 0.
  const std::uint32_t q_addr = ptx::smem_addr(s_q) + consumer * 64 * 128;
  const std::uint32_t k_addr = ptx::smem_addr(s_k);
  const std::uint32_t v_addr = ptx::smem_addr(s_v);
  constexpr std::uint32_t kQColumnBlock = T::kBlockM * 128;   // bytes between column blocks
  constexpr std::uint32_t kKVColumnBlock = T::kBlockN * 128;
  constexpr std::uint32_t kStageBytes = T::kKVBytes;

  float acc_o[T::kHeadDim / 2];
#pragma unroll
  for (int i = 0; i < T::kHeadDim / 2; ++i) acc_o[i] = 0.f;
  float row_max[2] = {-INFINITY, -INFINITY};
  float row_sum[2] = {0.f, 0.f};

  ring_wait(q_full, 0, lab06::Waiter::kConsumer, -1, -1);

  auto process_block = [&](int i, auto masked) {
    const int block = n_blocks - 1 - i;
    const int stage = ring::stage(i, T::kStages);
    const int kv_start = block * T::kBlockN;
    // One arrival per warp on empty[stage], at the point ring::kRelease names, after all the
    // warp's lanes are past what comes before it.
    auto release_at = [&](auto point) {
      if constexpr (decltype(point)::value == ring::kRelease) {
        __syncwarp();
        if (lane == 0) hopper::mbarrier_arrive(&kv_empty[stage]);
      }
    };

    // The copy engine's bytes for this stage have landed when the phase completes; what it
    // wrote is then visible to this thread (and to wgmma).
    ring_wait(&kv_full[stage], ring::full_parity(i, T::kStages), lab06::Waiter::kConsumer, stage, i);
    release_at(std::integral_constant<Release, Release::kAfterWait>{});

    // S = Q Kᵀ: the tensor cores read K from the stage until wgmma_wait returns.
    float s[T::kBlockN / 2];
    const std::uint32_t k_stage = k_addr + stage * kStageBytes;
    hopper::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < T::kHeadDim / 16; ++kk) {
      const std::uint32_t col = (kk % 4) * 32;
      hopper::Wgmma<T::kBlockN>::ss(s, hopper::desc_k_major(q_addr + (kk / 4) * kQColumnBlock + col),
                                    hopper::desc_k_major(k_stage + (kk / 4) * kKVColumnBlock + col), kk > 0);
    }
    hopper::wgmma_commit();
    hopper::wgmma_wait<0>();
    hopper::fence_registers(s);
    release_at(std::integral_constant<Release, Release::kAfterScores>{});

    if constexpr (decltype(masked)::value) {
      const bool ragged = kv_start + T::kBlockN > n;
      const bool diagonal = kCausal && kv_start + T::kBlockN - 1 > q_start + consumer * 64;
      if (ragged || diagonal) hopper::mask_scores<T::kBlockN, kCausal>(s, row0, kv_start, n, t);
    }
    float rescale[2];
    hopper::online_softmax<T::kBlockN>(s, row_max, row_sum, scale_log2, rescale);
    hopper::rescale_o<T::kHeadDim>(acc_o, rescale);
    std::uint32_t p[T::kBlockN / 16][4];
    hopper::p_to_a<T::kBlockN>(s, p);

    // O += P V: the tensor cores read V from the stage until wgmma_wait returns.
    const std::uint32_t v_stage = v_addr + stage * kStageBytes;
    hopper::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < T::kBlockN / 16; ++kk)
      hopper::Wgmma<T::kHeadDim>::rs(acc_o, p[kk], hopper::desc_mn_major(v_stage + kk * 16 * 128, kKVColumnBlock));
    hopper::wgmma_commit();
    hopper::wgmma_wait<0>();
    hopper::fence_registers(acc_o);
    release_at(std::integral_constant<Release, Release::kAfterOutput>{});
  };

  int i = 0;
  for (; i < n_masked; ++i) process_block(i, std::true_type{});
  for (; i < n_blocks; ++i) process_block(i, std::false_type{});

  hopper::finalize_rows<T::kHeadDim>(acc_o, row_sum);
  hopper::store_o_rows<T::kHeadDim>(acc_o, o + head, row0, n, t);
#elif defined(__CUDA_ARCH__)
  __trap();  // built without sm_90a: never reached (the variant refuses), never silent
#endif  // LADDER_SM90A
}

// ---- Host side --------------------------------------------------------------------------------
unsigned* abort_flag() {
  static unsigned* flag = [] {
    void* p = nullptr;
    CUDA_CHECK(cudaGetSymbolAddress(&p, g_abort));
    const std::uint64_t stall_ns = std::uint64_t(lab06::stall_ms()) * 1000000;
    CUDA_CHECK(cudaMemcpyToSymbol(g_stall_ns, &stall_ns, sizeof stall_ns));
    return static_cast<unsigned*>(p);
  }();
  return flag;
}

template <int kHeadDim, bool kCausal>
void launch_tile(const AttentionArgs& a, cudaStream_t stream) {
  using T = Tile<kHeadDim>;
  auto* kernel = ring_kernel<T, kCausal>;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(T::kSmemBytes)));
  const auto& sh = a.shape;
  const int bh = sh.batch * sh.heads;
  const CUtensorMap tm_q = hopper::make_attention_tensor_map(a.q, bh, sh.seqlen, kHeadDim, T::kBlockM);
  const CUtensorMap tm_k = hopper::make_attention_tensor_map(a.k, bh, sh.seqlen, kHeadDim, T::kBlockN);
  const CUtensorMap tm_v = hopper::make_attention_tensor_map(a.v, bh, sh.seqlen, kHeadDim, T::kBlockN);
  const dim3 grid(bh, ceil_div(sh.seqlen, T::kBlockM));
  CUDA_CHECK(cudaMemsetAsync(abort_flag(), 0, sizeof(unsigned), stream));  // every launch waits afresh
  kernel<<<grid, T::kThreads, T::kSmemBytes, stream>>>(tm_q, tm_k, tm_v, a.o, sh.seqlen, a.softmax_scale * ladder::kLog2e);
  CUDA_CHECK_LAUNCH("ring_kernel");
}

void launch(const AttentionArgs& a, cudaStream_t stream) {
  ladder::dispatch_head_dim<64, 128>(a.shape.head_dim, [&]<int kHeadDim>() {
    if (a.shape.causal) launch_tile<kHeadDim, true>(a, stream);
    else launch_tile<kHeadDim, false>(a, stream);
  });
}

template <int kHeadDim>
std::vector<ladder::KernelInfo> kernels() {
  using T = Tile<kHeadDim>;
  const auto name = ladder::strprintf("ring_kernel<D=%d,%dx%d,%d stages>", kHeadDim, T::kBlockM, T::kBlockN, T::kStages);
  return {ladder::kernel(name, ring_kernel<T, false>, T::kThreads, T::kSmemBytes),
          ladder::kernel(name + " causal", ring_kernel<T, true>, T::kThreads, T::kSmemBytes)};
}

LADDER_REGISTER_STEP(
    ladder::attention_step(56, "lab_mbarrier_ring", "Lab 06: the K/V mbarrier ring of a warp-specialized kernel", "18/ws")
        .add(ladder::attention_variant("ring", "step 18's kernel on your ring.hpp (stage, parities, bytes, release)", launch)
                 .needs_sm(90)
                 .for_head_dims({64, 128})
                 .refuse_if([](const ladder::AttentionShape&) { return hopper::refuse_unless_sm90(); })
                 .with_kernels([](int d) { return d == 128 ? kernels<128>() : kernels<64>(); })));

}  // namespace

namespace lab06 {
Stalls take_stalls() {
  DeviceStalls s{};
  CUDA_CHECK(cudaDeviceSynchronize());
  CUDA_CHECK(cudaMemcpyFromSymbol(&s, g_stalls, sizeof(s)));
  const DeviceStalls zero{};
  CUDA_CHECK(cudaMemcpyToSymbol(g_stalls, &zero, sizeof(zero)));
  Stalls out{};
  if (s.seen[0]) out.producer = s.stall[0];
  if (s.seen[1]) out.consumer = s.stall[1];
  return out;
}
}  // namespace lab06
