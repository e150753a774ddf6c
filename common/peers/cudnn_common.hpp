// What the cuDNN peers share (step 99's forward, common/peers/cudnn_attention.cpp, and step 98's
// backward, common/peers/cudnn_attention_backward.cpp): the versions for error messages, the
// checks of cuDNN's and the frontend's status, and one cuDNN handle per device for the whole
// process. Include it only where LADDER_HAVE_CUDNN is defined (common/peers/cudnn.cmake).
//
// Header-only on purpose: the handle cache is an inline function's static, so the two peers (two
// object libraries) share one handle per device in every program that links them, and neither
// peer calls into the other's object file.
#pragma once

#ifndef LADDER_HAVE_CUDNN
#error "common/peers/cudnn_common.hpp needs cuDNN (LADDER_HAVE_CUDNN, common/peers/cudnn.cmake)"
#endif

#include <cudnn.h>
#include <cudnn_frontend.h>
#include <fmt/format.h>

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "common/peers/cudnn_attention.hpp"  // BuildOnceCache, LibraryRefusal

namespace ladder::peers {

inline std::string cudnn_version_string(std::int64_t v) {  // 91900 -> "9.19.0"
  return fmt::format("{}.{}.{}", v / 10000, (v / 100) % 100, v % 100);
}

// "cuDNN 9.19.0 loaded (compiled against 9.19.0, frontend 1.32.0)", for every error message.
inline std::string cudnn_versions() {
  return fmt::format("cuDNN {} loaded (compiled against {}.{}.{}, frontend {}.{}.{})",
                     cudnn_version_string(std::int64_t(cudnnGetVersion())), CUDNN_MAJOR, CUDNN_MINOR,
                     CUDNN_PATCHLEVEL, CUDNN_FRONTEND_MAJOR_VERSION, CUDNN_FRONTEND_MINOR_VERSION,
                     CUDNN_FRONTEND_PATCH_VERSION);
}

inline constexpr const char* kCudnnLogHint =
    "cuDNN's own log: CUDNN_LOGLEVEL_DBG=3 CUDNN_LOGDEST_DBG=stderr; the frontend's: "
    "CUDNN_FRONTEND_LOG_INFO=1 CUDNN_FRONTEND_LOG_FILE=stderr";

// A failed cuDNN library call: the call, cuDNN's name for the status and its last error message.
inline void check_cudnn(cudnnStatus_t status, const char* call, const char* file, int line) {
  if (status == CUDNN_STATUS_SUCCESS) return;
  char last[1024] = "";
  cudnnGetLastErrorString(last, sizeof(last));
  std::string hint;
  switch (status) {
    case CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED:
    case CUDNN_STATUS_SUBLIBRARY_VERSION_MISMATCH:
      hint = fmt::format("cuDNN loads libcudnn_graph/_engines_*.so.9 at run time: put {} on "
                         "LD_LIBRARY_PATH, and make sure they are one version",
                         LADDER_CUDNN_LIBRARY_DIR);
      break;
    case CUDNN_STATUS_NOT_INITIALIZED:
    case CUDNN_STATUS_INTERNAL_ERROR:
      hint = "check that a GPU is visible and its driver works (nvidia-smi)";
      break;
    default:
      hint = kCudnnLogHint;
  }
  throw std::runtime_error(fmt::format("{}:{}: {} failed: {}{}{}. {}. {}", file, line, call,
                                       cudnnGetErrorString(status), last[0] ? ": " : "", last,
                                       cudnn_versions(), hint));
}
#define LADDER_CUDNN_CHECK(call) ::ladder::peers::check_cudnn((call), #call, __FILE__, __LINE__)

// A failed step of building or running a graph: the step, the problem and the frontend's message.
// The steps that ask cuDNN whether it supports the problem throw LibraryRefusal (the harness skips
// the row, with cuDNN's words); the others (a graph we described wrongly, a failed execution)
// throw std::runtime_error. `key` is the graph's key (its to_string() names the problem, formatted
// only on failure: execute() is checked at every launch); `source` names the peer's file, for the
// "described wrongly" case.
enum class CudnnStage { Describe, Support, Execute };
template <class Key>
void check_fe(cudnn_frontend::error_t status, const char* step, CudnnStage stage,
              const Key& key, std::string_view source) {
  if (status.is_good()) return;
  // validate() also says "not supported" for a problem the graph describes rightly but cuDNN
  // declines (the backward at N = 1): that is a refusal, not our bug.
  if (stage == CudnnStage::Describe && status.get_code() == cudnn_frontend::error_code_t::GRAPH_NOT_SUPPORTED)
    stage = CudnnStage::Support;
  const std::string what =
      fmt::format("cuDNN frontend: {} failed for {}: {} (frontend error code {}). {}", step,
                  to_string(key), status.get_message(), int(status.get_code()), cudnn_versions());
  switch (stage) {
    case CudnnStage::Support:
      throw LibraryRefusal(what + ". cuDNN has no engine for this problem on this GPU, or refused "
                                  "one of its attributes (its message says which); a newer cuDNN "
                                  "may run it (CUDNN_ROOT)");
    case CudnnStage::Describe:
      throw std::runtime_error(fmt::format("{}. The graph this peer describes is wrong: a bug in {}. {}",
                                           what, source, kCudnnLogHint));
    case CudnnStage::Execute:
      break;
  }
  throw std::runtime_error(what + ". " + kCudnnLogHint);
}

// The part of an attention graph both peers describe alike: fp16 (or bf16) in and out with the
// softmax, the products and their accumulators in fp32, like the lessons; and a tensor in the
// harness's [B, H, N, D] contiguous layout (PyTorch's SDPA layout too).
inline void set_attention_data_types(cudnn_frontend::graph::Graph& graph, DType dtype) {
  graph.set_io_data_type(dtype == DType::BF16 ? cudnn_frontend::DataType_t::BFLOAT16 : cudnn_frontend::DataType_t::HALF)
      .set_intermediate_data_type(cudnn_frontend::DataType_t::FLOAT)
      .set_compute_data_type(cudnn_frontend::DataType_t::FLOAT);
}
inline std::vector<std::int64_t> bhnd_strides(std::int64_t h, std::int64_t n, std::int64_t d) {
  return {h * n * d, n * d, d, 1};
}
inline std::shared_ptr<cudnn_frontend::graph::Tensor_attributes> bhnd_tensor(
    cudnn_frontend::graph::Graph& graph, const char* name, std::int64_t uid, std::int64_t b,
    std::int64_t h, std::int64_t n, std::int64_t d) {
  return graph.tensor(cudnn_frontend::graph::Tensor_attributes()
                          .set_name(name)
                          .set_uid(uid)
                          .set_dim({b, h, n, d})
                          .set_stride(bhnd_strides(h, n, d)));
}

// From a described graph to one that runs, the frontend's steps in order, each checked (a step
// that asks cuDNN whether it supports the problem refuses it; validate() and the workspace query
// blame our description). Returns the bytes of workspace the chosen plan needs.
template <class Key>
std::int64_t plan_graph(cudnn_frontend::graph::Graph& graph, cudnnHandle_t handle, const Key& key,
                        std::string_view source) {
  namespace fe = cudnn_frontend;
  auto check = [&](fe::error_t status, const char* step, CudnnStage stage) {
    check_fe(status, step, stage, key, source);
  };
  check(graph.validate(), "validate", CudnnStage::Describe);
  check(graph.build_operation_graph(handle), "build_operation_graph", CudnnStage::Support);
  // Heuristics mode A first (PyTorch's choice), the fallback list if A offers nothing.
  check(graph.create_execution_plans({fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK}),
        "create_execution_plans", CudnnStage::Support);
  check(graph.check_support(), "check_support", CudnnStage::Support);
  check(graph.build_plans(fe::BuildPlanPolicy_t::HEURISTICS_CHOICE), "build_plans", CudnnStage::Support);
  std::int64_t workspace_bytes = 0;
  check(graph.get_workspace_size(workspace_bytes), "get_workspace_size", CudnnStage::Describe);
  return workspace_bytes;
}

// A cuDNN handle. cudnnCreate costs milliseconds and loads cuDNN's sub-libraries; it binds the
// handle to the device current at creation.
class CudnnHandle {
 public:
  CudnnHandle() {
    // A libcudnn of another major version than the headers is an ABI mismatch: refuse it here,
    // with both numbers, rather than fail later in a way that names neither.
    const std::int64_t loaded = std::int64_t(cudnnGetVersion());
    if (loaded / 10000 != CUDNN_MAJOR)
      throw std::runtime_error(fmt::format(
          "cuDNN {} was loaded but this program was compiled against cuDNN {}.{}.{}: put the "
          "matching libcudnn (configured from {}) first on LD_LIBRARY_PATH, or reconfigure with "
          "CUDNN_ROOT pointing at the cuDNN you run",
          cudnn_version_string(loaded), CUDNN_MAJOR, CUDNN_MINOR, CUDNN_PATCHLEVEL,
          LADDER_CUDNN_LIBRARY_DIR));
    LADDER_CUDNN_CHECK(cudnnCreate(&handle_));
  }
  ~CudnnHandle() {
    if (handle_) cudnnDestroy(handle_);  // never throw from a destructor
  }
  CudnnHandle(const CudnnHandle&) = delete;
  CudnnHandle& operator=(const CudnnHandle&) = delete;
  cudnnHandle_t get() const { return handle_; }

 private:
  cudnnHandle_t handle_ = nullptr;
};

// The process's handles, one per device, created by the first launch there (of either peer).
// A peer's graph cache must be created after this one, so that it is destroyed before it (a graph's
// plans were made with its device's handle): each peer's cache accessor calls this first.
inline BuildOnceCache<int, CudnnHandle>& cudnn_handles() {
  static BuildOnceCache<int, CudnnHandle> handles;  // destroyed at exit, after the graph caches
  return handles;
}
inline cudnnHandle_t cudnn_handle(int device) {
  return cudnn_handles().get(device, [] { return std::make_unique<CudnnHandle>(); }).get();
}

}  // namespace ladder::peers
