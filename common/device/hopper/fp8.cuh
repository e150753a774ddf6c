// The pieces of an FP8 (e4m3) attention forward on Hopper (Part VIII), beside the fp16/bf16 ones.
//
// An 8-bit wgmma (m64nNk32: 32 keys or head dims per instruction, twice the 16-bit k16) runs at
// twice the 16-bit rate, and it changes three things the Part IV kernels took for granted:
//
//   1. Both shared-memory operands must be K-major (the reduction dimension contiguous): the
//      8-bit forms have no imm-trans. Q·Kᵀ is K-major already (Q and K rows are D bytes). P·V is
//      reduced over keys, and V is stored [keys][D]: its keys are the strided dimension. So the
//      producer transposes each V block in shared memory into Vᵀ [D][keys] (transpose_v_block).
//   2. The A operand of P·V, from registers, holds four consecutive keys per 32-bit register
//      (k = 4t .. 4t + 3 and 16 + 4t .. 16 + 4t + 3 of a k32 slice), while S's fp32 accumulator
//      gives a thread the pairs 2t, 2t + 1 of every 8 columns. Rather than shuffling P between
//      threads, each thread packs the columns it has (8j + 2t + e, four j of a slice) into the
//      A slots it owns, and the transpose writes Vᵀ's keys in the same permuted order: a sum over
//      keys does not care in which order its terms come, as long as P and V agree (permuted_key).
//   3. P is quantized to e4m3 for P·V. e4m3 keeps 3 fraction bits and its normal range starts at
//      2^-6; P = exp(s − max) ∈ [0, 1], so unscaled most of it would be subnormal or zero. The
//      softmax computes P · 2^8 instead (FlashAttention-3's offset: the row max becomes 256, below
//      e4m3's largest 448), and the row sum carries the same factor, which cancels in O / l.
//
// Tiles here are 128-byte rows of 128 one-byte elements: a D = 128 row of Q or K, a 128-key row of
// Vᵀ. Byte for byte they are the 16-bit kernels' 64-column blocks, so the 128-byte swizzle, the
// TMA boxes and the descriptors (desc_k_major, SBO = 1024) are unchanged; only the k step is 32
// elements where it was 16. At D = 64 a Q, K or V row is 64 bytes: those tiles take the 64-byte
// swizzle (desc_k_major_rows<64>: SBO = 512, swizzle field 2), Vᵀ keeps 128-byte rows of keys.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "common/device/hopper/arch.cuh"
#include "common/device/hopper/attention.cuh"
#include "common/device/hopper/barriers.cuh"
#include "common/device/hopper/mbarrier.cuh"
#include "common/device/hopper/gemm.cuh"
#include "common/device/hopper/smem.cuh"
#include "common/device/ptx.cuh"
#include "common/fp8_layout.hpp"

namespace ladder::hopper {

inline constexpr int kFp8RowBytes = fp8::kRowBytes;  // one swizzled row: 128 e4m3 elements
inline constexpr int kFp8K = fp8::kK;                // elements per k step of an 8-bit wgmma
// log2 of the factor P carries into P·V (point 3 above): P · 2^8 ∈ [0, 256] ⊂ e4m3's [0, 448].
inline constexpr int kPLog2Offset = 8;

// ---- The shared memory of the FP8 forward ------------------------------------------------------
//   q       the CTA's kBlockM query rows, [kBlockM][128] bytes, 128-byte swizzle
//   k       the K ring, [kStages][kBlockN][128]
//   v       V blocks as TMA lands them, [kStages][kBlockN][128] ([keys][D])
//   vt      the same blocks transposed by the producer, [kStages][D][kBlockN] ([D][keys], keys
//           permuted within each k32 slice: permuted_key), the B operand of P·V; a block of more
//           than 128 keys in 128-key tiles side by side (fp8_layout.hpp's vt_offset)
// No O staging: at one byte an element Q's buffer is half O's bf16 rows, and the 32 KB a staging
// buffer would take is a fourth ring stage instead (the transpose's slack, below); O goes to
// global memory from registers (store_o_rows_fp8), once a tile.
// Barriers: the ring's kv_full (K and V landed: the consumers' S and the transposers wait on it),
// vt_full (Vᵀ written: the consumers' P·V waits on it), kv_empty (the consumers are done with the
// stage's K and Vᵀ, and so the transposers with its V); Q's pair as in AttentionStorage.
template <int kHeadDim_, int kBlockM_, int kBlockN_, int kStages_>
struct Fp8AttentionStorage {
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kBlockM = kBlockM_;
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kStages = kStages_;
  static constexpr std::uint32_t kQBytes = kBlockM * kHeadDim;   // one byte an element
  static constexpr std::uint32_t kKVBytes = kBlockN * kHeadDim;  // one of K or V
  // Vᵀ: kHeadDim rows of 128 keys a tile (fp8_layout.hpp's vt_offset; == kKVBytes at 128 keys)
  static constexpr std::uint32_t kVtBytes = fp8::vt_tiles(kBlockN) * std::uint32_t(kHeadDim) * kFp8RowBytes;
  static_assert(kHeadDim == kFp8RowBytes || kHeadDim == 64, "a Q/K/V row is one swizzled row of 128 or 64 bytes");
  static_assert(kHeadDim == kFp8RowBytes || kBlockN <= kFp8RowBytes, "Vt in one tile at D = 64");
  static_assert(kBlockN % kFp8K == 0 && kBlockN <= 256, "whole k32 slices; wgmma's N is at most 256");

  alignas(kSwizzleAlign) std::uint8_t q[kQBytes];
  alignas(kSwizzleAlign) std::uint8_t k[kStages][kKVBytes];
  alignas(kSwizzleAlign) std::uint8_t v[kStages][kKVBytes];
  alignas(kSwizzleAlign) std::uint8_t vt[kStages][kVtBytes];
  std::uint64_t q_full;
  std::uint64_t q_empty;
  std::uint64_t kv_full[kStages];
  std::uint64_t kv_empty[kStages];
  std::uint64_t vt_full[kStages];  // one arrival per transposer warp
};

// The same with V's raw buffer in its own, shallower ring (step 47's three_stages): K and Vᵀ in
// kStages stages, V as TMA lands it in kVStages, and Vᵀ of the 192-key block packed (its last 64
// keys in a 64-byte-swizzled tile of 64-byte rows: fp8_layout.hpp's vt_offset_packed), so that a
// stage of K and Vᵀ is 48 KB and three of them fit beside two of V (208 KB with Q). Barriers:
// kv_full now means K landed (the consumers' S waits on it), v_full V landed (the transposers wait
// on it), v_empty the transposers are done reading V (one arrival a transposing warp; the copy
// of the next lap's V waits on it); vt_full and kv_empty as above. pipeline.cuh's load_kv_block
// takes this ring's path wherever a storage has kVStages.
template <int kHeadDim_, int kBlockM_, int kBlockN_, int kStages_, int kVStages_>
struct Fp8SplitRingStorage {
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kBlockM = kBlockM_;
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kStages = kStages_;
  static constexpr int kVStages = kVStages_;
  static constexpr std::uint32_t kQBytes = kBlockM * kHeadDim;
  static constexpr std::uint32_t kKVBytes = kBlockN * kHeadDim;
  static constexpr std::uint32_t kVtBytes = kKVBytes;  // packed: 16 KB of 128 keys + 8 KB of 64
  static_assert(kHeadDim == kFp8RowBytes && kBlockN == kFp8RowBytes + fp8::kTailKeys,
                "the packed Vt is a 128-key tile and a 64-key one, at D = 128");

  alignas(kSwizzleAlign) std::uint8_t q[kQBytes];
  alignas(kSwizzleAlign) std::uint8_t k[kStages][kKVBytes];
  alignas(kSwizzleAlign) std::uint8_t vt[kStages][kVtBytes];
  alignas(kSwizzleAlign) std::uint8_t v[kVStages][kKVBytes];
  std::uint64_t q_full;
  std::uint64_t q_empty;
  std::uint64_t kv_full[kStages];
  std::uint64_t kv_empty[kStages];
  std::uint64_t vt_full[kStages];
  std::uint64_t v_full[kVStages];
  std::uint64_t v_empty[kVStages];
};

// The key order inside a k32 slice, the swizzle and the transposes' lane maps: common/fp8_layout.hpp
// (host and device, so that the CPU tests check these very maps).
using fp8::permuted_key;
using fp8::swizzled_offset;

#if LADDER_SM90A
// K-major descriptor for tiles of `kRowBytes`-byte rows in their own swizzle: 128 (desc_k_major)
// or 64 (D = 64's Q and K: the 64-byte swizzle, whose 8-row atom is 512 bytes).
template <int kRowBytes>
__device__ __forceinline__ std::uint64_t desc_k_major_rows(std::uint32_t smem_addr) {
  static_assert(kRowBytes == 128 || kRowBytes == 64);
  if constexpr (kRowBytes == 128) return desc_k_major(smem_addr);
  else return desc_field(smem_addr) | (desc_field(16) << 16) | (desc_field(512) << 32) | (std::uint64_t(2) << 62);
}

// ---- 8-bit wgmma: m64n128k32, e4m3 × e4m3 → fp32 ------------------------------------------------
#define LADDER_WGMMA8_ACC128 \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
  "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
  "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
  "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
  "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
  "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
  "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
  "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
#define LADDER_WGMMA8_REGS128 \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, " \
  "%21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, " \
  "%40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, " \
  "%59, %60, %61, %62, %63}"

// SS: A and B K-major in shared memory (S = Q Kᵀ); accumulate = 0 overwrites D (the first k step).
// No imm-trans operands: the 8-bit forms have none (point 1 above).
__device__ __forceinline__ void wgmma_e4m3_ss(float (&d)[64], std::uint64_t a, std::uint64_t b, int accumulate) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 " LADDER_WGMMA8_REGS128
               ", %64, %65, p, 1, 1;\n}\n"
               : LADDER_WGMMA8_ACC128
               : "l"(a), "l"(b), "r"(accumulate));
}
// RS: A (P) from registers, four e4m3 per register; B (Vᵀ) K-major in shared memory; O +=.
__device__ __forceinline__ void wgmma_e4m3_rs(float (&d)[64], const std::uint32_t (&a)[4], std::uint64_t b) {
  asm volatile("wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 " LADDER_WGMMA8_REGS128
               ", {%64, %65, %66, %67}, %68, 1, 1, 1;\n"
               : LADDER_WGMMA8_ACC128
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
}
// RS with N = 64 (D = 64's P·V: O's 64 × 64 tile, 32 accumulators a thread).
__device__ __forceinline__ void wgmma_e4m3_rs(float (&d)[32], const std::uint32_t (&a)[4], std::uint64_t b) {
  asm volatile("wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 "
               "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, "
               "%21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, 1, 1, 1;\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                 "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                 "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                 "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
}
#define LADDER_WGMMA8_ACC192 \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
  "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
  "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
  "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
  "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
  "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
  "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
  "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), \
  "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), \
  "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), \
  "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), \
  "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])
#define LADDER_WGMMA8_REGS192 \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, " \
  "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, " \
  "%38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, " \
  "%56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, " \
  "%74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, " \
  "%92, %93, %94, %95}"
// SS with N = 192 (step 47's 192-key blocks): S's 64 × 192 tile, 96 accumulators a thread.
__device__ __forceinline__ void wgmma_e4m3_ss(float (&d)[96], std::uint64_t a, std::uint64_t b, int accumulate) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %98, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n192k32.f32.e4m3.e4m3 " LADDER_WGMMA8_REGS192
               ", %96, %97, p, 1, 1;\n}\n"
               : LADDER_WGMMA8_ACC192
               : "l"(a), "l"(b), "r"(accumulate));
}
#undef LADDER_WGMMA8_ACC128
#undef LADDER_WGMMA8_REGS128
#undef LADDER_WGMMA8_ACC192
#undef LADDER_WGMMA8_REGS192

// S (64 × kBlockN) = Q (64 × D) · Kᵀ: D / 32 k32 steps, 32 bytes apart in the D-byte rows; the
// accumulator's size (64 or 96 floats a thread) picks the instruction's N (128 or 192).
template <int kHeadDim = kFp8RowBytes, int kSRegs>
__device__ __forceinline__ void issue_qk_e4m3(float (&s)[kSRegs], std::uint64_t q_desc, std::uint64_t k_desc) {
  static_assert(kSRegs == 64 || kSRegs == 96, "128- or 192-key blocks");
#pragma unroll
  for (int kk = 0; kk < kHeadDim / kFp8K; ++kk)
    wgmma_e4m3_ss(s, desc_advance(q_desc, kk * kFp8K), desc_advance(k_desc, kk * kFp8K), kk > 0);
}
// O (64 × D) += P (64 × kBlockN keys) · V: B is Vᵀ's rows (head dims) of permuted keys, one k32
// slice an instruction; slices 4 and up lie in Vᵀ's next 128-key tile (fp8_layout.hpp, vt_offset).
// O's size (64 or 32 floats a thread) picks the instruction's N (D = 128 or 64).
template <int kSlices, int kORegs>
__device__ __forceinline__ void issue_pv_e4m3(float (&o)[kORegs], const std::uint32_t (&p)[kSlices][4],
                                              std::uint64_t vt_desc) {
  constexpr int kSlicesPerTile = kFp8RowBytes / kFp8K;
#pragma unroll
  for (int kk = 0; kk < kSlices; ++kk)
    wgmma_e4m3_rs(o, p[kk], desc_advance(vt_desc, (kk / kSlicesPerTile) * fp8::kVtTileBytes + (kk % kSlicesPerTile) * kFp8K));
}

// The same over a packed Vᵀ (Fp8SplitRingStorage): slices 0-3 from the 128-key tile with step 45's
// descriptor, slices 4 and 5 from the 64-key tile behind it, whose rows are 64 bytes in the 64-byte
// swizzle (desc_k_major_rows<64>, the same B operand as far as the instruction can tell).
__device__ __forceinline__ void issue_pv_e4m3_packed(float (&o)[64], const std::uint32_t (&p)[6][4],
                                                     std::uint64_t vt_desc, std::uint64_t vt_tail_desc) {
  constexpr int kSlicesPerTile = kFp8RowBytes / kFp8K;
#pragma unroll
  for (int kk = 0; kk < 6; ++kk)
    wgmma_e4m3_rs(o, p[kk], kk < kSlicesPerTile ? desc_advance(vt_desc, kk * kFp8K)
                                                 : desc_advance(vt_tail_desc, (kk - kSlicesPerTile) * kFp8K));
}

// Four floats as four e4m3 bytes, the first in the lowest byte; round to nearest even, saturated
// to ±448 (satfinite), as the A operand's register wants them. cvt's e4m3x2 puts its first source
// in the upper byte.
__device__ __forceinline__ std::uint32_t pack_e4m3x4(float b0, float b1, float b2, float b3) {
  std::uint32_t out;
  asm("{\n.reg .b16 lo, hi;\n"
      "cvt.rn.satfinite.e4m3x2.f32 lo, %2, %1;\n"
      "cvt.rn.satfinite.e4m3x2.f32 hi, %4, %3;\n"
      "mov.b32 %0, {lo, hi};\n}\n"
      : "=r"(out)
      : "f"(b0), "f"(b1), "f"(b2), "f"(b3));
  return out;
}

// P (fp32 accumulator, wgmma.cuh's layout) → the A fragments of P·V, one per k32 slice, each in
// this thread's own registers (point 2 above): register r of slice kk holds row g (r even) or
// g + 8 (r odd), slots h = r / 2, from the n8 tiles j = 4kk + 2h and 4kk + 2h + 1.
template <int kBlockN>
__device__ __forceinline__ void p_to_a_e4m3(const float (&s)[kBlockN / 2], std::uint32_t (&a)[kBlockN / 32][4]) {
#pragma unroll
  for (int kk = 0; kk < kBlockN / 32; ++kk)
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int row = r % 2;           // s[4j + 2·row + e]
      const int j = 4 * kk + 2 * (r / 2);
      a[kk][r] = pack_e4m3x4(s[4 * j + 2 * row], s[4 * j + 2 * row + 1], s[4 * (j + 1) + 2 * row],
                             s[4 * (j + 1) + 2 * row + 1]);
    }
}

// ---- The producer's transpose: V [keys][D] → Vᵀ [D][permuted keys] ------------------------------
// Two ways, the same bytes (common/fp8_layout.hpp has both lane maps and why they are free of bank
// conflicts). `worker` numbers the transposing warps (0 .. kWorkers − 1), which split a tile's
// units between them; every loop bound is the same for a warp's 32 lanes.
//
// What a transposing warp fights is latency, not bandwidth: its loads queue behind the consumers'
// wgmma operand reads of the same shared memory, and a tile must be through before the consumers
// reach its P·V. So each warp issues the loads of kBatch units before its first store, and the
// fewer, wider accesses of the matrix form are the point: 16 bytes a lane, where the word form
// moves 4.

__device__ __forceinline__ void stmatrix_x4(void* smem_row, const std::uint32_t (&r)[4]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(ptx::smem_addr(smem_row)),
               "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3])
               : "memory");
}

// The matrix form: per unit one ldmatrix.x4.trans (512 bytes), four PRMTs, one stmatrix.x4. V's
// rows are kHeadDim bytes (128, or 64 in the 64-byte swizzle).
template <int kWorkers, int kBlockN = kFp8RowBytes, int kHeadDim = kFp8RowBytes, bool kPacked = false>
__device__ __forceinline__ void transpose_v_block_matrices(const std::uint8_t* __restrict__ v,
                                                           std::uint8_t* __restrict__ vt, int worker, int lane) {
  constexpr int kBatch = 4;
  constexpr int kUnits = fp8::matrix_units(kBlockN, kHeadDim);
  constexpr int kPerWorker = (kUnits + kWorkers - 1) / kWorkers;
  const std::uint32_t select0 = fp8::prmt_selector(0, lane), select1 = fp8::prmt_selector(1, lane);
#pragma unroll 1
  for (int b0 = 0; b0 < kPerWorker; b0 += kBatch) {
    std::uint32_t in[kBatch][4];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int unit = worker + kWorkers * (b0 + u);
      if (b0 + u < kPerWorker && unit < kUnits)
        ptx::ldmatrix_x4_trans(in[u], v + fp8::matrix_load_offset(unit, lane, kHeadDim));
    }
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int unit = worker + kWorkers * (b0 + u);
      if (b0 + u >= kPerWorker || unit >= kUnits) continue;
      const std::uint32_t out[4] = {__byte_perm(in[u][0], in[u][1], select0), __byte_perm(in[u][0], in[u][1], select1),
                                    __byte_perm(in[u][2], in[u][3], select0), __byte_perm(in[u][2], in[u][3], select1)};
      stmatrix_x4(vt + fp8::matrix_store_offset(unit, lane, kHeadDim, kPacked), out);
    }
  }
}

// The word form: per unit four 32-bit loads (four keys, four head dims each), a 4 × 4 byte
// transpose in six PRMTs, four 32-bit stores (four head dims, four keys each).
template <int kWorkers>
__device__ __forceinline__ void transpose_v_block_words(const std::uint8_t* __restrict__ v,
                                                        std::uint8_t* __restrict__ vt, int worker, int lane) {
  constexpr int kBatch = 2;
  constexpr int kPerWorker = (fp8::kWordIterations + kWorkers - 1) / kWorkers;
#pragma unroll 1
  for (int b0 = 0; b0 < kPerWorker; b0 += kBatch) {
    std::uint32_t in[kBatch][4];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int it = worker + kWorkers * (b0 + u);
      if (b0 + u < kPerWorker && it < fp8::kWordIterations) {
        const fp8::WordUnit w = fp8::word_unit(it, lane);
#pragma unroll
        for (int f = 0; f < 4; ++f) in[u][f] = *reinterpret_cast<const std::uint32_t*>(v + fp8::word_load_offset(w, f));
      }
    }
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int it = worker + kWorkers * (b0 + u);
      if (b0 + u >= kPerWorker || it >= fp8::kWordIterations) continue;
      const fp8::WordUnit w = fp8::word_unit(it, lane);
      // Byte i of in[f] is V[key_f][4dg + i]; word i of out wants V[key_f][4dg + i] in byte f.
      using namespace fp8;
      const std::uint32_t x0 = __byte_perm(in[u][0], in[u][1], kWordBytesLow);
      const std::uint32_t x1 = __byte_perm(in[u][0], in[u][1], kWordBytesHigh);
      const std::uint32_t y0 = __byte_perm(in[u][2], in[u][3], kWordBytesLow);
      const std::uint32_t y1 = __byte_perm(in[u][2], in[u][3], kWordBytesHigh);
      const std::uint32_t out[4] = {__byte_perm(x0, y0, kWordHalvesLow), __byte_perm(x0, y0, kWordHalvesHigh),
                                    __byte_perm(x1, y1, kWordHalvesLow), __byte_perm(x1, y1, kWordHalvesHigh)};
#pragma unroll
      for (int i = 0; i < 4; ++i) *reinterpret_cast<std::uint32_t*>(vt + fp8::word_store_offset(w, i)) = out[i];
    }
  }
}

// The epilogue: O / l in bf16 straight from the accumulator to the tile's rows below n (4 bytes a
// lane, a quad's 16 contiguous bytes a row), then, once the whole warpgroup is past its last
// product (the barrier), one thread releases the Q buffer.
template <int kHeadDim, class Storage>
__device__ __forceinline__ void store_o_rows_fp8(Storage& st, float (&acc_o)[kHeadDim / 2], const float (&row_sum)[2],
                                                 __nv_bfloat16* o_head, int row0, int n, int t, int consumer,
                                                 bool release_thread) {
  finalize_rows<kHeadDim>(acc_o, row_sum);
  store_o_rows<kHeadDim>(acc_o, o_head, row0, n, t);
  named_barrier_sync<128>(epilogue_barrier(consumer));
  if (release_thread) mbarrier_arrive(&st.q_empty);
}
#endif  // LADDER_SM90A

}  // namespace ladder::hopper
