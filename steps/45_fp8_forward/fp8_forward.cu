// Step 45 — the FP8 forward: Q, K, V in e4m3, twice the tensor rate, and what it costs to get it.
//
// Hopper's tensor cores multiply e4m3 (1 sign, 4 exponent, 3 fraction bits) at twice the fp16 rate:
// 1979 dense TFLOP/s on the H200. Step 33's kernel with one-byte inputs would be the whole lesson
// if the instruction took the same operands. It does not (common/device/hopper/fp8.cuh says why):
//
//   - both shared-memory operands must be K-major, and V is not: P·V is reduced over keys, and V
//     is stored [keys][D]. The producer warpgroup, idle in every Part IV kernel but for one TMA
//     thread, now transposes each V block in shared memory: warp 0 keeps the copies going, warps
//     1-3 turn each landed V into Vᵀ and signal vt_full. How they move the bytes is the chapter's
//     measured question: 16 bytes a lane through ldmatrix.trans and stmatrix (the variant `fp8`),
//     or 4 bytes a lane through plain loads and stores (`fp8_words`, the ablation row);
//   - the A operand of P·V wants four consecutive keys a register where S's accumulator gives a
//     thread pairs; the thread packs what it holds, and the transpose stores Vᵀ's keys in the
//     same order, so the sum over keys pairs every P with its own V (kPermutedKey);
//   - P is quantized to e4m3 too: the softmax computes P · 2^8 (online_softmax's kPLog2Offset) so
//     that it sits in e4m3's normal range, and the row sum carries the same factor.
//
// The scales: each tensor arrives with power-of-two descales (the harness's quantization,
// common/dtype.hpp), one a tensor or one a head (FlashAttention-3's (batch, head) descales).
// S = (Q₈·K₈ᵀ)·q_descale·k_descale, so both fold into the softmax scale; O = (P·V₈)·v_descale / l,
// so V's folds into the final division. With one a head, a tile reads its head's three once, before
// its first block. Accumulation is fp32 throughout, O is written in bf16.
//
// Everything else is step 33's kernel: the persistent static schedule (the row walk; with the
// causal mask the snake; GQA's group walk), the ping-pong of two consumer warpgroups, 64 query
// rows each, 128-key blocks, descriptors built once. Two things differ for the bytes: the ring has
// 4 stages (the producer's transpose needs the slack) and O goes out from registers, since an O
// staging buffer would cost that fourth stage.
// D = 128 or 64. A D = 128 row of e4m3 is one 128-byte swizzle row, as a 16-bit kernel's column
// block is; a D = 64 row is 64 bytes, in the 64-byte swizzle (its TMA maps, its descriptors and
// the transpose's loads: common/fp8_layout.hpp). Vᵀ's rows are 128 keys either way.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <initializer_list>
#include <vector>

#include "common/device/hopper/fp8.cuh"
#include "common/device/hopper/hopper.cuh"
#include "common/dtype.hpp"
#include "common/math.hpp"
#include "common/registry.hpp"
#include "common/strings.hpp"

namespace {

using ladder::AttentionArgs;
namespace hopper = ladder::hopper;
namespace ptx = ladder::ptx;

using hopper::kWarpgroupThreads;

template <int kHeadDim_>
struct Tile {
  using Element = std::uint8_t;  // e4m3, as bytes (O is bf16)
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kConsumers = 2;
  static constexpr int kThreads = (1 + kConsumers) * kWarpgroupThreads;
  // The producer warpgroup now computes (the transpose): more than the 24 a lone TMA thread needs.
  static constexpr int kProducerRegisters = 48;
  static constexpr int kConsumerRegisters = 224;
  static constexpr int kTransposeWarps = 3;  // producer warps 1-3; warp 0 issues the copies
  static constexpr int kBlockM = 64 * kConsumers;
  static constexpr int kBlockN = 128;
  static constexpr int kStages = 4;  // the 32 KB an O staging buffer would take (fp8.cuh)
  using Storage = hopper::Fp8AttentionStorage<kHeadDim, kBlockM, kBlockN, kStages>;
  static constexpr std::size_t kSmemBytes = hopper::smem_bytes_for<Storage>;
  static_assert(kBlockM % kBlockN == 0);
  static_assert(kBlockN == ladder::kE4M3KeyBlock, "the low-precision reference rounds P block by block over kE4M3KeyBlock keys");
  static_assert(kSmemBytes <= 227 * 1024, "an H200 CTA has 227 KiB of shared memory");
  // setmaxnreg moves registers between warps of the CTA's own allocation: what the launch gave
  // each thread (65536 / kThreads, rounded down to 8: 168), not the SM's 65536. A consumer's
  // increase that the producer's decrease does not pay for waits for ever.
  static constexpr int kLaunchRegisters = (65536 / kThreads) / 8 * 8;
  static_assert(kProducerRegisters * kWarpgroupThreads +
                    kConsumerRegisters * kConsumers * kWarpgroupThreads <= kLaunchRegisters * kThreads);
};

// How the transposing warps move V's bytes (common/device/hopper/fp8.cuh, common/fp8_layout.hpp).
enum class Transpose { Matrices, Words };

// The descales as the kernel folds them: the per-tensor ones already in scale_log2 and inv_v;
// the per-head arrays (AttentionArgs::q_head_descale, ...) null unless the problem has them.
struct Fp8Scales {
  float scale_log2;    // softmax_scale · log2(e) · q_descale · k_descale
  float inv_v;         // 1 / v_descale
  const float* q_head;  // [B·H], or null
  const float* k_head;  // [B·Hkv]
  const float* v_head;  // [B·Hkv]
};

// ---- The kernel -------------------------------------------------------------------------------
// grid: Scheduler::grid_size (about one CTA per SM); 1 producer + 2 consumer warpgroups.
template <class Scheduler, class T, bool kCausal, Transpose kTranspose>
__global__ void __launch_bounds__(T::kThreads, 1)
    fp8_forward_kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
                       const __grid_constant__ CUtensorMap tm_v, const __grid_constant__ CUtensorMap tm_o,
                       const __grid_constant__ typename Scheduler::Params schedule, int n, int group,
                       const Fp8Scales scales, __nv_bfloat16* o) {
#if LADDER_SM90A
  extern __shared__ unsigned char smem_raw[];
  auto& st = hopper::aligned_smem<typename T::Storage>(smem_raw);

  const int tid = threadIdx.x;
  const int warpgroup = hopper::warpgroup_index();
  const int warp_in_wg = (tid % kWarpgroupThreads) / 32;
  const int lane = tid % 32;
  const int g = lane / 4;
  const int t = lane % 4;
  const int consumer = warpgroup - 1;

  if (tid == 0) {
    hopper::tma_prefetch_map(&tm_q);
    hopper::tma_prefetch_map(&tm_k);
    hopper::tma_prefetch_map(&tm_v);
    hopper::init_barriers(st, T::kConsumers);
    for (int s = 0; s < T::kStages; ++s) hopper::mbarrier_init(&st.vt_full[s], T::kTransposeWarps);
    hopper::mbarrier_init_fence();
  }
  __syncthreads();

  Scheduler scheduler(schedule, &st.q_full, &st.q_empty);
  if (warpgroup == 0) {
    // ---- Producer: warp 0's first thread copies, warps 1-3 transpose ----
    hopper::setmaxnreg_dec<T::kProducerRegisters>();
    if (tid == 0) {
      hopper::produce_tiles<T, kCausal>(st, scheduler, &tm_q, &tm_k, &tm_v, hopper::GroupedRows{n, group});
    } else if (warp_in_wg >= 1) {
      // The same tiles in the same order as the copies (a static schedule: a function of the
      // CTA's index), the same ring position: block `it` of the CTA is in stage it % kStages.
      int it = 0;
      for (auto w = scheduler.producer_first(); w.valid; w = scheduler.producer_next()) {
        const hopper::Span sp = hopper::span_of<T, kCausal>(w, n);
        for (int i = 0; i < sp.n_blocks; ++i, ++it) {
          const int stage = hopper::ring_stage<T::kStages>(it);
          // V has landed (kv_full), and Vᵀ's previous lap is free: kv_full's next phase needs the
          // consumers' release of this stage, which they give only after their P·V of it.
          hopper::wait_kv_block(st, it);
          if constexpr (kTranspose == Transpose::Matrices)
            hopper::transpose_v_block_matrices<T::kTransposeWarps, T::kBlockN, T::kHeadDim>(st.v[stage], st.vt[stage],
                                                                                          warp_in_wg - 1, lane);
          else
            hopper::transpose_v_block_words<T::kTransposeWarps>(st.v[stage], st.vt[stage], warp_in_wg - 1, lane);
          // The generic-proxy stores must be visible to wgmma (the async proxy) before the release.
          hopper::fence_proxy_async_smem();
          __syncwarp();
          if (lane == 0) hopper::mbarrier_arrive(&st.vt_full[stage]);
        }
      }
    }
    return;
  }

  // ---- Consumers ----
  hopper::setmaxnreg_inc<T::kConsumerRegisters>();

  constexpr int kTurnThreads = 2 * kWarpgroupThreads;
  auto wait_turn = [&] { hopper::named_barrier_sync<kTurnThreads>(hopper::turn_barrier(consumer)); };
  auto pass_turn = [&] { hopper::named_barrier_arrive<kTurnThreads>(hopper::turn_barrier(consumer ^ 1)); };
  if (consumer == 1) pass_turn();

  // Descriptors built once (step 33): this warpgroup's 64 rows of Q, K and Vᵀ at stage 0. All three
  // are K-major 128-byte rows now.
  const std::uint64_t q_desc = hopper::desc_k_major_rows<T::kHeadDim>(ptx::smem_addr(st.q) + consumer * 64 * T::kHeadDim);
  const std::uint64_t k_desc = hopper::desc_k_major_rows<T::kHeadDim>(ptx::smem_addr(st.k));
  const std::uint64_t vt_desc = hopper::desc_k_major(ptx::smem_addr(st.vt));
  const int local_row0 = consumer * 64 + warp_in_wg * 16 + g;
  const bool store_thread = (tid % kWarpgroupThreads) == 0;  // releases the Q buffer

  float acc_o[T::kHeadDim / 2];
  float row_max[2];
  float row_sum[2];
  float s[T::kBlockN / 2];
  std::uint32_t p[T::kBlockN / 32][4];  // P of the previous block in e4m3: half step 33's registers
  float rescale[2];

  auto issue_s = [&](int stage) { hopper::issue_qk_e4m3<T::kHeadDim>(s, q_desc, hopper::desc_advance(k_desc, stage * T::Storage::kKVBytes)); };
  auto issue_pv = [&](int stage) { hopper::issue_pv_e4m3(acc_o, p, hopper::desc_advance(vt_desc, stage * T::Storage::kKVBytes)); };
  auto wait_vt = [&](int position) {
    hopper::mbarrier_wait(&st.vt_full[hopper::ring_stage<T::kStages>(position)], hopper::ring_parity<T::kStages>(position));
  };

  int it = 0;
  for (hopper::WorkTile w = scheduler.consumer_first(); w.valid; w = scheduler.consumer_next()) {
    const hopper::Span sp = hopper::span_of<T, kCausal>(w, n);
    const int row0 = sp.q_start + local_row0;
    // This tile's head's descales (a head of Q, its K/V head w.bh / group): the same address in
    // every thread, one broadcast load each.
    float scale_log2 = scales.scale_log2, inv_v_descale = scales.inv_v;
    if (scales.q_head != nullptr) {
      const int kv_bh = w.bh / group;
      scale_log2 *= scales.q_head[w.bh] * scales.k_head[kv_bh];
      inv_v_descale /= scales.v_head[kv_bh];
    }
#pragma unroll
    for (int i = 0; i < T::kHeadDim / 2; ++i) acc_o[i] = 0.f;
    row_max[0] = row_max[1] = -INFINITY;
    row_sum[0] = row_sum[1] = 0.f;

    auto softmax_block = [&](int i, auto masked) {
      if constexpr (decltype(masked)::value) {
        const int kv_start = (sp.n_blocks - 1 - i) * T::kBlockN;
        const bool ragged = kv_start + T::kBlockN > n;
        const bool diagonal = kCausal && kv_start + T::kBlockN - 1 > sp.q_start + consumer * 64;
        if (ragged || diagonal) hopper::mask_scores<T::kBlockN, kCausal>(s, row0, kv_start, n, t);
      }
      hopper::online_softmax<T::kBlockN, hopper::kPLog2Offset>(s, row_max, row_sum, scale_log2, rescale);
    };

    scheduler.wait_q();

    // Block 0: S_0 alone.
    hopper::wait_kv_block(st, it);
    wait_turn();
    hopper::wgmma_fence();
    issue_s(hopper::ring_stage<T::kStages>(it));
    hopper::wgmma_commit();
    pass_turn();
    hopper::wgmma_wait<0>();
    hopper::fence_registers(s);
    softmax_block(0, std::true_type{});
    hopper::p_to_a_e4m3<T::kBlockN>(s, p);

    // Block i: S_i and P_{i-1} V_{i-1}, the second once block i-1's Vᵀ is written.
    auto iteration = [&](int i, auto masked) {
      const int stage = hopper::ring_stage<T::kStages>(it + i);
      const int prev_stage = hopper::ring_stage<T::kStages>(it + i - 1);
      hopper::wait_kv_block(st, it + i);
      wait_vt(it + i - 1);
      wait_turn();
      hopper::wgmma_fence();
      issue_s(stage);
      hopper::wgmma_commit();
      issue_pv(prev_stage);
      hopper::wgmma_commit();
      pass_turn();
      hopper::wgmma_wait<1>();
      hopper::fence_registers(s);
      softmax_block(i, masked);
      hopper::wgmma_wait<0>();
      hopper::fence_registers(acc_o);
      hopper::release_kv_stage(st, prev_stage, lane);
      hopper::rescale_o<T::kHeadDim>(acc_o, rescale);
      hopper::p_to_a_e4m3<T::kBlockN>(s, p);
    };
    int i = 1;
    for (; i < sp.n_masked; ++i) iteration(i, std::true_type{});
    for (; i < sp.n_blocks; ++i) iteration(i, std::false_type{});

    const int last_stage = hopper::ring_stage<T::kStages>(it + sp.n_blocks - 1);
    wait_vt(it + sp.n_blocks - 1);
    wait_turn();
    hopper::wgmma_fence();
    issue_pv(last_stage);
    hopper::wgmma_commit();
    if (consumer == 0 || scheduler.may_have_next()) pass_turn();
    hopper::wgmma_wait<0>();
    hopper::fence_registers(acc_o);
    hopper::release_kv_stage(st, last_stage, lane);
    it += sp.n_blocks;

    // V's descale joins the division by l (a power of two: exact). l carries P's 2^8, as O does.
#pragma unroll
    for (int h = 0; h < 2; ++h) row_sum[h] *= inv_v_descale;
    hopper::store_o_rows_fp8<T::kHeadDim>(st, acc_o, row_sum, o + std::int64_t(w.bh) * n * T::kHeadDim, row0, n, t,
                                          consumer, store_thread);
  }
#elif defined(__CUDA_ARCH__)
  __trap();
#endif  // LADDER_SM90A
}

// ---- Host side --------------------------------------------------------------------------------
// Q, K, V as bytes in D-byte rows (one column block, 128- or 64-byte swizzle), O as bf16 in 64-row
// boxes of one 64-column block (unused: the epilogue stores from registers, store_o_rows_fp8).
template <class T>
hopper::ForwardMaps fp8_maps(const AttentionArgs& args) {
  const auto a = args.as_fp8();
  const auto& sh = args.shape;
  const int heads = sh.batch * sh.heads, kv_heads = sh.batch * sh.hkv(), n = sh.seqlen;
  return {hopper::make_attention_tensor_map(a.q, heads, n, T::kHeadDim, T::kBlockM),
          hopper::make_attention_tensor_map(a.k, kv_heads, n, T::kHeadDim, T::kBlockN),
          hopper::make_attention_tensor_map(a.v, kv_heads, n, T::kHeadDim, T::kBlockN),
          hopper::make_attention_tensor_map(a.o, heads, n, T::kHeadDim, 64, 1)};
}

template <class Scheduler, class T, bool kCausal, Transpose kTranspose>
void launch_tile(const AttentionArgs& args, cudaStream_t stream) {
  const auto& sh = args.shape;
  const hopper::ScheduleArgs sched = hopper::dense_schedule<T>(args, stream, sh.group());
  // Per-head descales come with the scalars at 1 (AttentionArgs' contract): each is folded once.
  const Fp8Scales scales{args.softmax_scale * ladder::kLog2e * args.q_descale * args.k_descale, 1.f / args.v_descale,
                         args.q_head_descale, args.k_head_descale, args.v_head_descale};
  hopper::launch_persistent<T>(fp8_forward_kernel<Scheduler, T, kCausal, kTranspose>, "fp8_forward_kernel",
                               Scheduler::grid_size(sched), fp8_maps<T>(args), Scheduler::make_params(sched),
                               stream, sh.seqlen, sh.group(), scales, args.as_fp8().o);
}

// Causal: the snake. Without a mask: the row walk, or GQA's group walk (the heads that read one
// K/V block side by side).
template <Transpose kTranspose, int kHeadDim>
void launch_d(const AttentionArgs& a, cudaStream_t stream) {
  using T = Tile<kHeadDim>;
  if (a.shape.causal) launch_tile<hopper::Snake, T, true, kTranspose>(a, stream);
  else if (a.shape.gqa()) launch_tile<hopper::GroupWalk, T, false, kTranspose>(a, stream);
  else launch_tile<hopper::RowWalk<false>, T, false, kTranspose>(a, stream);
}
// The word transpose's lane maps are written for 128-byte rows: that variant serves D = 128 only.
template <Transpose kTranspose>
void launch(const AttentionArgs& a, cudaStream_t stream) {
  if constexpr (kTranspose == Transpose::Matrices)
    if (a.shape.head_dim == 64) return launch_d<kTranspose, 64>(a, stream);
  launch_d<kTranspose, 128>(a, stream);
}

template <Transpose kTranspose, int kHeadDim>
std::vector<ladder::KernelInfo> kernels_d() {
  using T = Tile<kHeadDim>;
  const auto name = ladder::strprintf("fp8_forward_kernel<D=%d,%dx%d,%d stages,e4m3,%s>", T::kHeadDim, T::kBlockM,
                                      T::kBlockN, T::kStages, kTranspose == Transpose::Matrices ? "ldsm.t" : "words");
  std::vector<ladder::KernelInfo> out;
  out.push_back(ladder::kernel(name, fp8_forward_kernel<hopper::RowWalk<false>, T, false, kTranspose>, T::kThreads,
                               T::kSmemBytes).when_causal(false));
  out.push_back(ladder::kernel(name + " gqa", fp8_forward_kernel<hopper::GroupWalk, T, false, kTranspose>, T::kThreads,
                               T::kSmemBytes).when_causal(false));
  out.push_back(ladder::kernel(name + " causal,snake", fp8_forward_kernel<hopper::Snake, T, true, kTranspose>,
                               T::kThreads, T::kSmemBytes).when_causal(true));
  for (auto& k : out) k.dtype = ladder::DType::E4M3;
  return out;
}
template <Transpose kTranspose>
std::vector<ladder::KernelInfo> kernels(int head_dim) {
  if constexpr (kTranspose == Transpose::Matrices)
    if (head_dim == 64) return kernels_d<kTranspose, 64>();
  return kernels_d<kTranspose, 128>();
}

ladder::Variant fp8_variant(const char* name, const char* what, ladder::AttentionLaunch fn,
                            std::vector<ladder::KernelInfo> (*kernels_of)(int), std::initializer_list<int> head_dims) {
  return ladder::attention_variant(name, what, fn)
      .needs_sm(90)
      .for_head_dims(head_dims)
      .for_dtypes({ladder::DType::E4M3})
      .serves({ladder::Feature::Gqa, ladder::Feature::HeadScales})
      .refuse_if([](const ladder::AttentionShape&) { return hopper::refuse_unless_sm90(); })
      .with_kernels([kernels_of](int head_dim) { return kernels_of(head_dim); });
}

LADDER_REGISTER_STEP(
    ladder::attention_step(45, "fp8_forward", "FP8: Q, K, V and P in e4m3, V transposed by the producer", "33/iterators")
        .add(fp8_variant("fp8", "33/iterators in e4m3: the producer's warps 1-3 transpose V in shared memory with ldmatrix.trans and stmatrix, P packed into P·V's A operand in place, bf16 O",
                         launch<Transpose::Matrices>, kernels<Transpose::Matrices>, {64, 128}))
        .add(fp8_variant("fp8_words", "fp8 with V transposed by 32-bit loads and stores (4 bytes a lane where ldmatrix moves 16)",
                         launch<Transpose::Words>, kernels<Transpose::Words>, {128})));

}  // namespace
