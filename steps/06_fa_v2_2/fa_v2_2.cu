// Step 06 — FlashAttention v2.2: the details that separate step 05 from FlashAttention-2.
//
// Step 05 already has FA2's algorithm and FA2's instructions. The seed's line-by-line comparison
// with FA2 v2.6.3 lists what is left; this step adds it one idea at a time. Every variant changes
// exactly one thing against the variant it is compared with (in brackets); where an idea exists at
// one head dimension only, the variant is its baseline's kernel at the other D (same_kernel_at):
//
//   reverse          (05/bc64) K/V blocks last to first: the only blocks that need an element
//                    mask (the ragged end, the causal diagonal) come first, in their own loop
//   d128_s32         (reverse) D = 128: each 64-key block computed as two 32-key S tiles
//   d128_unroll2     (d128_s32) D = 128: Q Kᵀ's k16 loop unrolled by two, not fully
//   swizzle          (d128_unroll2) XOR-swizzled shared tiles instead of rows padded to D + 8
//   smem_epilogue    (swizzle) O staged through shared memory: 16-byte coalesced stores
//   lse              (smem_epilogue) the sum == 0 / NaN guard on 1/l, and the log-sum-exp
//   bc128            (lse) D = 64: FA2's 128 × 128 tile (Q moves back to shared memory)
//   bc128_s64        (lse) D = 64: 128-key blocks computed as two 64-key S tiles, Q in registers
//   h200             (bc128_s64) heaviest causal CTAs first — the step's main variant
//   d128_lean        (h200) D = 128: K read with the A lane map, cp.async offsets per block
//   d128_s64_unroll2 (d128_lean) D = 128: one 64-key S tile per block (FA2's 128 × 64)
//   d128_s64         (d128_s64_unroll2) D = 128: Q Kᵀ's k16 loop not unrolled
//
// One kernel template serves all of them: a Config carries the tile and a set of feature bits,
// and every difference below is an `if constexpr` on one of them. The fragment loops (S = Q Kᵀ,
// the mask, the online softmax, O += P V) are step 05's, from common/device/mma_attention.cuh.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "common/attention_launch.hpp"
#include "common/device/mma_attention.cuh"
#include "common/math.hpp"
#include "common/registry.hpp"
#include "common/strings.hpp"

namespace {

using ladder::AttentionArgs;
using ladder::ceil_div;
using ladder::mma::kWarpSize;
namespace ptx = ladder::ptx;
namespace frag = ladder::frag;
namespace mma = ladder::mma;
using ladder::kLog2e;

// ---- Features (the ablation) and tiles --------------------------------------------------------
// Reverse iteration is not a bit: every variant of this step has it (step 05 is the version
// without). The tile is not a bit either (it is Config's first parameters).
enum Feature : unsigned {
  kSwizzle = 1u << 0,
  kSmemEpilogue = 1u << 1,
  kLse = 1u << 2,
  kHeavyFirst = 1u << 3,
  kLeanRegisters = 1u << 4,  // the two register savings of d128_lean (see its config)
  kQkOneStep = 1u << 5,      // Q Kᵀ's k16 loop not unrolled (d128_s64 vs d128_s64_unroll2)
  kQkFullUnroll = 1u << 6,   // Q Kᵀ's k16 loop fully unrolled as in step 05 (reverse, d128_s32)
};

// kBlockN is the key block of the pipeline (one cp.async stage, one barrier); kComputeN the
// keys of one S tile in registers. Step 05 has them equal; splitting them lets the pipeline
// take big steps while S stays small enough to fit next to the O accumulator. Rows are padded
// (step 05) or dense and swizzled; see common/device/swizzle.cuh for the bank arithmetic of both.
template <int kHeadDim_, int kBlockN_, int kComputeN_, bool kQInRegisters_, int kMinBlocksPerSm_,
          unsigned kFeatures>
struct Config : mma::Shape<kHeadDim_, kBlockN_, kComputeN_,
                           (kFeatures & kSwizzle) != 0 ? kHeadDim_ : kHeadDim_ + 8> {
  using Base = mma::Shape<kHeadDim_, kBlockN_, kComputeN_,
                          (kFeatures & kSwizzle) != 0 ? kHeadDim_ : kHeadDim_ + 8>;
  static constexpr int kSubBlocks = kBlockN_ / kComputeN_;
  static constexpr bool kQInRegisters = kQInRegisters_;
  static constexpr int kMinBlocksPerSm = kMinBlocksPerSm_;

  static constexpr bool kSwizzled = (kFeatures & kSwizzle) != 0;
  static constexpr bool kSmemEpi = (kFeatures & kSmemEpilogue) != 0;
  static constexpr bool kWritesLse = (kFeatures & kLse) != 0;
  static constexpr bool kHeavy = (kFeatures & kHeavyFirst) != 0;
  static constexpr bool kLean = (kFeatures & kLeanRegisters) != 0;
  static constexpr bool kKWithAMap = kLean;  // see the kernel's K lane
  // k16 steps of S = Q Kᵀ unrolled together when Q is read from shared memory. Fully unrolled,
  // ptxas hoists the Q and K fragments of several steps ahead of their mma and runs out of
  // registers (bc128 spilled); two steps in flight still hide the ldmatrix latency behind
  // 4·kSTiles mma. kQkOneStep: not unrolled (d128_s64); kQkFullUnroll: step 05's full unroll.
  static constexpr int kQkUnroll = (kFeatures & kQkOneStep) != 0      ? 1
                                   : (kFeatures & kQkFullUnroll) != 0 ? Base::kDSteps
                                                                      : 2;

  static_assert(kBlockN_ % kComputeN_ == 0);
  static_assert(Base::kBlockM % kBlockN_ == 0, "the causal block count assumes Bc divides Br");
};

// Step 05's tiles (and its rules): Q in registers when Q, S and O fit in 160 registers,
// three CTAs per SM where that is reachable without spills (D = 64, Bc = 32).
template <int kHeadDim, int kBlockN, unsigned kFeatures>
using Step05Tiles = Config<kHeadDim, kBlockN, kBlockN,
                           2 * 4 * (kHeadDim / 16 + kHeadDim / 8 + kBlockN / 8) <= 160,
                           (kHeadDim == 64 && kBlockN == 32) ? 3 : 1, kFeatures>;


// ---- The kernel -------------------------------------------------------------------------------
// grid (ceil(N / kBlockM), B·H), or with kHeavyFirst and causal (B·H, ceil(N / kBlockM)) with
// the query blocks numbered from the end: a causal CTA's work grows with its query block, the
// hardware starts CTAs roughly in launch order, and starting the longest ones first keeps the
// last wave from being a few long CTAs on an otherwise idle GPU.
template <class T, bool kCausal>
__global__ void __launch_bounds__(T::kThreads, T::kMinBlocksPerSm)
    fa_v2_2_kernel(const __half* __restrict__ q, const __half* __restrict__ k,
                   const __half* __restrict__ v, __half* __restrict__ o, float* __restrict__ lse,
                   int n, float scale_log2, float softmax_scale) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  __half* s_q = reinterpret_cast<__half*>(smem_raw);  // [kBlockM][kStride]
  __half* s_k = s_q + T::kQElems;                     // [kStages][kBlockN][kStride]
  __half* s_v = s_k + T::kStages * T::kKVElems;       // [kStages][kBlockN][kStride]

  const int tid = threadIdx.x;
  const int warp = tid / kWarpSize;
  const int lane = tid % kWarpSize;
  const int g = frag::group_of(lane);
  const int t = frag::thread_in_group(lane);

  constexpr bool kHeavyOrder = kCausal && T::kHeavy;
  const int m_block = kHeavyOrder ? int(gridDim.y - 1 - blockIdx.y) : int(blockIdx.x);
  const int bh = kHeavyOrder ? int(blockIdx.x) : int(blockIdx.y);
  const int q_start = m_block * T::kBlockM;
  const int warp_row0 = q_start + warp * T::kRowsPerWarp;
  const int warp_row_last = warp_row0 + T::kRowsPerWarp - 1;
  const std::int64_t head = std::int64_t(bh) * n * T::kHeadDim;

  const int kv_end = kCausal ? min(n, q_start + T::kBlockM) : n;
  const int n_blocks = ceil_div(kv_end, T::kBlockN);
  // Blocks [0, n_full) need no mask at all: they end at or before N and, when causal, at or
  // before the CTA's first row (Bc divides Br, so q_start / Bc is exact). The rest, the
  // n_masked highest blocks, are exactly the ones a backward loop meets first.
  const int n_full = kCausal ? min(n / T::kBlockN, q_start / T::kBlockN) : n / T::kBlockN;
  const int n_masked = n_blocks - n_full;

  // Prologue: Q, then the LAST K/V block (the only one that can be ragged, so the only checked
  // load of K and V).
  const int last = n_blocks - 1;
  const std::int64_t last_offset = head + std::int64_t(last) * T::kBlockN * T::kHeadDim;
  const int last_rows = n - last * T::kBlockN;
  mma::load_tile_layout<T, T::kBlockM, true>(
      s_q, q + head + std::int64_t(q_start) * T::kHeadDim, n - q_start, tid);
  ptx::cp_async_commit();
  mma::load_tile_layout<T, T::kBlockN, true>(s_k + (last & 1) * T::kKVElems, k + last_offset,
                                             last_rows, tid);
  mma::load_tile_layout<T, T::kBlockN, true>(s_v + (last & 1) * T::kKVElems, v + last_offset,
                                             last_rows, tid);
  ptx::cp_async_commit();

  // This lane's ldmatrix rows: A map for Q and V, B map for K.
  const mma::LdsmLane q_lane = mma::ldsm_lane<T>(
      s_q, warp * T::kRowsPerWarp + frag::ldsm_a_row(lane), frag::ldsm_a_col(lane));
  // K and V: the same for every stage but for the stage's base address. kLean reads K with the
  // A map too (kKWithAMap: gemm_qk reorders the registers): the three operands then share one
  // lane row and chunk, and K and V differ only by a constant (no registers for a second map).
  const mma::LdsmLane k_lane0 =
      T::kLean ? mma::ldsm_lane<T>(s_k, frag::ldsm_a_row(lane), frag::ldsm_a_col(lane))
               : mma::ldsm_lane<T>(s_k, frag::ldsm_b_row(lane), frag::ldsm_b_col(lane));
  const mma::LdsmLane v_lane0 =
      mma::ldsm_lane<T>(s_v, frag::ldsm_a_row(lane), frag::ldsm_a_col(lane));

  std::uint32_t q_frag[T::kMTiles][T::kDSteps][4];
  if constexpr (T::kQInRegisters) {
    ptx::cp_async_wait<1>();
    __syncthreads();
    mma::load_q_fragments<T>(q_frag, q_lane);
  }

  float acc_o[T::kMTiles][T::kOTiles][4];
  float row_max[T::kMTiles][2];
  float row_sum[T::kMTiles][2];
  mma::init_rows<T>(acc_o, row_max, row_sum);

  // One K/V block. `masked` (std::true_type / std::false_type) selects at compile time whether
  // the body may contain mask code; the steady-state loop instantiates it without.
  auto process_block = [&](int block, auto masked) {
    const int stage = block & 1;
    const int kv_start = block * T::kBlockN;

    // Same pipeline as step 05, walking down: the next block is block − 1, never ragged.
    ptx::cp_async_wait<0>();
    __syncthreads();
    if (block > 0) {
      const std::int64_t next = head + std::int64_t(kv_start - T::kBlockN) * T::kHeadDim;
      // kLean recomputes the cp.async offsets from threadIdx.x read again (ptx::reread_tid, which
      // the compiler cannot merge with the first read) instead of keeping them live through the
      // loop: a few integer instructions per block, against a register that, at 255, ptxas can
      // only find by spilling something.
      const int load_tid = T::kLean ? ptx::reread_tid() : tid;
      mma::load_tile_layout<T, T::kBlockN, false>(s_k + (stage ^ 1) * T::kKVElems, k + next,
                                                  T::kBlockN, load_tid);
      mma::load_tile_layout<T, T::kBlockN, false>(s_v + (stage ^ 1) * T::kKVElems, v + next,
                                                  T::kBlockN, load_tid);
      ptx::cp_async_commit();
    }

    // The block's S tiles, upper keys first like the blocks themselves. Not unrolled: ptxas
    // would overlap one tile's Q Kᵀ with the previous tile's P V, which is exactly the register
    // pressure the split is there to avoid.
#pragma unroll 1
    for (int sub = T::kSubBlocks - 1; sub >= 0; --sub) {
      const int sub_start = kv_start + sub * T::kComputeN;
      if constexpr (decltype(masked)::value) {
        // Nothing to add: keys all past N (a ragged block's upper tiles), or, causal, a warp
        // whose last row is above the tile's first key. The barrier and the loads above are
        // collective and already done, so skipping is safe.
        if (sub_start >= n) continue;
        if (kCausal && sub_start > warp_row_last) continue;
      }
      const int tile_offset = stage * T::kKVElems + sub * T::kComputeN * T::kStride;
      const mma::LdsmLane k_lane{k_lane0.row + tile_offset, k_lane0.chunk};
      const mma::LdsmLane v_lane{v_lane0.row + tile_offset, v_lane0.chunk};
      float s[T::kMTiles][T::kSTiles][4];
      mma::gemm_qk<T>(s, q_frag, q_lane, k_lane);
      if constexpr (decltype(masked)::value) {
        const bool ragged = sub_start + T::kComputeN > n;
        const bool diagonal = kCausal && sub_start + T::kComputeN - 1 > warp_row0;
        if (ragged || diagonal) mma::apply_mask<T, kCausal>(s, warp_row0, sub_start, n, g, t);
      }
      // Iterating backwards makes the softmax's −inf guard load-bearing: the first block a warp
      // processes is a diagonal block, where rows above its first key have seen nothing yet.
      mma::online_softmax<T>(s, row_max, row_sum, acc_o, scale_log2);
      mma::gemm_pv<T>(acc_o, s, v_lane);
    }
  };

  int block = n_blocks - 1;
  for (int i = 0; i < n_masked; ++i, --block) process_block(block, std::true_type{});
  for (; block >= 0; --block) process_block(block, std::false_type{});

  // ---- Epilogue ----
  // Finish the deferred row sums. Every stored row has l >= 1 here (key 0 is visible to every
  // row, causal or not, and the row's max element contributes exp2(0)), but FA2 guards anyway:
  // with the lse variant a row with l == 0 or NaN gets O = 0 and lse = +inf.
  float inv_sum[T::kMTiles][2];
#pragma unroll
  for (int mi = 0; mi < T::kMTiles; ++mi)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float l = frag::quad_sum(row_sum[mi][h]);
      if constexpr (T::kWritesLse) {
        const bool empty = !(l > 0.f);  // also true for NaN
        inv_sum[mi][h] = empty ? 0.f : 1.f / l;
        const int row = warp_row0 + mi * 16 + g + 8 * h;
        if (t == 0 && row < n)  // the four lanes of the quad hold the same l
          lse[std::int64_t(bh) * n + row] =
              empty ? INFINITY : row_max[mi][h] * softmax_scale + logf(l);
      } else {
        inv_sum[mi][h] = 1.f / l;
      }
    }

  __half* o_head = o + head;
  const auto inv = [&](int mi, int h) { return inv_sum[mi][h]; };
  if constexpr (!T::kSmemEpi) {
    // Step 05's store: 4 bytes per lane straight from the accumulator.
    mma::store_o<T>(o_head, acc_o, inv, warp_row0, n, g, t);
  } else {
    // Staged through the warp's own 32 rows of the Q tile, then 16-byte row-major stores.
    mma::store_o_staged<T>(o_head, s_q, acc_o, inv, warp, warp_row0, n, lane);
  }
}

// ---- Host side (the boilerplate is common/attention_launch.hpp's) ------------------------------
struct FaV22 {
  template <class T, bool kCausal>
  static void launch(const AttentionArgs& a, cudaStream_t stream) {
    const auto& sh = a.shape;
    const int m_blocks = ceil_div(sh.seqlen, T::kBlockM);
    const int bh = sh.batch * sh.heads;
    const dim3 grid = (kCausal && T::kHeavy) ? dim3(bh, m_blocks) : dim3(m_blocks, bh);
    mma::launch_kernel<T>(fa_v2_2_kernel<T, kCausal>, grid, stream, "fa_v2_2_kernel", a.q, a.k,
                          a.v, a.o, a.lse, sh.seqlen, a.softmax_scale * kLog2e, a.softmax_scale);
  }
  // Named by the tile and the register-relevant bits (the feature bits are the variant's name).
  template <class T>
  static std::vector<ladder::KernelInfo> kernels(const char* /*variant*/) {
    const auto unroll = T::kQInRegisters ? std::string(",Q in regs")
                                         : ladder::strprintf(",QK unroll %d", T::kQkUnroll);
    const auto name = ladder::strprintf("fa_v2_2_kernel<D=%d,Bc=%d/%d%s%s>", T::kHeadDim,
                                        T::kBlockN, T::kComputeN, unroll.c_str(),
                                        T::kLean ? ",lean" : "");
    return mma::kernel_pair<T>(name, name + " causal", fa_v2_2_kernel<T, false>,
                               fa_v2_2_kernel<T, true>);
  }
};

template <class C64, class C128>
ladder::Variant make_variant(const char* name, const char* description) {
  auto v = mma::variant<FaV22, C64, C128>(name, description);
  if (C64::kWritesLse) v.with_lse();
  return v;
}

// ---- The ablation: one idea per variant, each against the variant it changes ------------------
// The step starts from step 05's best key block. Set to 32 if 05/bc32 measures faster than
// 05/bc64 on the target GPU (and change improves_on below).
constexpr int kBlockNFrom05 = 64;

constexpr unsigned kFeaturesSwizzle = kSwizzle;
constexpr unsigned kFeaturesSmemEpilogue = kFeaturesSwizzle | kSmemEpilogue;
constexpr unsigned kFeaturesLse = kFeaturesSmemEpilogue | kLse;
constexpr unsigned kFeaturesH200 = kFeaturesLse | kHeavyFirst;

// reverse: step 05's tiles exactly, at both head dimensions, Q Kᵀ's k16 loop fully unrolled as
// step 05 has it; the only change is the loop (and what it allows: one checked load, the mask
// in its own loop body). (With kBlockNFrom05 = 32, D = 64 keeps step 05's 3-CTA bound of 168
// registers, which the later features push into small spills: check ptxas.)
template <unsigned kFeatures>
using BaseD64 = Step05Tiles<64, kBlockNFrom05, kFeatures>;
using ReverseD128 = Step05Tiles<128, kBlockNFrom05, kQkFullUnroll>;

// d128_s32, d128_unroll2 — the price of the reverse loop at D = 128: step 05's kernel fits 255
// registers with nothing to spare, and the second (masked) copy of the loop body makes it spill
// (`reverse` is measured as it compiles; docs/06 has ptxas's figures). d128_s32 computes each
// 64-key block as two 32-key S tiles (32 fewer fp32 live), d128_unroll2 unrolls Q Kᵀ's k16 loop
// by two (fewer fragments in flight): the tile of every later D = 128 row. At D = 64 both are
// `reverse`'s kernel.
using S32D128 = Config<128, 64, 32, false, 1, kQkFullUnroll>;
template <unsigned kFeatures>
using BaseD128 = Config<128, 64, 32, false, 1, kFeatures>;

// bc128: FA2's tile at D = 64 is 128 × 128 with 4 warps. S grows to 2 × 16 × 4 = 128 fp32 per
// thread, so Q can no longer live in registers (32 + 64 + 128 > 160): it is re-read from shared
// memory at every k16 step, as FA2 does at this size. At D = 128 a 128-key S tile next to the
// 128-fp32 O cannot fit in 255 registers, and 128-key K and V blocks (160 KB per CTA) leave one
// CTA per SM: the idea is D = 64 only.
using Bc128D64 = Config<64, 128, 128, false, 1, kFeaturesLse>;

// bc128_s64 — the tile picked for the H200's register file, where registers decide how many
// warps share an SM (two CTAs at ~240 registers; three would need <= 168). The knob left is how
// often a CTA stops at a barrier: FA2's 128-key pipeline block (half the barriers), computed as
// two 64-key S tiles so that Q stays in registers. Against `lse` only the pipeline block
// changes. D = 64 only (bc128's reason).
using Bc128S64D64 = Config<64, 128, 64, true, 1, kFeaturesLse>;

// h200 — bc128_s64 plus heaviest causal CTAs first (see the kernel's grid comment), the step's
// main variant: step 04's last-to-first order, in a stronger form (the heaviest block of every
// head first). The non-causal kernel is bc128_s64's code. It is the last shared row so that the
// main variant is a kernel of its own at both head dimensions (later steps compare with it).
using H200D64 = Config<64, 128, 64, true, 1, kFeaturesH200>;
using H200D128 = BaseD128<kFeaturesH200>;

// d128_lean, d128_s64_unroll2, d128_s64 — toward FA2's D = 128 tile, ONE 64-key S tile per
// 64-key block (Q re-read once per S tile, the online softmax once per 64 keys), whose 32 more
// fp32 next to the 128-fp32 O spill without help. One change a row: d128_lean (vs h200) makes
// two register savings on h200's own tile, so that their cost is measured alone: (1) K addressed
// with the A lane map, (2) the cp.async offsets recomputed once per block (reread_tid);
// d128_s64_unroll2 (vs d128_lean) takes the 64-key S tile, which (1) and (2) fit in 255
// registers; d128_s64 (vs d128_s64_unroll2) does not unroll Q Kᵀ's k16 loop (the other CTA's
// warp hides the ldmatrix latency instead). Zero margin at 255 registers: another ptxas may
// spill a few bytes. At D = 64 all three are h200's kernel.
using LeanD128 = BaseD128<kFeaturesH200 | kLeanRegisters>;
using S64U2D128 = Config<128, 64, 64, false, 1, kFeaturesH200 | kLeanRegisters>;
using S64D128 = Config<128, 64, 64, false, 1, kFeaturesH200 | kLeanRegisters | kQkOneStep>;

// Each row names the row it changes; a row that is another's kernel at one D is left out there.
// (A comparison whose baseline is left out at a D is meant against the kernel it duplicates.)
LADDER_REGISTER_STEP(
    ladder::attention_step(6, "fa_v2_2",
                           "FlashAttention v2.2: reverse loop, swizzle, staged epilogue, LSE, FA2 tiles",
                           "05/bc64")
        .add(make_variant<BaseD64<0>, ReverseD128>("reverse", "05 + K/V blocks last to first, masked blocks in their own loop")
                 .compared_with("05/bc64"))
        .add(make_variant<BaseD64<0>, S32D128>("d128_s32", "reverse + D=128: each 64-key block as two 32-key S tiles")
                 .compared_with("06/reverse").same_kernel_at(64, "06/reverse"))
        .add(make_variant<BaseD64<0>, BaseD128<0>>("d128_unroll2", "d128_s32 + D=128: Q K^T's k16 loop unrolled by two, not fully")
                 .compared_with("06/d128_s32").same_kernel_at(64, "06/reverse"))
        .add(make_variant<BaseD64<kFeaturesSwizzle>, BaseD128<kFeaturesSwizzle>>("swizzle", "+ XOR-swizzled shared tiles instead of D+8 padding")
                 .compared_with("06/d128_unroll2"))
        .add(make_variant<BaseD64<kFeaturesSmemEpilogue>, BaseD128<kFeaturesSmemEpilogue>>("smem_epilogue", "+ O staged through shared memory, 16-byte coalesced stores")
                 .compared_with("06/swizzle"))
        .add(make_variant<BaseD64<kFeaturesLse>, BaseD128<kFeaturesLse>>("lse", "+ 1/l guard, log-sum-exp output")
                 .compared_with("06/smem_epilogue"))
        .add(make_variant<Bc128D64, BaseD128<kFeaturesLse>>("bc128", "lse + D=64: FA2's 128x128 tile (Q re-read from smem)")
                 .compared_with("06/lse").same_kernel_at(128, "06/lse"))
        .add(make_variant<Bc128S64D64, BaseD128<kFeaturesLse>>("bc128_s64", "lse + D=64: 128-key blocks as two 64-key S tiles, Q in registers")
                 .compared_with("06/lse").same_kernel_at(128, "06/lse"))
        .add(make_variant<H200D64, H200D128>("h200", "bc128_s64 + heaviest causal CTAs first (the H200 configuration)")
                 .compared_with("06/bc128_s64"))
        .add(make_variant<H200D64, LeanD128>("d128_lean", "h200 + D=128: K with the A lane map, cp.async offsets per block")
                 .compared_with("06/h200").same_kernel_at(64, "06/h200"))
        .add(make_variant<H200D64, S64U2D128>("d128_s64_unroll2", "d128_lean + D=128: one 64-key S tile per block (FA2's 128x64)")
                 .compared_with("06/d128_lean").same_kernel_at(64, "06/h200"))
        .add(make_variant<H200D64, S64D128>("d128_s64", "d128_s64_unroll2 + D=128: Q K^T's k16 loop not unrolled")
                 .compared_with("06/d128_s64_unroll2").same_kernel_at(64, "06/h200"))
        .main_is("h200"));  // the fastest measured on the H200 (docs/06_fa_v2_2.md)

}  // namespace
