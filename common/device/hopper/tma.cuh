// The Tensor Memory Accelerator (TMA): Hopper's bulk tensor copy engine.
//
// One thread hands the engine a tensor map (a 128-byte description of a global tensor: base,
// sizes, strides, the box to copy, the shared-memory swizzle) and the box's coordinates; the
// engine copies the whole box into shared memory and signals an mbarrier with the bytes it wrote
// (complete_tx). No thread computes an address, no register holds the data, and coordinates past
// the tensor's end are zero-filled — so a ragged last tile needs no code at all.
//
// Attention tensors are [B·H][N][D] fp16 or bf16 (2 bytes an element). Part IV describes each as a 4-D tensor
//   dim 0: 64 columns (128 bytes, the 128-byte swizzle's width)   stride 2 bytes
//   dim 1: N rows                                                  stride D·2 bytes
//   dim 2: D / 64 column blocks                                    stride 128 bytes
//   dim 3: B·H heads                                               stride N·D·2 bytes
// and a box of {64, rows, D/64, 1}: one copy brings a whole [D/64][rows][64] tile, the layout
// wgmma's descriptors expect (wgmma.cuh). The head is its own dimension so that rows past N are
// zero-filled instead of being read from the next head.
//
// Tensor maps are encoded on the host by the driver function cuTensorMapEncodeTiled, reached
// through the runtime's cudaGetDriverEntryPointByVersion (no -lcuda link), and passed to the
// kernel by value as `const __grid_constant__ CUtensorMap` parameters: the kernel takes the
// parameter's address, which the copy engine reads from the constant bank.
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include <cstdint>
#include <stdexcept>
#include <type_traits>
#include <string>

#include "common/device/hopper/arch.cuh"
#include "common/device/ptx.cuh"

namespace ladder::hopper {

// ---- Host: the driver's cuTensorMapEncodeTiled, looked up once (throws where the driver lacks it) ---
inline PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault,
                                         &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess || fn == nullptr)
      throw std::runtime_error("the CUDA driver does not provide cuTensorMapEncodeTiled");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  return encode;
}

// ---- Host: encode the map of one [B·H][N][D] tensor with a box of `box_rows` rows --------------
// `box_column_blocks` is the number of 128-byte column blocks (D/64 at 16 bits, D/128 for Part
// VIII's one-byte e4m3) — a whole row of each box row — unless a kernel copies one column block at
// a time (step 20's store of a warpgroup's rows). A column block is the swizzle's 128 bytes: 64
// fp16/bf16 elements or 128 e4m3 ones; e4m3 rows of D = 64 are one 64-byte block, 64-byte swizzle.
template <class Element>
CUtensorMap make_attention_tensor_map(const Element* base, int bh, int n, int head_dim,
                                      int box_rows, int box_column_blocks = 0) {
  static_assert(std::is_same_v<Element, __half> || std::is_same_v<Element, __nv_bfloat16> ||
                std::is_same_v<Element, std::uint8_t>);
  // The engine copies bytes; the type only matters to its out-of-bounds fill and to tools.
  constexpr CUtensorMapDataType kType = std::is_same_v<Element, __half>          ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                        : std::is_same_v<Element, __nv_bfloat16> ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                                                                 : CU_TENSOR_MAP_DATA_TYPE_UINT8;
  // Elements of one column block: 128 bytes in the 128-byte swizzle; e4m3 rows of D = 64 are one
  // 64-byte block in the 64-byte swizzle (Part VIII's D = 64, fp8_layout.hpp).
  constexpr bool kBytes = std::is_same_v<Element, std::uint8_t>;
  const int block_columns = (kBytes && head_dim == 64) ? 64 : 128 / int(sizeof(Element));
  const cuuint64_t block_bytes = cuuint64_t(block_columns) * sizeof(Element);
  const CUtensorMapSwizzle swizzle = block_bytes == 64 ? CU_TENSOR_MAP_SWIZZLE_64B : CU_TENSOR_MAP_SWIZZLE_128B;
  const PFN_cuTensorMapEncodeTiled_v12000 encode = tensor_map_encoder();
  if (head_dim % block_columns != 0)
    throw std::invalid_argument("TMA tiles need D to be a multiple of " + std::to_string(block_columns));
  const cuuint64_t row_bytes = cuuint64_t(head_dim) * sizeof(Element);
  const cuuint64_t sizes[4] = {cuuint64_t(block_columns), cuuint64_t(n), cuuint64_t(head_dim / block_columns),
                               cuuint64_t(bh)};
  // Strides of dims 1..3 in bytes (dim 0 is contiguous); each a multiple of 16.
  const cuuint64_t strides[3] = {row_bytes, block_bytes, row_bytes * cuuint64_t(n)};
  const cuuint32_t box[4] = {cuuint32_t(block_columns), cuuint32_t(box_rows),
                             cuuint32_t(box_column_blocks > 0 ? box_column_blocks : head_dim / block_columns), 1};
  const cuuint32_t element_strides[4] = {1, 1, 1, 1};
  CUtensorMap map{};
  const CUresult r = encode(&map, kType, 4, const_cast<Element*>(base),
                            sizes, strides, box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                            swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    throw std::runtime_error("cuTensorMapEncodeTiled failed with CUresult " + std::to_string(int(r)));
  return map;
}

// ---- Host: the same for a packed variable-length tensor [tokens][H][D] (Part VI's varlen layout) --
// The token is the row dimension and the head the outer one, with strides H·D·2 and D·2 bytes: a
// tensor map's strides need only be multiples of 16 below 2^40, in any order, so the box
// {64, box_rows, D/64, 1} at (0, token, 0, head) is still one head's [D/64][rows][64] tile. Rows
// past the last token are zero-filled (loads) or dropped (stores); rows of the next sequence are
// not: they are real data, which the kernel masks (keys) or does not store (queries).
template <class Element>
CUtensorMap make_varlen_tensor_map(const Element* base, std::int64_t tokens, int heads, int head_dim,
                                   int box_rows, int box_column_blocks = 0) {
  static_assert(std::is_same_v<Element, __half> || std::is_same_v<Element, __nv_bfloat16>);
  constexpr CUtensorMapDataType kType = std::is_same_v<Element, __half>
                                            ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                            : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  const PFN_cuTensorMapEncodeTiled_v12000 encode = tensor_map_encoder();
  if (head_dim % 64 != 0) throw std::invalid_argument("TMA tiles need D to be a multiple of 64");
  if (tokens < 1 || tokens > (std::int64_t(1) << 32))
    throw std::invalid_argument("a varlen tensor map takes 1 to 2^32 tokens, not " + std::to_string(tokens));
  const cuuint64_t head_bytes = cuuint64_t(head_dim) * sizeof(Element);
  const cuuint64_t sizes[4] = {64, cuuint64_t(tokens), cuuint64_t(head_dim / 64), cuuint64_t(heads)};
  const cuuint64_t strides[3] = {head_bytes * cuuint64_t(heads), 64 * sizeof(Element), head_bytes};
  const cuuint32_t box[4] = {64, cuuint32_t(box_rows),
                             cuuint32_t(box_column_blocks > 0 ? box_column_blocks : head_dim / 64), 1};
  const cuuint32_t element_strides[4] = {1, 1, 1, 1};
  CUtensorMap map{};
  const CUresult r = encode(&map, kType, 4, const_cast<Element*>(base), sizes, strides, box, element_strides,
                            CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    throw std::runtime_error("cuTensorMapEncodeTiled (varlen) failed with CUresult " + std::to_string(int(r)));
  return map;
}

// ---- Device ---------------------------------------------------------------------------------
#if LADDER_SM90A
// Fetch the tensor map's 128 bytes into the copy engine's cache ahead of the first copy.
__device__ __forceinline__ void tma_prefetch_map(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<std::uint64_t>(map))
               : "memory");
}

// Copy the box at (row, head) into shared memory at `dst` (1024-byte aligned for the swizzle);
// the engine signals `bar` with the box's bytes when they have landed.
__device__ __forceinline__ void tma_load_tile(void* dst, const CUtensorMap* map, std::uint64_t* bar,
                                              int row, int head) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4, %5}], [%6];\n" ::"r"(ptx::smem_addr(dst)),
      "l"(reinterpret_cast<std::uint64_t>(map)), "r"(0), "r"(row), "r"(0), "r"(head),
      "r"(ptx::smem_addr(bar))
      : "memory");
}

// A plain (untiled) bulk copy of `bytes` contiguous bytes from global to shared memory, signalling
// `bar` like a tile load. No tensor map and no out-of-bounds fill: `src`, `dst` and `bytes` must
// be multiples of 16 and the whole range must exist (the backward's per-row statistics, which its
// preprocess kernel writes into a padded buffer for this).
__device__ __forceinline__ void bulk_load(void* dst, const void* src, std::uint32_t bytes,
                                          std::uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
          ptx::smem_addr(dst)),
      "l"(reinterpret_cast<std::uint64_t>(src)), "r"(bytes), "r"(ptx::smem_addr(bar))
      : "memory");
}

// Copy a shared-memory tile (same layout) out to the box at (row, head). Rows past the tensor's
// end are not written: the engine clips the box, so a ragged last tile needs no mask here either.
// The writes are asynchronous: commit, then wait before the shared memory is reused or the
// kernel exits.
__device__ __forceinline__ void tma_store_tile(const CUtensorMap* map, const void* src, int row,
                                               int column_block, int head) {
  asm volatile(
      "cp.async.bulk.tensor.4d.global.shared::cta.tile.bulk_group [%0, {%1, %2, %3, %4}], [%5];\n" ::
          "l"(reinterpret_cast<std::uint64_t>(map)),
      "r"(0), "r"(row), "r"(column_block), "r"(head), "r"(ptx::smem_addr(src))
      : "memory");
}
// Add `bytes` contiguous fp32 values of shared memory into global memory (dst[i] += src[i]), done
// by the copy engine and the L2 rather than by per-thread atomics. `dst`, `src` and `bytes` must
// be multiples of 16. Each element's add is atomic, the whole is not: concurrent reducers into the
// same range are fine, their order is not fixed. Completes like a store: commit, then wait.
__device__ __forceinline__ void bulk_reduce_add_f32(float* dst, const float* src, std::uint32_t bytes) {
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(
                   reinterpret_cast<std::uint64_t>(dst)),
               "r"(ptx::smem_addr(src)), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void tma_store_commit() {
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}
// The stores' reads of shared memory are done (the buffer may be reused).
__device__ __forceinline__ void tma_store_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
}
// The stores are complete (before the thread exits).
__device__ __forceinline__ void tma_store_wait_all() {
  asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
}
#endif  // LADDER_SM90A

}  // namespace ladder::hopper
