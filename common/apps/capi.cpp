// A C interface to the registered attention variants, so that other programs can time the
// ladder's kernels with their own method: scripts/peers.py loads it with ctypes and times a step
// exactly as it times PyTorch's SDPA backends (CUDA-graph replays, in the same process, on the
// same tensors), which makes "step 20 vs PyTorch's cuDNN" a ratio measured one way for both sides.
//
//   int ladder_attention(const char* id, int batch, int heads, int seqlen, int head_dim,
//                        int causal, int bf16, const void* q, const void* k, const void* v,
//                        void* o, float* lse, void* stream, char* error, int error_bytes);
//
// q, k, v, o: [B, H, N, D] contiguous fp16 (bf16 = 1: bf16) device tensors; lse: [B, H, N] fp32
// (written by the variants that write it; may be null for the others); stream: a cudaStream_t.
// Returns 0, or 1 with a message in `error` (an unknown id, a shape the variant refuses on this
// GPU, a CUDA failure). Workspaces are allocated on a variant's first call for a shape and kept,
// so the calls that a CUDA graph captures allocate nothing.
//
// The library runs inside another program, next to that program's own copies of the libraries we
// use (PyTorch ships a cuDNN frontend, CCCL and a CUDA runtime of its own). It therefore exports
// this one function and nothing else (capi.map), and never lets an exception or an unknown error
// cross into the caller.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <string>
#include <tuple>

#include "common/check.hpp"
#include "common/device_buffer.hpp"
#include "common/registry.hpp"

namespace {

using ladder::AttentionShape;

const ladder::Variant* find_variant(const std::string& id, std::string* why) {
  if (id.find('/') == std::string::npos) {
    *why = "variant ids look like 20/persistent, got \"" + id + "\"";
    return nullptr;
  }
  const ladder::Variant* v = ladder::Registry::instance().find_variant(id);
  if (v && std::holds_alternative<ladder::AttentionLaunch>(v->launch)) return v;
  *why = "no attention variant " + id + " in this library (see `ladder --list`)";
  return nullptr;
}

// What the call needs to know of the current device, read per call (the caller may switch devices
// between calls): its compute capability (for the variants' refusals), SM count and L2 size
// (AttentionArgs::sm_count, l2_bytes).
struct Device {
  int sm = 0;
  int sm_count = 0;
  std::size_t l2_bytes = 0;
};
Device current_device() {
  int device = 0, major = 0, minor = 0, sms = 0, l2 = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device));
  return {10 * major + minor, sms, std::size_t(l2)};
}

// Workspaces by (variant id, bytes), kept for the life of the process.
std::map<std::tuple<std::string, std::size_t>, std::unique_ptr<ladder::DeviceBuffer<std::uint8_t>>>&
workspaces() {
  static std::map<std::tuple<std::string, std::size_t>,
                  std::unique_ptr<ladder::DeviceBuffer<std::uint8_t>>> cache;
  return cache;
}

void set_error(char* error, int error_bytes, const std::string& what) {
  if (error && error_bytes > 0) std::snprintf(error, std::size_t(error_bytes), "%s", what.c_str());
}

}  // namespace

extern "C" int ladder_attention(const char* id, int batch, int heads, int seqlen, int head_dim,
                                int causal, int bf16, const void* q, const void* k, const void* v,
                                void* o, float* lse, void* stream, char* error, int error_bytes) {
  try {
    std::string why;
    const ladder::Variant* variant = find_variant(id ? id : "", &why);
    if (!variant) {
      set_error(error, error_bytes, why);
      return 1;
    }
    AttentionShape shape{.batch = batch, .heads = heads, .seqlen = seqlen, .head_dim = head_dim,
                         .causal = causal != 0,
                         .dtype = bf16 ? ladder::DType::BF16 : ladder::DType::F16};
    if (auto bad = ladder::validate(shape)) {
      set_error(error, error_bytes, *bad);
      return 1;
    }
    const Device gpu = current_device();
    if (auto refused = variant->constraints.refuse(shape, gpu.sm)) {
      set_error(error, error_bytes, std::string(id) + " does not run " + shape.to_string() + ": " + *refused);
      return 1;
    }
    const std::size_t bytes = variant->workspace_bytes(shape);
    auto& slot = workspaces()[{std::string(id), bytes}];
    if (!slot) slot = std::make_unique<ladder::DeviceBuffer<std::uint8_t>>(bytes);
    const ladder::AttentionArgs args{shape,
                                     shape.softmax_scale(),
                                     static_cast<const __half*>(q),
                                     static_cast<const __half*>(k),
                                     static_cast<const __half*>(v),
                                     static_cast<__half*>(o),
                                     lse,
                                     slot->get(),
                                     gpu.sm_count,
                                     gpu.l2_bytes};
    std::get<ladder::AttentionLaunch>(variant->launch)(args, static_cast<cudaStream_t>(stream));
    return 0;
  } catch (const std::exception& e) {
    set_error(error, error_bytes, e.what());
    return 1;
  } catch (...) {
    set_error(error, error_bytes, std::string(id ? id : "?") + ": an exception that is not a std::exception");
    return 1;
  }
}
