// Warpgroup MMA (wgmma, sm_90a): the tensor-core instruction of Hopper.
//
// A warpgroup is four consecutive warps (128 threads, the first warp index a multiple of 4). One
// wgmma.m64nNk16 multiplies a 64×16 A by a 16×N B into a 64×N fp32 accumulator that lives in the
// warpgroup's registers, N/2 floats per thread. mma.sync (steps 05-06) is a warp multiplying
// 16×16 by 16×8 with every operand in registers; wgmma is 8 to 32 times larger per instruction,
// reads B (and optionally A) straight from shared memory, and is asynchronous: the warpgroup
// issues it, may do other work, and waits for it later. That is what lets Hopper's tensor cores
// run near their peak; mma.sync tops out near two thirds of it.
//
// Register layout of the accumulator (PTX ISA, "wgmma .m64nNk16 register fragment"): warp w of
// the warpgroup owns rows 16w..16w+15; lane = 4g + t holds, for every n8 column tile j,
//   d[4j + 0], d[4j + 1] = row 16w + g,     columns 8j + 2t, 8j + 2t + 1
//   d[4j + 2], d[4j + 3] = row 16w + g + 8, the same columns
// — exactly mma.sync's C fragment, repeated N/8 times. A from registers (the "RS" form) uses
// mma.sync's A fragment: {row g, cols 2t..}, {row g+8, cols 2t..}, {row g, cols 2t+8..},
// {row g+8, cols 2t+8..}, so an S accumulator converts to the A operand of P·V in place (FA2's
// trick, unchanged).
//
// Operands in shared memory are described by a 64-bit descriptor (below), not a pointer.
//
// The asynchronous protocol, per warpgroup:
//   fence()            before the first wgmma that reads registers written by ordinary
//                      instructions (the accumulator after a rescale, the A fragment of P)
//   wgmma ...          any number, accumulating in issue order
//   commit()           close a group of wgmma
//   wait<N>()          until at most N groups are in flight; only then may the thread touch the
//                      accumulator or the A registers of those groups, or let shared memory they
//                      read be overwritten
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "common/device/hopper/arch.cuh"
#include "common/device/ptx.cuh"

namespace ladder::hopper {

// ---- Shared-memory matrix descriptors (PTX ISA, "Matrix Descriptor Format") ----------------
//   bits  0-13  start address >> 4
//   bits 16-29  leading-dimension byte offset (LBO) >> 4
//   bits 32-45  stride-dimension byte offset (SBO) >> 4
//   bits 62-63  swizzle: 1 = 128-byte
// Every tile in Part IV is stored in the 128-byte swizzle: rows of 64 halves (128 bytes), the
// 16-byte chunk c of row r stored at chunk c ^ (r % 8), so eight consecutive rows form a
// 1024-byte "swizzle atom" whose base must be 1024-byte aligned. A tile with D = 128 columns is
// two such column blocks, [D/64][rows][64]. This is the layout TMA writes with
// CU_TENSOR_MAP_SWIZZLE_128B, and step 16 writes it by hand with cp.async.
__device__ __forceinline__ std::uint64_t desc_field(std::uint32_t bytes) {
  return (bytes & 0x3FFFF) >> 4;
}

// K-major operand (the reduction dimension contiguous): Q and K in S = Q Kᵀ, reduced over D.
// SBO = 1024: from one 8-row group to the next. LBO is unused in a swizzled K-major layout
// (the PTX ISA says "assumed 1"). The k16 step kk of a 64-column block starts 32·kk bytes into
// the row: the hardware applies the swizzle to the final address, so a plain byte offset works.
__device__ __forceinline__ std::uint64_t desc_k_major(std::uint32_t smem_addr) {
  return desc_field(smem_addr) | (desc_field(16) << 16) | (desc_field(1024) << 32) |
         (std::uint64_t(1) << 62);
}

// MN-major operand (the output dimension contiguous): V in O = P V, where the reduction runs over
// keys (V's rows) and N over head dims (V's contiguous columns); wgmma reads it transposed
// (imm-trans-b = 1, allowed for 16-bit types). In the canonical 128-byte-swizzle MN-major layout
// ((8,8,m),(8,k)) : ((1,8,LBO),(64,SBO)) in halves, SBO steps along the reduction dimension from
// one 8-row (8-key) group to the next: 1024 bytes. LBO steps along N from one 64-column block to
// the next: `column_block_bytes` (rows × 128), used when D = 128.
__device__ __forceinline__ std::uint64_t desc_mn_major(std::uint32_t smem_addr,
                                                       std::uint32_t column_block_bytes) {
  return desc_field(smem_addr) | (desc_field(column_block_bytes) << 16) |
         (desc_field(1024) << 32) | (std::uint64_t(1) << 62);
}

// The element types of Part IV's kernels: fp16 (__half) or bf16 (__nv_bfloat16).
template <class Element>
inline constexpr bool kIsBf16 = std::is_same_v<Element, __nv_bfloat16>;
static_assert(sizeof(__half) == 2 && sizeof(__nv_bfloat16) == 2);

// Two floats rounded to the element type and packed into one 32-bit register (lo in the low half).
template <class Element>
__device__ __forceinline__ std::uint32_t pack2(float lo, float hi) {
  if constexpr (kIsBf16<Element>) {
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<std::uint32_t*>(&h);
  } else {
    return ptx::pack_half2(lo, hi);
  }
}

#if LADDER_SM90A
__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int kInFlight>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kInFlight) : "memory");
}

// A wgmma reads its accumulator registers asynchronously, but the compiler only sees the asm's
// operands at the issue point. Until the matching wait, the registers must stay where they are:
// this empty asm "reads and writes" them after the wait so no instruction that uses them can be
// moved above it. (CUTLASS calls this warpgroup_fence_operand.)
template <int kRegs>
__device__ __forceinline__ void fence_registers(float (&d)[kRegs]) {
#pragma unroll
  for (int i = 0; i < kRegs; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// The same for the A registers of an RS wgmma (P, dS): the instruction reads them after its issue,
// so they must stay live, unmodified, until the wait that retires it.
template <int kRegs>
__device__ __forceinline__ void fence_registers(std::uint32_t (&a)[kRegs]) {
#pragma unroll
  for (int i = 0; i < kRegs; ++i) asm volatile("" : "+r"(a[i])::"memory");
}
template <int kRows, int kRegs>
__device__ __forceinline__ void fence_registers(std::uint32_t (&a)[kRows][kRegs]) {
#pragma unroll
  for (int r = 0; r < kRows; ++r) fence_registers(a[r]);
}

// ptxas, not the source, decides where a `wgmma.wait_group` lands in the SASS, and it places it as
// early as it may: the arithmetic written between a wait 1 and a wait 0 (the softmax that should
// run under the product still in flight) is free to move below the WARPGROUP.DEPBAR, and with an
// RS product in flight it does (chapter 31 shows the SASS). ptxas keeps shared-memory stores in
// order with the wait, so a store that consumes values pins everything those values depend on
// above it. This one never executes (no lane id exceeds 31, which ptxas cannot fold) and writes
// nowhere; it costs three instructions. Call it just before the wait with the values whose
// computation must finish first (the row sums: every exponential of the block feeds them).
__device__ __forceinline__ void keep_above_wait(float a, float b) {
  asm volatile(
      "{\n.reg .pred never;\n.reg .u32 lane;\nmov.u32 lane, %%laneid;\n"
      "setp.gt.u32 never, lane, 31;\n@never st.shared.v2.f32 [%0], {%1, %2};\n}\n" ::"r"(0u),
      "f"(a), "f"(b)
      : "memory");
}

// D (64 × N, fp32) += A · B for a k16 slice, in two forms:
//   ss(d, a_desc, b_desc, accumulate)  A and B in shared memory, both K-major (S = Q Kᵀ);
//                                      accumulate = 0 overwrites D (the first k16 step)
//   rs(d, a_regs, b_desc)              A from registers (P), B MN-major in shared memory (V),
//                                      always accumulating (O +=)
//   ss_transposed<kTransA, kTransB>(d, a_desc, b_desc, accumulate)
//                                      ss with either operand MN-major (imm-trans-a/b = 1, 16-bit
//                                      types only): A = dS stored as dSᵀ (queries contiguous) in
//                                      dQ = dS K, B = K stored [keys][D] (desc_mn_major)
// Element is __half (the instruction's .f16 inputs) or __nv_bfloat16 (.bf16): the two forms are
// the same instruction with another type suffix, and the A registers hold two elements of that
// type each (pack2 above). The accumulator list is N/2 registers long; the operand lists were
// written by a short script.
template <int N, class Element = __half>
struct Wgmma;

#define LADDER_WGMMA_ACC64 \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
  "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
  "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
  "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define LADDER_WGMMA_SS64(TYPE) \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n" \
               "wgmma.mma_async.sync.aligned.m64n64k16.f32." TYPE "." TYPE " " \
               "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}\n" \
               : LADDER_WGMMA_ACC64 \
               : "l"(a), "l"(b), "r"(accumulate))
#define LADDER_WGMMA_RS64(TYPE) \
  asm volatile("wgmma.mma_async.sync.aligned.m64n64k16.f32." TYPE "." TYPE " " \
               "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, 1, 1, 1, 1;\n" \
               : LADDER_WGMMA_ACC64 \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b))

#define LADDER_WGMMA_SST64(TYPE) \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n" \
               "wgmma.mma_async.sync.aligned.m64n64k16.f32." TYPE "." TYPE " " \
               "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, %35, %36;\n}\n" \
               : LADDER_WGMMA_ACC64 \
               : "l"(a), "l"(b), "r"(accumulate), "n"(int(kTransA)), "n"(int(kTransB)))

template <class Element>
struct Wgmma<64, Element> {
  __device__ static void ss(float (&d)[32], std::uint64_t a, std::uint64_t b, int accumulate) {
    if constexpr (kIsBf16<Element>) LADDER_WGMMA_SS64("bf16");
    else LADDER_WGMMA_SS64("f16");
  }
  template <bool kTransA, bool kTransB>
  __device__ static void ss_transposed(float (&d)[32], std::uint64_t a, std::uint64_t b, int accumulate) {
    if constexpr (kIsBf16<Element>) LADDER_WGMMA_SST64("bf16");
    else LADDER_WGMMA_SST64("f16");
  }
  __device__ static void rs(float (&d)[32], const std::uint32_t (&a)[4], std::uint64_t b) {
    if constexpr (kIsBf16<Element>) LADDER_WGMMA_RS64("bf16");
    else LADDER_WGMMA_RS64("f16");
  }
};
#undef LADDER_WGMMA_ACC64
#undef LADDER_WGMMA_SS64
#undef LADDER_WGMMA_SST64
#undef LADDER_WGMMA_RS64

#define LADDER_WGMMA_ACC128 \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
  "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
  "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
  "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
  "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
  "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
  "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
  "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
#define LADDER_WGMMA_SS128(TYPE) \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n" \
               "wgmma.mma_async.sync.aligned.m64n128k16.f32." TYPE "." TYPE " " \
               "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 0;\n}\n" \
               : LADDER_WGMMA_ACC128 \
               : "l"(a), "l"(b), "r"(accumulate))
#define LADDER_WGMMA_RS128(TYPE) \
  asm volatile("wgmma.mma_async.sync.aligned.m64n128k16.f32." TYPE "." TYPE " " \
               "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, 1, 1, 1, 1;\n" \
               : LADDER_WGMMA_ACC128 \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b))

#define LADDER_WGMMA_SST128(TYPE) \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n" \
               "wgmma.mma_async.sync.aligned.m64n128k16.f32." TYPE "." TYPE " " \
               "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, %67, %68;\n}\n" \
               : LADDER_WGMMA_ACC128 \
               : "l"(a), "l"(b), "r"(accumulate), "n"(int(kTransA)), "n"(int(kTransB)))

template <class Element>
struct Wgmma<128, Element> {
  __device__ static void ss(float (&d)[64], std::uint64_t a, std::uint64_t b, int accumulate) {
    if constexpr (kIsBf16<Element>) LADDER_WGMMA_SS128("bf16");
    else LADDER_WGMMA_SS128("f16");
  }
  template <bool kTransA, bool kTransB>
  __device__ static void ss_transposed(float (&d)[64], std::uint64_t a, std::uint64_t b, int accumulate) {
    if constexpr (kIsBf16<Element>) LADDER_WGMMA_SST128("bf16");
    else LADDER_WGMMA_SST128("f16");
  }
  __device__ static void rs(float (&d)[64], const std::uint32_t (&a)[4], std::uint64_t b) {
    if constexpr (kIsBf16<Element>) LADDER_WGMMA_RS128("bf16");
    else LADDER_WGMMA_RS128("f16");
  }
};
#undef LADDER_WGMMA_ACC128
#undef LADDER_WGMMA_SS128
#undef LADDER_WGMMA_SST128
#undef LADDER_WGMMA_RS128

#endif  // LADDER_SM90A

}  // namespace ladder::hopper
