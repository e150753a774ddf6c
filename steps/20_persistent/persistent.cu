// Step 20 — a persistent grid and a TMA store epilogue.
//
// Through step 19 the grid has one CTA per 128-row query tile: B·H·N/128 CTAs (2048 at B=4 H=8
// N=4096), each paying a prologue (barrier set-up, the first loads with nothing to overlap them)
// and an epilogue (normalise and store O, with the tensor cores idle), and at the end a last,
// partial wave. Here the grid is one CTA per SM, and each CTA walks a list of tiles:
//
//   * a static tile scheduler: CTA c takes tiles c, c + G, c + 2G, ... (G = gridDim.x). Without
//     a mask, tiles are numbered head-major (the CTAs running together share a few heads' K and
//     V in L2); with the causal mask, heaviest query blocks first (as in step 06's h200), so the
//     short tiles fill the end;
//   * the K/V ring and its barriers run on across tiles (one position counter for the CTA's
//     life), so the producer loads the next tile's first blocks while the consumers finish the
//     current one;
//   * Q gets an "empty" barrier too: the producer loads the next tile's Q only once both
//     consumer warpgroups have finished with the buffer;
//   * the epilogue writes O into the consumer's own 64 rows of the Q buffer (in the swizzled
//     layout) and one thread hands them to the TMA engine (cp.async.bulk.tensor store, one per
//     64-column block). The engine clips rows past N, so the ragged tile needs no mask; the
//     thread waits only until the engine has read shared memory, then releases the Q buffer.
//
// What stays from step 19: the producer/consumer split, the ping-pong and in-warpgroup overlap,
// the tiles and the arithmetic.
//
// The last step of the part also runs bf16: the element type is a template parameter, and only the
// tensor maps' type, wgmma's type suffix and the two conversions (P to the A operand, O to the
// output) depend on it (common/device/hopper/).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <stdexcept>
#include <functional>
#include <optional>
#include <cstdint>
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
constexpr int kMaxCtas = 1024;  // the dynamic scheduler's slots (one CTA per SM: 132 on an H200)

template <int kHeadDim_, int kStages_, class Element_ = __half, bool kSnake_ = false,
          bool kDynamic_ = false>
struct Tile {
  using Element = Element_;  // __half or __nv_bfloat16
  static constexpr bool kSnake = kSnake_;  // causal: the CTAs walk the tile list as a snake (tile_of)
  // causal: each CTA takes its next tile from a counter in global memory, and the list is ordered
  // for L2 (heaviest first within windows of heads) instead of for a static balance
  static constexpr bool kDynamic = kDynamic_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kWarpgroups = 2;  // consumers
  static constexpr int kThreads = (1 + kWarpgroups) * kWarpgroupThreads;  // + the producer
  static constexpr int kProducerRegisters = 24;
  static constexpr int kConsumerRegisters = 240;
  static constexpr int kBlockM = 64 * kWarpgroups;  // query rows per CTA
  static constexpr int kBlockN = 128;               // keys per K/V block
  static constexpr int kStages = kStages_;          // K/V ring depth
  static constexpr std::uint32_t kQBytes = kBlockM * kHeadDim * sizeof(Element);
  static constexpr std::uint32_t kKVBytes = kBlockN * kHeadDim * sizeof(Element);
  static constexpr std::size_t kBarrierBytes = (2 + 2 * kStages) * sizeof(std::uint64_t);
  // +1024: the dynamic shared memory base is rounded up to the swizzle atom's alignment.
  static constexpr std::size_t kSmemBytes = kQBytes + 2 * kStages * kKVBytes + kBarrierBytes + 1024;
  static_assert(kHeadDim % 64 == 0 && kBlockM % kBlockN == 0);
  static_assert(kProducerRegisters * kWarpgroupThreads +
                    kConsumerRegisters * kWarpgroups * kWarpgroupThreads <= 65536);
};

// ---- The kernel -------------------------------------------------------------------------------
// grid (B·H, ceil(N / kBlockM)) with the query blocks numbered from the end (heaviest causal CTAs
// first, as in step 06's h200 variant).
template <class T, bool kCausal>
__global__ void __launch_bounds__(T::kThreads, 1)
    persistent_kernel(const __grid_constant__ CUtensorMap tm_q,
                      const __grid_constant__ CUtensorMap tm_k,
                      const __grid_constant__ CUtensorMap tm_v,
                      const __grid_constant__ CUtensorMap tm_o, int bh_count, int n,
                      float scale_log2, int* tile_counter, int heads_per_window) {
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
  std::uint64_t* q_empty = q_full + 1;             // both consumers are done with the Q buffer
  std::uint64_t* kv_full = q_empty + 1;            // [kStages]: the copies have landed
  std::uint64_t* kv_empty = kv_full + T::kStages;  // [kStages]: the consumers are done with it
  // The dynamic scheduler's slot: where the producer leaves the tile index for the consumers. It
  // is this CTA's word of the workspace, after the counter. The handoff is ordered by q_full
  // (arrive = release, wait = acquire) wherever the word lives; it lives in global memory because
  // compute-sanitizer's racecheck does not model that ordering for ordinary shared-memory accesses
  // and would report every handoff as a race.
  volatile int* tile_slot = T::kDynamic ? tile_counter + 1 + blockIdx.x : nullptr;

  const int tid = threadIdx.x;
  const int warpgroup = tid / kWarpgroupThreads;
  const int warp_in_wg = (tid % kWarpgroupThreads) / 32;
  const int lane = tid % 32;
  const int g = lane / 4;
  const int t = lane % 4;

  const int consumer = warpgroup - 1;  // 0, 1 in the consumer warpgroups
  const int m_blocks = ceil_div(n, T::kBlockM);
  const int n_tiles = m_blocks * bh_count;

  // The scheduler: tile index -> (head, query block).
  struct Work {
    int bh, q_start, n_blocks, n_masked;
  };
  auto work_of = [&](int tile) {
    Work w;
    int m_block;
    if constexpr (kCausal && T::kDynamic) {
      // Windows of W heads, heaviest query block first inside each: the CTAs running together
      // share a few heads' K and V in L2; the counter balances whatever the order.
      const int per_window = heads_per_window * m_blocks;
      const int full_windows = bh_count / heads_per_window;
      const bool in_full = tile < full_windows * per_window;
      const int window = in_full ? tile / per_window : full_windows;
      const int j = in_full ? tile % per_window : tile - full_windows * per_window;
      const int width = in_full ? heads_per_window : bh_count - full_windows * heads_per_window;
      m_block = m_blocks - 1 - j / width;
      w.bh = window * heads_per_window + j % width;
    } else if constexpr (kCausal) {
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

  // The CTA's r-th tile. Row r of the list is tiles [rG, rG + G) (G = gridDim.x), one per CTA.
  // Taken left to right in every row, CTA 0 gets the first tile of each row — with the causal
  // heaviest-first order, the heaviest of every row, so it finishes last. A snake walk (right to
  // left in odd rows) gives each CTA the heavy end of one row and the light end of the next.
  // Without a mask every tile weighs the same and there is nothing to balance: the row walk is
  // kept, and the snake variant launches the row walk's kernel there.
  auto tile_of = [&](int r) {
    const int g = int(gridDim.x), c = int(blockIdx.x);
    return (T::kSnake && kCausal && (r & 1)) ? r * g + (g - 1 - c) : r * g + c;
  };
  // The dynamic scheduler (causal only: equal tiles need no balancing) replaces tile_of after
  // each CTA's first tile.
  constexpr bool kCounter = T::kDynamic && kCausal;

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
      int local = 0;  // the CTA's tile count: the phase of q_full and q_empty
      // A static schedule's next tile is tile_of(local); the dynamic one's comes from the counter
      // (its first is static too: blockIdx.x).
      for (int tile = tile_of(0); tile < n_tiles; ++local) {
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
        // The dynamic schedule's consumers read the tile from the slot once q_full completes (the
        // arrive releases the store, their wait acquires it). They read it at the start of a tile
        // and release the Q buffer at its end, so past the q_empty wait nobody needs the old value.
        if constexpr (kCounter) *tile_slot = tile;
        hopper::mbarrier_arrive_expect_tx(q_full, T::kQBytes);
        hopper::tma_load_tile(s_q, &tm_q, q_full, w.q_start, w.bh);
        // The next tile, fetched now so that the counter's round trip hides under the loads.
        if constexpr (kCounter) tile = int(gridDim.x) + atomicAdd(tile_counter, 1);
        else tile = tile_of(local + 1);
        for (; i < w.n_blocks; ++i) load_kv(i);
      }
      if constexpr (kCounter) {
        // No tile left: one more q_full phase, with no copy, carries "stop" (-1) to the consumers.
        hopper::mbarrier_wait(q_empty, (local & 1) ^ 1);
        *tile_slot = -1;
        hopper::mbarrier_arrive(q_full);
      }
    }
    return;  // nothing after the split waits for the producer's threads
  }

  // ---- Consumers ----
  hopper::setmaxnreg_inc<T::kConsumerRegisters>();

  // Ping-pong turns: named barrier 1 + c is "consumer c may issue its GEMMs".
  constexpr int kTurnThreads = 2 * kWarpgroupThreads;
  auto wait_turn = [&] { hopper::named_barrier_sync<kTurnThreads>(1 + consumer); };
  auto pass_turn = [&] { hopper::named_barrier_arrive<kTurnThreads>(1 + (consumer ^ 1)); };
  if (consumer == 1) pass_turn();  // consumer 0 issues first

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
#pragma unroll
    for (int kk = 0; kk < T::kHeadDim / 16; ++kk) {
      const std::uint32_t col = (kk % 4) * 32;  // bytes into the 128-byte row
      hopper::Wgmma<T::kBlockN, Element>::ss(s, hopper::desc_k_major(q_addr + (kk / 4) * kQColumnBlock + col),
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
  // The consumers' local-th tile, or -1 when there is none: a static schedule computes it, the
  // dynamic one reads what the producer put in the slot once q_full has completed.
  auto consumer_tile = [&](int local) -> int {
    if constexpr (kCounter) {
      hopper::mbarrier_wait(q_full, local & 1);
      return *tile_slot;
    } else {
      const int tile = tile_of(local);
      return tile < n_tiles ? tile : -1;
    }
  };
  for (int local = 0, tile = consumer_tile(0); tile >= 0; tile = consumer_tile(++local)) {
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

    if constexpr (!kCounter) hopper::mbarrier_wait(q_full, local & 1);

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

    // The last P·V. The last turn of the CTA's last tile passes nothing from consumer 1:
    // consumer 0 has no turn left to take (within the CTA's life the turns simply alternate).
    const int last_stage = (it + w.n_blocks - 1) % T::kStages;
    wait_turn();
    hopper::wgmma_fence();
    issue_pv(last_stage);
    hopper::wgmma_commit();
    // (The dynamic schedule cannot know whether another tile follows: consumer 1 always passes,
    // and consumer 0 takes that last turn after the loop.)
    if (consumer == 0 || kCounter || tile_of(local + 1) < n_tiles) pass_turn();
    hopper::wgmma_wait<0>();
    hopper::fence_registers(acc_o);
    release(last_stage);
    it += w.n_blocks;

    // Epilogue: O / l into this warpgroup's own 64 rows of the Q buffer (its last S product,
    // the only reader of those rows, has completed), fenced into the async proxy, then one
    // thread stores them with the copy engine once the warpgroup's writes are all done.
    hopper::finalize_rows<T::kHeadDim>(acc_o, row_sum);
    hopper::stage_o_rows<T::kHeadDim, T::kBlockM>(acc_o, s_q, local_row0, t);
    hopper::fence_proxy_async_smem();
    hopper::named_barrier_sync<kWarpgroupThreads>(3 + consumer);
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
  if constexpr (kCounter) {
    if (consumer == 0) wait_turn();
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

std::size_t l2_bytes() {
  int device = 0;
  int bytes = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&bytes, cudaDevAttrL2CacheSize, device));
  return std::size_t(bytes);
}

template <class T, bool kCausal>
void launch_tile(const AttentionArgs& args, cudaStream_t stream) {
  constexpr int kHeadDim = T::kHeadDim;
  const auto a = args.as<typename T::Element>();  // Q, K, V, O in the kernel's element type
  auto* kernel = persistent_kernel<T, kCausal>;
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
  int* tile_counter = nullptr;
  int heads_per_window = 1;
  if constexpr (T::kDynamic && kCausal) {
    // The counter starts at 0 for every launch (one memset, inside the timed interval); the
    // CTAs' slots follow it (kMaxCtas words).
    if (grid > kMaxCtas) throw std::logic_error("persistent_dynamic: more CTAs than its workspace has slots");
    tile_counter = static_cast<int*>(args.workspace);
    if (tile_counter == nullptr)
      throw std::logic_error("persistent_dynamic runs without its workspace (the tile counter)");
    CUDA_CHECK(cudaMemsetAsync(tile_counter, 0, sizeof(int), stream));
    // As many heads per window as have K and V fitting in half of the L2.
    static const std::size_t l2 = l2_bytes();
    const std::size_t kv_bytes = 2 * std::size_t(sh.seqlen) * kHeadDim * sizeof(typename T::Element);
    heads_per_window = int(std::clamp<std::size_t>(l2 / 2 / kv_bytes, 1, std::size_t(bh)));
  }
  kernel<<<grid, T::kThreads, T::kSmemBytes, stream>>>(tm_q, tm_k, tm_v, tm_o, bh, sh.seqlen,
                                                       args.softmax_scale * ladder::kLog2e,
                                                       tile_counter, heads_per_window);
  CUDA_CHECK_LAUNCH("persistent_kernel");
}

template <int kStages, bool kSnake, bool kDynamic, class Element>
void launch_element(const AttentionArgs& a, cudaStream_t stream) {
  ladder::dispatch_head_dim<64, 128>(a.shape.head_dim, [&]<int kHeadDim>() {
    // Without a mask the schedules change nothing: the row walk's kernel is launched.
    using T = Tile<kHeadDim, kStages, Element, kSnake, kDynamic>;
    if (a.shape.causal) launch_tile<T, true>(a, stream);
    else launch_tile<Tile<kHeadDim, kStages, Element>, false>(a, stream);
  });
}

template <int kStages, bool kSnake, bool kDynamic>
void launch(const AttentionArgs& a, cudaStream_t stream) {
  if (a.shape.dtype == ladder::DType::BF16) launch_element<kStages, kSnake, kDynamic, __nv_bfloat16>(a, stream);
  else launch_element<kStages, kSnake, kDynamic, __half>(a, stream);
}

template <int kHeadDim, int kStages, bool kSnake, bool kDynamic>
std::vector<ladder::KernelInfo> kernels() {
  std::vector<ladder::KernelInfo> out;
  auto add = [&]<class Element>(const char* type) {
    using Row = Tile<kHeadDim, kStages, Element>;  // the row walk (every non-causal kernel)
    using T = Tile<kHeadDim, kStages, Element, kSnake, kDynamic>;
    const auto name = ladder::strprintf("persistent_kernel<D=%d,%dx%d,%d stages%s>", kHeadDim,
                                        T::kBlockM, T::kBlockN, T::kStages, type);
    const auto causal_name = ladder::strprintf("persistent_kernel<D=%d,%dx%d,%d stages%s%s> causal",
                                               kHeadDim, T::kBlockM, T::kBlockN, T::kStages,
                                               kSnake ? ",snake" : kDynamic ? ",dynamic" : "", type);
    out.push_back(ladder::kernel(name, persistent_kernel<Row, false>, T::kThreads, T::kSmemBytes));
    out.push_back(ladder::kernel(causal_name, persistent_kernel<T, true>, T::kThreads, T::kSmemBytes));
    out[out.size() - 2].dtype = out.back().dtype = ladder::dtype_of<Element>();
  };
  add.template operator()<__half>("");
  add.template operator()<__nv_bfloat16>(",bf16");
  return out;
}

template <int kStages, bool kSnake = false, bool kDynamic = false>
ladder::Variant variant(const char* name, const char* description) {
  auto v = ladder::attention_variant(name, description, launch<kStages, kSnake, kDynamic>)
               .needs_sm(90)
               .for_head_dims({64, 128})
               .for_dtypes({ladder::DType::F16, ladder::DType::BF16})
               .refuse_if([](const ladder::AttentionShape&) { return hopper::refuse_unless_sm90(); })
               .with_kernels([](int d) {
                 return d == 128 ? kernels<128, kStages, kSnake, kDynamic>()
                                 : kernels<64, kStages, kSnake, kDynamic>();
               });
  if (kDynamic)  // the tile counter and one slot per CTA
    v.with_workspace(std::function<std::size_t(const ladder::AttentionShape&)>(
        [](const ladder::AttentionShape&) { return (1 + kMaxCtas) * sizeof(int); }));
  return v;
}

LADDER_REGISTER_STEP(
    ladder::attention_step(20, "persistent", "Persistent grid: one CTA per SM over a tile list, TMA store epilogue", "19/pingpong")
        .add(variant<2>("persistent", "19/pingpong on a persistent grid (static scheduler, ring across tiles), O by TMA store"))
        .add(variant<3>("persistent_3stage", "the same with a 3-stage K/V ring").compared_with("19/pingpong_3stage"))
        .add(variant<3, true>("persistent_snake", "the 3-stage kernel with the CTAs walking the causal tile list as a snake")
                 .same_kernel_when([](const ladder::AttentionShape& s) -> std::optional<std::string> {
                   if (!s.causal) return "20/persistent_3stage";  // no mask: the row walk's kernel
                   return std::nullopt;
                 }))
        .add(variant<3, false, true>("persistent_dynamic", "the 3-stage kernel with a dynamic causal scheduler (a tile counter) over an L2-friendly order (heaviest first within windows of heads)")
                 .compared_with("20/persistent_snake")
                 .same_kernel_when([](const ladder::AttentionShape& s) -> std::optional<std::string> {
                   if (!s.causal) return "20/persistent_3stage";  // no mask: the row walk's kernel
                   return std::nullopt;
                 }))
        .main_is("persistent_snake"));  // the fastest measured (docs/20_persistent.md, round 4)

}  // namespace
