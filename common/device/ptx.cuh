// Thin wrappers over the PTX instructions the tensor-core steps use. Each wrapper is one
// instruction; the comment says what the hardware does with the operands, because that is what
// the kernels' index arithmetic must match.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

namespace ladder::ptx {

// A generic pointer into shared memory as the 32-bit shared-window address PTX expects.
__device__ __forceinline__ std::uint32_t smem_addr(const void* p) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}

// threadIdx.x, read again: a value the compiler cannot merge with the kernel's first read (a
// volatile asm is never merged or hoisted out of a loop). A kernel recomputes lane offsets from it
// where keeping them live through a long loop would cost registers it can only find by spilling
// (step 06's d128_lean, with its cp.async offsets; step 24, with dQ's).
__device__ __forceinline__ int reread_tid() {
  int tid;
  asm volatile("mov.u32 %0, %%tid.x;" : "=r"(tid));
  return tid;
}

// ---- cp.async (sm_80+): global -> shared without passing through registers ------------------
// 16 bytes per call. `src_bytes` < 16 zero-fills the rest: the kernels pass 0 for rows past the
// end of the sequence so a ragged tile reads no memory it does not own and sees zeros there.
__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem, int src_bytes = 16) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(smem)),
               "l"(gmem), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
// Wait until at most `kPending` committed groups are still in flight.
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

// ---- ldmatrix (sm_75+): four 8x8 b16 tiles from shared memory into mma fragments ------------
// Lanes 8i..8i+7 give the row addresses of tile i (16 bytes each); every lane receives one b32
// (two halves) of each tile, in the layout mma.m16n8k16 expects for A and for B (".col").
__device__ __forceinline__ void ldmatrix_x4(std::uint32_t (&r)[4], const void* smem_row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(smem_row)));
}
// The same, transposed: a row-major [k][n] tile arrives as the column-major B operand.
__device__ __forceinline__ void ldmatrix_x4_trans(std::uint32_t (&r)[4], const void* smem_row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(smem_row)));
}

// ---- mma.sync m16n8k16, fp16 inputs, fp32 accumulate (sm_80+) -------------------------------
// D = A·B + D for a 16x16 A (row-major, 4 b32 per lane), a 16x8 B (column-major, 2 b32 per lane)
// and a 16x8 fp32 accumulator (4 floats per lane: rows lane/4 and lane/4+8, columns
// 2·(lane%4) and 2·(lane%4)+1).
__device__ __forceinline__ void mma_m16n8k16_f32(float (&d)[4], const std::uint32_t (&a)[4],
                                                 const std::uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// Two floats to a half2 packed in a b32 register (lo in the low 16 bits), the A-operand format.
__device__ __forceinline__ std::uint32_t pack_half2(float lo, float hi) {
  __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<std::uint32_t*>(&h);
}

// 2^x on the special-function unit (one MUFU.EX2). The kernels fold log2(e) into the softmax
// scale so that exp(x·scale − m) becomes one FFMA and one ex2.
__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// The global nanosecond timer: for bounded waits that report a stall instead of hanging (the labs).
__device__ __forceinline__ std::uint64_t globaltimer_ns() {
  std::uint64_t t = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

}  // namespace ladder::ptx
