// A C interface to the registered attention and backward variants, so that other programs can time
// the ladder's kernels with their own method: scripts/peers.py loads it with ctypes and times a step
// exactly as it times PyTorch's SDPA backends (CUDA-graph replays, in the same process, on the
// same tensors), which makes "step 20 vs PyTorch's cuDNN" a ratio measured one way for both sides.
//
//   int ladder_attention(const char* id, int batch, int heads, int seqlen, int head_dim,
//                        int causal, int bf16, const void* q, const void* k, const void* v,
//                        void* o, float* lse, void* stream, char* error, int error_bytes);
//
//   int ladder_attention_backward(const char* id, int batch, int heads, int seqlen, int head_dim,
//                                 int causal, int bf16, const void* q, const void* k,
//                                 const void* v, const void* o, const void* d_o, const float* lse,
//                                 void* dq, void* dk, void* dv, void* stream, char* error,
//                                 int error_bytes);
//
//   int ladder_attention_backward_serving(const char* id, int batch, int heads, int kv_heads,
//                                         int seqlen, int head_dim, int causal, int bf16,
//                                         const int* q_lens, const int* cu_seqlens_q,
//                                         const void* q, const void* k, const void* v,
//                                         const void* o, const void* d_o, const float* lse,
//                                         void* dq, void* dk, void* dv, void* stream,
//                                         char* error, int error_bytes);
//
//   int ladder_attention_serving(const char* id, int batch, int heads, int kv_heads, int seqlen,
//                                int kv_seqlen, int head_dim, int causal, int bf16,
//                                const int* q_lens, const int* kv_lens,
//                                const int* cu_seqlens_q, const int* cu_seqlens_k,
//                                int page_size, const int* block_table,
//                                const void* q, const void* k, const void* v, void* o,
//                                float* lse, void* stream, char* error, int error_bytes);
//
// q, k, v, o (and d_o, dq, dk, dv): [B, H, N, D] contiguous fp16 (bf16 = 1: bf16) device tensors
// (fp16 and bf16 only: an fp8 variant of Part VIII is refused, with a message);
// lse: [B, H, N] fp32, the natural log of the sum of exp(S / sqrt(D)) over each row (the forward
// writes it where its variant does, and may be given null otherwise; the backward reads it);
// stream: a cudaStream_t. The backward takes the forward's O and lse and writes dQ, dK, dV.
// Returns 0, or 1 with a message in `error` (an unknown id, a shape the variant refuses on this
// GPU, a CUDA failure). Workspaces are allocated on a variant's first call needing that size and
// kept per (variant, size), so the calls that a CUDA graph captures allocate nothing.
//
// ladder_attention_serving is the same call for Part VI's problems (common/problem.hpp gives each
// layout): kv_heads K/V heads (0: heads; GQA when fewer), kv_seqlen keys per sequence (0: seqlen;
// decode when it differs, causal aligned to the end), a packed variable-length batch when q_lens is
// given, a paged K/V cache when page_size > 0. Two arguments come twice, on purpose:
//   q_lens, kv_lens  HOST arrays of `batch` lengths (kv_lens null: the same as q_lens), or both null
//                    for a dense batch. The shape needs the lengths on the host (the variant's
//                    refusals, its workspace, its grid), and reading them back from cu_seqlens would
//                    be a device-to-host copy in every call: a synchronization, and no CUDA graph
//                    could capture it. seqlen is then ignored (the longest of q_lens is taken) and
//                    kv_seqlen must be 0.
//   cu_seqlens_q/k   DEVICE [batch + 1] int32 prefix sums of the same lengths, which the kernels
//                    read (varlen only; both required, null otherwise). The caller keeps the two
//                    consistent: this call cannot compare them without that copy.
//   block_table      DEVICE [batch, pages_per_seq] int32 (paged only), pages_per_seq =
//                    ceil(longest kv length / page_size); k and v are then the page pool
//                    [num_pages, kv_heads, page_size, D].
// Varlen q, o are [total_q, H, D], k, v [total_k, kv_heads, D], lse [H, total_q]; dense ones as
// ladder_attention's with kv_heads and kv_seqlen for K and V. Same return codes (0, or 1 with a
// message: an unknown id, a shape no step can run, a property the variant does not serve, a
// missing pointer, a CUDA failure).
//
// ladder_attention_backward_serving is ladder_attention_backward for Part VI's backward problems:
// GQA (kv_heads K/V heads, 0: heads) and a packed variable-length batch of self-attention (keys =
// queries in every sequence; causal inside each). q_lens is the HOST array of `batch` lengths and
// cu_seqlens_q their DEVICE [batch + 1] int32 prefix sums (both null for a dense batch; seqlen is
// then each sequence's length, and with q_lens it is ignored: the longest is taken), for the reason
// ladder_attention_serving's come twice; the keys' prefix sums are the same. Layouts: dense q, o,
// d_o, dq [B, H, N, D], k, v, dk, dv [B, kv_heads, N, D], lse [B, H, N]; varlen q, o, d_o, dq
// [total, H, D], k, v, dk, dv [total, kv_heads, D], lse [H, total] (the forward's). dK and dV of a
// K/V head are the sums over its group of query heads. Same return codes (0, or 1 with a message:
// an unknown id, a shape no backward runs, a property the variant does not serve, a missing pointer,
// a CUDA failure).
//
// The library runs inside another program, next to that program's own copies of the libraries we
// use (PyTorch ships a cuDNN frontend, CCCL and a CUDA runtime of its own). It therefore exports
// these four functions and nothing else (capi.map), and never lets an exception or an unknown error
// cross into the caller.
#include <cuda_runtime.h>

#include <algorithm>
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
#include "common/run_args.hpp"

namespace {

using ladder::AttentionShape;

// The variant `id` if it is of the kind that `Launch` launches ("attention" or "backward").
template <class Launch>
const ladder::Variant* find_variant(const std::string& id, const char* kind, std::string* why) {
  if (id.find('/') == std::string::npos) {
    *why = "variant ids look like 20/persistent, got \"" + id + "\"";
    return nullptr;
  }
  const ladder::Variant* v = ladder::Registry::instance().find_variant(id);
  if (v && std::holds_alternative<Launch>(v->launch)) return v;
  *why = std::string("no ") + kind + " variant " + id + " in this library (see `ladder --list`)";
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

// Workspaces by (variant id, bytes), kept for the life of the process, each with the problem it
// served last: zeroed when allocated and again when another problem takes it over
// (AttentionArgs::workspace's contract: a kernel's counters there are 0 between its launches on
// one problem, and another problem's partials may sit where this one's counters go). The zeroing
// is a cudaMemsetAsync on the call's stream, so it is ordered before the launch and a CUDA graph
// can hold it; under capture it is captured on every call, because a replay cannot know which
// problem used the slot last (an eager call of another problem may run between two replays).
struct Workspace {
  std::unique_ptr<ladder::DeviceBuffer<std::uint8_t>> buffer;
  std::string problem;
};
std::map<std::tuple<std::string, std::size_t>, Workspace>& workspaces() {
  static std::map<std::tuple<std::string, std::size_t>, Workspace> cache;
  return cache;
}

void set_error(char* error, int error_bytes, const std::string& what) {
  if (error && error_bytes > 0) std::snprintf(error, std::size_t(error_bytes), "%s", what.c_str());
}

}  // namespace

// What both entry points do before launching: find the variant, check the shape and the GPU, and
// find (or allocate) its workspace. Throws CallError with the message for `error`.
struct CallError {
  std::string what;
};
struct Prepared {
  const ladder::Variant* variant;
  AttentionShape shape;
  Device gpu;
  void* workspace;
};
template <class Launch>
Prepared prepare(const char* id, const char* kind, const AttentionShape& shape, cudaStream_t stream) {
  std::string why;
  const ladder::Variant* variant = find_variant<Launch>(id ? id : "", kind, &why);
  if (!variant) throw CallError{why};
  // The interface passes 16-bit tensors and no descales; an fp8 variant is the harness's alone.
  // Its shapes are built fp16 or bf16 with head_scales off, and validate() refuses head_scales
  // without fp8; the check names it too, so that no per-head problem reaches a launch without its
  // descale arrays (AttentionArgs::q_head_descale, ...) should a later entry point build one.
  if (shape.dtype == ladder::DType::E4M3 || shape.head_scales ||
      std::none_of(variant->constraints.dtypes.begin(), variant->constraints.dtypes.end(),
                   [](ladder::DType t) { return t != ladder::DType::E4M3; }))
    throw CallError{std::string(id) + " runs fp8 only: this interface takes fp16 and bf16 tensors "
                    "(FP8, Part VIII, runs in the harness: ladder --dtype fp8)"};
  if (auto bad = ladder::validate(shape)) throw CallError{*bad};
  const Device gpu = current_device();
  if (auto refused = variant->constraints.refuse(shape, gpu.sm))
    throw CallError{std::string(id) + " does not run " + shape.to_string() + ": " + *refused};
  const std::size_t bytes = variant->workspace_bytes(shape);
  auto& slot = workspaces()[{std::string(id), bytes}];
  if (!slot.buffer) slot.buffer = std::make_unique<ladder::DeviceBuffer<std::uint8_t>>(bytes);
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
  if (const std::string problem = shape.to_string();
      slot.problem != problem || capture != cudaStreamCaptureStatusNone) {
    slot.buffer->fill_bytes(0, stream);
    slot.problem = problem;
  }
  return {variant, shape, gpu, slot.buffer->get()};
}
template <class Launch>
Prepared prepare(const char* id, const char* kind, int batch, int heads, int seqlen, int head_dim,
                 int causal, int bf16, cudaStream_t stream) {
  return prepare<Launch>(id, kind,
                         AttentionShape{.batch = batch, .heads = heads, .seqlen = seqlen,
                                        .head_dim = head_dim, .causal = causal != 0,
                                        .dtype = bf16 ? ladder::DType::BF16 : ladder::DType::F16},
                         stream);
}

// ladder_attention_serving's shape from its arguments (the header comment says which are whose).
// Throws CallError for a missing pointer or a length array that contradicts the other arguments.
AttentionShape serving_shape(int batch, int heads, int kv_heads, int seqlen, int kv_seqlen,
                             int head_dim, int causal, int bf16, const int* q_lens,
                             const int* kv_lens, const int* cu_seqlens_q, const int* cu_seqlens_k,
                             int page_size, const int* block_table) {
  AttentionShape shape{.batch = batch, .heads = heads, .seqlen = seqlen, .head_dim = head_dim,
                       .causal = causal != 0,
                       .dtype = bf16 ? ladder::DType::BF16 : ladder::DType::F16,
                       .kv_heads = kv_heads, .kv_seqlen = kv_seqlen, .page_size = page_size};
  if (kv_lens && !q_lens) throw CallError{"kv_lens without q_lens: a varlen batch gives both (or q_lens alone)"};
  if (q_lens) {
    if (batch <= 0) throw CallError{"a variable-length batch needs batch > 0 lengths"};
    shape.q_lens.assign(q_lens, q_lens + batch);
    if (kv_lens) shape.kv_lens.assign(kv_lens, kv_lens + batch);
    int longest = 0;
    for (int n : shape.q_lens) longest = std::max(longest, n);
    shape.seqlen = longest;
    if (!cu_seqlens_q || !cu_seqlens_k)
      throw CallError{"a variable-length batch (q_lens given) needs the device cu_seqlens_q and cu_seqlens_k"};
  } else if (cu_seqlens_q || cu_seqlens_k) {
    throw CallError{"cu_seqlens given without q_lens: give the host lengths too (they make the shape)"};
  }
  if (page_size > 0 && !block_table) throw CallError{"a paged K/V cache (page_size > 0) needs the device block_table"};
  if (page_size <= 0 && block_table) throw CallError{"a block_table without page_size > 0"};
  return shape;
}

// Runs `body`, turning every exception into 1 and a message (never across the C boundary).
template <class Body>
int guarded(const char* id, char* error, int error_bytes, Body&& body) {
  try {
    body();
    return 0;
  } catch (const CallError& e) {
    set_error(error, error_bytes, e.what);
  } catch (const std::exception& e) {
    set_error(error, error_bytes, e.what());
  } catch (...) {
    set_error(error, error_bytes, std::string(id ? id : "?") + ": an exception that is not a std::exception");
  }
  return 1;
}

// The device a prepared call launches on, as its arguments carry it.
static ladder::LaunchDevice launch_device(const Prepared& p) { return {p.gpu.sm_count, p.gpu.l2_bytes}; }

extern "C" int ladder_attention(const char* id, int batch, int heads, int seqlen, int head_dim,
                                int causal, int bf16, const void* q, const void* k, const void* v,
                                void* o, float* lse, void* stream, char* error, int error_bytes) {
  return guarded(id, error, error_bytes, [&] {
    const Prepared p = prepare<ladder::AttentionLaunch>(id, "attention", batch, heads, seqlen,
                                                         head_dim, causal, bf16,
                                                         static_cast<cudaStream_t>(stream));
    const ladder::AttentionArgs args =
        ladder::attention_args(p.shape, q, k, v, o, lse, p.workspace, launch_device(p));
    std::get<ladder::AttentionLaunch>(p.variant->launch)(args, static_cast<cudaStream_t>(stream));
  });
}

extern "C" int ladder_attention_backward(const char* id, int batch, int heads, int seqlen,
                                         int head_dim, int causal, int bf16, const void* q,
                                         const void* k, const void* v, const void* o,
                                         const void* d_o, const float* lse, void* dq, void* dk,
                                         void* dv, void* stream, char* error, int error_bytes) {
  return guarded(id, error, error_bytes, [&] {
    const Prepared p = prepare<ladder::BackwardLaunch>(id, "backward", batch, heads, seqlen,
                                                        head_dim, causal, bf16,
                                                        static_cast<cudaStream_t>(stream));
    const ladder::BackwardArgs args = ladder::backward_args(p.shape, q, k, v, o, d_o, lse, dq, dk, dv,
                                                            p.workspace, launch_device(p));
    std::get<ladder::BackwardLaunch>(p.variant->launch)(args, static_cast<cudaStream_t>(stream));
  });
}

extern "C" int ladder_attention_serving(const char* id, int batch, int heads, int kv_heads,
                                        int seqlen, int kv_seqlen, int head_dim, int causal,
                                        int bf16, const int* q_lens, const int* kv_lens,
                                        const int* cu_seqlens_q, const int* cu_seqlens_k,
                                        int page_size, const int* block_table, const void* q,
                                        const void* k, const void* v, void* o, float* lse,
                                        void* stream, char* error, int error_bytes) {
  return guarded(id, error, error_bytes, [&] {
    const Prepared p = prepare<ladder::AttentionLaunch>(
        id, "attention",
        serving_shape(batch, heads, kv_heads, seqlen, kv_seqlen, head_dim, causal, bf16, q_lens,
                      kv_lens, cu_seqlens_q, cu_seqlens_k, page_size, block_table),
        static_cast<cudaStream_t>(stream));
    const ladder::AttentionArgs args =
        ladder::attention_args(p.shape, q, k, v, o, lse, p.workspace, launch_device(p),
                               {cu_seqlens_q, cu_seqlens_k, block_table});
    std::get<ladder::AttentionLaunch>(p.variant->launch)(args, static_cast<cudaStream_t>(stream));
  });
}

extern "C" int ladder_attention_backward_serving(const char* id, int batch, int heads, int kv_heads,
                                                 int seqlen, int head_dim, int causal, int bf16,
                                                 const int* q_lens, const int* cu_seqlens_q,
                                                 const void* q, const void* k, const void* v,
                                                 const void* o, const void* d_o, const float* lse,
                                                 void* dq, void* dk, void* dv, void* stream,
                                                 char* error, int error_bytes) {
  return guarded(id, error, error_bytes, [&] {
    if (q_lens && !cu_seqlens_q)
      throw CallError{"a variable-length batch (q_lens given) needs the device cu_seqlens_q"};
    // Self-attention: the keys' prefix sums are the queries'.
    const AttentionShape shape = serving_shape(batch, heads, kv_heads, seqlen, 0, head_dim, causal, bf16,
                                               q_lens, nullptr, cu_seqlens_q, cu_seqlens_q, 0, nullptr);
    if (auto bad = ladder::validate_backward(shape)) throw CallError{*bad};
    const Prepared p =
        prepare<ladder::BackwardLaunch>(id, "backward", shape, static_cast<cudaStream_t>(stream));
    const ladder::BackwardArgs args =
        ladder::backward_args(p.shape, q, k, v, o, d_o, lse, dq, dk, dv, p.workspace, launch_device(p),
                              shape.varlen() ? cu_seqlens_q : nullptr, shape.varlen() ? cu_seqlens_q : nullptr);
    std::get<ladder::BackwardLaunch>(p.variant->launch)(args, static_cast<cudaStream_t>(stream));
  });
}
