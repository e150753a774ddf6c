// The backward's arithmetic on wgmma fragments (step 25), as attention.cuh is the forward's: the
// accumulators are transposed, Sᵀ and dPᵀ with the block's keys on the rows and its queries on
// the columns (wgmma.cuh's layout: a thread holds key rows r and r + 8, and for each n8 column
// tile j the pairs s[4j + 0..1] (row r) and s[4j + 2..3] (row r + 8) at queries 8j + 2t, +1).
// So a query's lse and D are a column's, one float2 per n8 tile for each thread; and the dQ
// product, the one that needs queries on the rows, reads dSᵀ back from shared memory transposed.
// It includes the Part IV pieces a backward kernel is built from, so that one include brings them.
#pragma once

#include <cmath>
#include <cstdint>

#include "common/device/hopper/arch.cuh"
#include "common/device/hopper/attention.cuh"
#include "common/device/hopper/barriers.cuh"
#include "common/device/hopper/gemm.cuh"
#include "common/device/hopper/mbarrier.cuh"
#include "common/device/hopper/pipeline.cuh"
#include "common/device/hopper/smem.cuh"
#include "common/device/hopper/tma.cuh"
#include "common/device/hopper/wgmma.cuh"
#include "common/device/ptx.cuh"

namespace ladder::hopper {

// Keys a query does not see become −inf before the exponential: keys past N and, causal, keys
// after the query. Called only on blocks that can need it.
template <int kCols, bool kCausal>
__device__ __forceinline__ void mask_keys(float (&s)[kCols / 2], int key0, int q_start, int n, int t) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int key = key0 + 8 * h;
#pragma unroll
    for (int j = 0; j < kCols / 8; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int q = q_start + 8 * j + 2 * t + e;
        if (key >= n || (kCausal && q < key)) s[4 * j + 2 * h + e] = -INFINITY;
      }
  }
}

// Pᵀ = exp2(Sᵀ·scale·log2e − lse·log2e), in place: `lse` holds lse·log2(e) of the block's queries.
// P is final as computed (lse already holds the row's sum): no max, no rescale.
template <int kCols>
__device__ __forceinline__ void p_from_lse(float (&s)[kCols / 2], const float* lse, float scale_log2, int t) {
#pragma unroll
  for (int j = 0; j < kCols / 8; ++j) {
    const float2 l = *reinterpret_cast<const float2*>(lse + 8 * j + 2 * t);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      s[4 * j + 2 * h] = ptx::exp2_approx(fmaf(s[4 * j + 2 * h], scale_log2, -l.x));
      s[4 * j + 2 * h + 1] = ptx::exp2_approx(fmaf(s[4 * j + 2 * h + 1], scale_log2, -l.y));
    }
  }
}

// dSᵀ = Pᵀ ∘ (dPᵀ − D), in place over dPᵀ: `d` holds D of the block's queries.
template <int kCols>
__device__ __forceinline__ void ds_from_dp(float (&dp)[kCols / 2], const float (&p)[kCols / 2], const float* d,
                                           int t) {
#pragma unroll
  for (int j = 0; j < kCols / 8; ++j) {
    const float2 dd = *reinterpret_cast<const float2*>(d + 8 * j + 2 * t);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      dp[4 * j + 2 * h] = p[4 * j + 2 * h] * (dp[4 * j + 2 * h] - dd.x);
      dp[4 * j + 2 * h + 1] = p[4 * j + 2 * h + 1] * (dp[4 * j + 2 * h + 1] - dd.y);
    }
  }
}

// A fragments (p_to_a's layout: a[kk][r] holds n8 tile j = 2kk + r/2 of row half h = r%2) written
// to a [kCols/64][kTileRows][64] tile in the 128-byte swizzle, 4 bytes per store. Conflict-free as
// stage_o_rows: a warp's 8 rows hit 8 different 16-byte chunks.
template <int kCols, int kTileRows, class Element>
__device__ __forceinline__ void stage_a_rows(const std::uint32_t (&a)[kCols / 16][4], Element* tile,
                                             int row0, int t) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = row0 + 8 * h;
#pragma unroll
    for (int j = 0; j < kCols / 8; ++j) {
      Element* dst = tile + (j / 8) * kTileRows * 64 + row * 64 + (((j % 8) ^ (row % 8)) * 8) + 2 * t;
      *reinterpret_cast<std::uint32_t*>(dst) = a[j / 2][2 * (j % 2) + h];
    }
  }
}

#if LADDER_SM90A
// stmatrix (sm_90): the inverse of ldmatrix.x4, four 8x8 b16 tiles from registers to shared memory.
// Lanes 8i..8i+7 give the row addresses of tile i; every lane hands in one b32 of each tile in the
// accumulator's layout (lane l: row l / 4, columns 2(l % 4), +1).
__device__ __forceinline__ void stmatrix_x4(std::uint32_t smem_row, const std::uint32_t (&r)[4]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(smem_row), "r"(r[0]),
               "r"(r[1]), "r"(r[2]), "r"(r[3])
               : "memory");
}

// stage_a_rows by stmatrix (step 36 on): one instruction per k16 slice stores a warp's 16 rows ×
// 16 columns, where stage_a_rows spends eight 4-byte stores. The A registers of slice kk are four
// 8x8 tiles in stmatrix's order: a[kk][0] rows 0-7 × columns 0-7 of the slice, [1] rows 8-15 ×
// 0-7, [2] rows 0-7 × 8-15, [3] rows 8-15 × 8-15. Lane l addresses row l % 8 of tile l / 8. A
// tile's 8 rows land in 8 different 16-byte chunks of the swizzle: conflict-free. `tile` is the
// [kCols/64][kTileRows][64] tile's shared address, `row0` the warp's first row.
template <int kCols, int kTileRows, class Element>
__device__ __forceinline__ void stage_a_rows_stmatrix(const std::uint32_t (&a)[kCols / 16][4], std::uint32_t tile,
                                                      int row0, int lane) {
  const int row = row0 + ((lane / 8) % 2) * 8 + lane % 8;
  const int half = lane / 16;  // columns 0-7 or 8-15 of the slice
  const std::uint32_t row_addr = tile + row * kSwizzleRowBytes;
#pragma unroll
  for (int kk = 0; kk < kCols / 16; ++kk) {
    const int chunk = (2 * kk + half) % 8;  // 16-byte chunk of the 64-column block, before the swizzle
    const std::uint32_t block = (kk / 4) * kTileRows * kSwizzleRowBytes;
    stmatrix_x4(row_addr + block + ((chunk ^ (row % 8)) * 16), a[kk]);
  }
}

// issue_ds_k on descriptors (step 36 on): a_desc, b_desc = desc_mn_major of the dSᵀ column block
// and of K's column block; the k16 steps (16 keys = 16 rows) are constant offsets from them.
template <int kBlockN, class Element, int kDqRegs>
__device__ __forceinline__ void issue_ds_k_desc(float (&dq)[kDqRegs], std::uint64_t a_desc, std::uint64_t b_desc) {
#pragma unroll
  for (int kk = 0; kk < kBlockN / 16; ++kk) {
    const std::uint32_t key_rows = kk * 16 * kSwizzleRowBytes;
    Wgmma<2 * kDqRegs, Element>::template ss_transposed<true, true>(dq, desc_advance(a_desc, key_rows),
                                                                     desc_advance(b_desc, key_rows), kk > 0);
  }
}

// The start of a backward CTA: its tensor maps prefetched, and the barriers of its Storage
// initialised: kv_full and each stage's full complete on one arrival (the producer's
// expect_tx), each stage's empty on `empty_arrivals`. One thread calls this; a __syncthreads must
// follow.
template <int kStages, class Storage, class... Maps>
__device__ __forceinline__ void init_backward_cta(Storage& st, int empty_arrivals, const Maps*... maps) {
  (tma_prefetch_map(maps), ...);
  mbarrier_init(&st.kv_full, 1);
  for (int s = 0; s < kStages; ++s) {
    mbarrier_init(&st.full[s], 1);
    mbarrier_init(&st.empty[s], empty_arrivals);
  }
  mbarrier_init_fence();
}

// Producer: the ring's position-th stage, query block rows [q_row, q_row + kBlockM) of head bh:
// Q and dO (TMA tiles) and their lse·log2(e) and D (bulk copies of the padded row buffers, from
// the head's lse_head and d_head). Waits until the consumers have released the stage's previous
// lap, announces all four copies' bytes and issues them, as pipeline.cuh's load_kv_block.
// load_query_stage_at takes the block's statistics directly (a varlen batch's padded rows are not
// its token rows: step 38); load_query_stage takes them at q_row of the head's buffers.
template <std::uint32_t kQBytes, std::uint32_t kRowBytes, int kStages, class Storage>
__device__ __forceinline__ void load_query_stage_at(Storage& st, int position, const CUtensorMap* tm_q,
                                                    const CUtensorMap* tm_do, int q_row, int head,
                                                    const float* lse_rows, const float* d_rows) {
  const int stage = ring_stage<kStages>(position);
  mbarrier_wait(&st.empty[stage], ring_parity<kStages>(position) ^ 1);
  mbarrier_arrive_expect_tx(&st.full[stage], 2 * kQBytes + 2 * kRowBytes);
  tma_load_tile(st.q[stage], tm_q, &st.full[stage], q_row, head);
  tma_load_tile(st.d_o[stage], tm_do, &st.full[stage], q_row, head);
  bulk_load(st.lse[stage], lse_rows, kRowBytes, &st.full[stage]);
  bulk_load(st.d[stage], d_rows, kRowBytes, &st.full[stage]);
}

template <std::uint32_t kQBytes, std::uint32_t kRowBytes, int kStages, class Storage>
__device__ __forceinline__ void load_query_stage(Storage& st, int position, const CUtensorMap* tm_q,
                                                 const CUtensorMap* tm_do, int q_row, int bh, const float* lse_head,
                                                 const float* d_head) {
  load_query_stage_at<kQBytes, kRowBytes, kStages>(st, position, tm_q, tm_do, q_row, bh, lse_head + q_row,
                                                   d_head + q_row);
}

// dQ (64 queries × kChunk) = dS K over the kBlockN keys of the block, SS with both operands
// MN-major (imm-trans-a/b), issued and not waited for. A: a 64-query column block of the staged
// dSᵀ (queries contiguous, keys down the rows), read transposed; B: a 64-column block of K
// ([keys][64], D contiguous), read transposed as V is in P·V.
template <int kBlockN, class Element, int kDqRegs>
__device__ __forceinline__ void issue_ds_k(float (&dq)[kDqRegs], std::uint32_t a_base, std::uint32_t b_base) {
#pragma unroll
  for (int kk = 0; kk < kBlockN / 16; ++kk) {
    const std::uint32_t key_rows = kk * 16 * kSwizzleRowBytes;
    Wgmma<2 * kDqRegs, Element>::template ss_transposed<true, true>(
        dq, desc_mn_major(a_base + key_rows, kBlockN * kSwizzleRowBytes),
        desc_mn_major(b_base + key_rows, kBlockN * kSwizzleRowBytes), kk > 0);
  }
}

// A warp's 16 rows of a finished dQ product into shared memory: 8 conflict-free 16-byte stores a
// lane into `stage` (16 × 64 floats, in the fragment order of bwd::DqFragments).
template <int kDqRegs>
__device__ __forceinline__ void stage_dq_rows(const float (&dq)[kDqRegs], float* stage, int lane) {
#pragma unroll
  for (int j = 0; j < kDqRegs / 4; ++j)
    *reinterpret_cast<float4*>(stage + (j * 32 + lane) * 4) =
        make_float4(dq[4 * j], dq[4 * j + 1], dq[4 * j + 2], dq[4 * j + 3]);
}
// The same rows into the fp32 accumulator: staged, then one bulk reduce-add by lane 0 (a float
// add per element in the L2: the CTAs of the head's other key blocks add into the same rows), no
// per-element atomics. The buffer's previous reduce, issued by lane 0, must have read it first.
// `dst_of()` gives the rows' place in the accumulator; only lane 0 computes it.
template <int kDqRegs, class DstOf>
__device__ __forceinline__ void reduce_add_dq_rows(const float (&dq)[kDqRegs], float* stage, int lane,
                                                   DstOf&& dst_of) {
  if (lane == 0) tma_store_wait_read();
  __syncwarp();
  stage_dq_rows(dq, stage, lane);
  fence_proxy_async_smem();  // the bulk reduce reads what the stores wrote
  __syncwarp();
  if (lane == 0) {
    bulk_reduce_add_f32(dst_of(), stage, 16 * 2 * kDqRegs * sizeof(float));
    tma_store_commit();
  }
}
#endif  // LADDER_SM90A

}  // namespace ladder::hopper
