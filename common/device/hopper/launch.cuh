// The host side of a persistent Hopper forward kernel: its tensor maps, its schedule, the launch.
//
// Every persistent step's kernel takes (tm_q, tm_k, tm_v, tm_o, schedule params, extra...): four
// `const __grid_constant__ CUtensorMap`, its scheduler's Params, then whatever the step adds (the
// key count, the GQA group, the softmax scale, ...). Usage, a dense step:
//
//   template <class Scheduler, class T, bool kCausal>
//   void launch_tile(const AttentionArgs& args, cudaStream_t stream) {
//     hopper::launch_dense<Scheduler, T>(my_kernel<Scheduler, T, kCausal>, "my_kernel", args, stream,
//                                        args.shape.seqlen, args.softmax_scale * ladder::kLog2e);
//   }
//
// GQA: launch_dense<Scheduler, T, /*kGrouped=*/true> (K/V maps of B·Hkv heads, the list's group
// for GroupWalk). A packed batch builds its plan and grid itself, then
//   hopper::launch_persistent<T>(kernel, "name", grid, hopper::varlen_maps<T>(args), plan, stream, extra...);
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "common/check.hpp"
#include "common/device/hopper/tile_scheduler.cuh"
#include "common/device/hopper/tma.cuh"
#include "common/registry.hpp"

namespace ladder::hopper {

// A forward kernel's tensor maps: Q in boxes of the tile's kBlockM rows, K and V of a block's
// kBlockN keys, O of 64 rows and one 64-column block (each consumer warpgroup stores its own 64
// rows, one copy per column block).
struct ForwardMaps {
  CUtensorMap q, k, v, o;
};

// [B·H][N][D] tensors; K and V have kv_heads heads (B·H, or B·Hkv with GQA).
template <class T>
ForwardMaps dense_maps(const AttentionArgs& args, int heads, int kv_heads) {
  const auto a = args.as<typename T::Element>();  // Q, K, V, O in the kernel's element type
  const int n = args.shape.seqlen;
  return {make_attention_tensor_map(a.q, heads, n, T::kHeadDim, T::kBlockM),
          make_attention_tensor_map(a.k, kv_heads, n, T::kHeadDim, T::kBlockN),
          make_attention_tensor_map(a.v, kv_heads, n, T::kHeadDim, T::kBlockN),
          make_attention_tensor_map(a.o, heads, n, T::kHeadDim, 64, 1)};
}

// A packed batch: Q, O [total_q, H, D], K, V [total_k, Hkv, D], by token and head (tma.cuh).
template <class T>
ForwardMaps varlen_maps(const AttentionArgs& args) {
  const auto a = args.as<typename T::Element>();
  const auto& sh = args.shape;
  return {make_varlen_tensor_map(a.q, sh.total_q(), sh.heads, T::kHeadDim, T::kBlockM),
          make_varlen_tensor_map(a.k, sh.total_k(), sh.hkv(), T::kHeadDim, T::kBlockN),
          make_varlen_tensor_map(a.v, sh.total_k(), sh.hkv(), T::kHeadDim, T::kBlockN),
          make_varlen_tensor_map(a.o, sh.total_q(), sh.heads, T::kHeadDim, 64, 1)};
}

// The dense problem's schedule: B·H heads of ceil(N / kBlockM) query blocks (group: GQA's, for
// GroupWalk's order), and what the schedulers size themselves by.
template <class T>
ScheduleArgs dense_schedule(const AttentionArgs& args, cudaStream_t stream, int group = 1) {
  const auto& sh = args.shape;
  TileList list = make_tile_list(std::int64_t(sh.batch) * sh.heads, sh.seqlen, T::kBlockM);
  list.group = group;
  return {list, args.sm_count, args.l2_bytes,
          2 * std::size_t(sh.seqlen) * T::kHeadDim * sizeof(typename T::Element),  // one head's K and V
          args.workspace, stream};
}

// Opts the kernel in to T::kSmemBytes of shared memory and launches grid CTAs of T::kThreads,
// checked under `name`.
template <class T, class... KernelParams, class Schedule, class... Extra>
void launch_persistent(void (*kernel)(KernelParams...), const char* name, int grid, const ForwardMaps& maps,
                       const Schedule& schedule, cudaStream_t stream, const Extra&... extra) {
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(T::kSmemBytes)));
  kernel<<<grid, T::kThreads, T::kSmemBytes, stream>>>(maps.q, maps.k, maps.v, maps.o, schedule, extra...);
  CUDA_CHECK_LAUNCH_OF(name);
}

// A dense (kGrouped: GQA) problem on Scheduler: maps, schedule, grid, launch.
template <class Scheduler, class T, bool kGrouped = false, class... KernelParams, class... Extra>
void launch_dense(void (*kernel)(KernelParams...), const char* name, const AttentionArgs& args,
                  cudaStream_t stream, const Extra&... extra) {
  const auto& sh = args.shape;
  if (!kGrouped && sh.gqa())
    throw std::logic_error(std::string(name) + " reads one K/V head per query head: a GQA problem needs "
                           "launch_dense<Scheduler, T, true>");
  const ScheduleArgs sched = dense_schedule<T>(args, stream, kGrouped ? sh.group() : 1);
  const int heads = sched.list.bh_count;
  const ForwardMaps maps = dense_maps<T>(args, heads, kGrouped ? sh.batch * sh.hkv() : heads);
  const int grid = Scheduler::grid_size(sched);
  const typename Scheduler::Params params = Scheduler::make_params(sched);
  launch_persistent<T>(kernel, name, grid, maps, params, stream, extra...);
}

}  // namespace ladder::hopper
