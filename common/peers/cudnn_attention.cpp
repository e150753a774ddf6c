// cuDNN's fused attention through the cuDNN frontend's graph API, registered as the attention
// track's peer step (99 "peers"). What the rows are and how they are keyed: cudnn_attention.hpp.
//
// One launch of a variant is:
//   first launch for a problem:  build the SDPA graph (heuristics, plan compilation, workspace),
//                                cache it under its key, then execute it
//   every later launch:          look the graph up, set the stream, execute
// The harness's first launch of a variant is its untimed check run, and its timing loop warms up
// before the first timed repetition, so no build is ever inside a timed repetition.
#include "common/peers/cudnn_attention.hpp"

#include <fmt/format.h>

#include <bit>
#include <unordered_map>

#include "common/check.hpp"
#include "common/device_buffer.hpp"
#include "common/registry.hpp"

#ifdef LADDER_HAVE_CUDNN
#include <cudnn.h>
#include <cudnn_frontend.h>
#endif

namespace ladder::peers {

CudnnGraphKey cudnn_graph_key(const AttentionShape& shape, float softmax_scale, bool stats,
                              int device) {
  CudnnGraphKey key;
  key.device = device;
  key.batch = shape.batch;
  key.heads = shape.heads;
  key.seqlen = shape.seqlen;
  key.head_dim = shape.head_dim;
  key.causal = shape.causal;
  key.dtype = shape.dtype;
  key.stats = stats;
  key.scale_bits = std::bit_cast<std::uint32_t>(softmax_scale);
  return key;
}

std::string to_string(const CudnnGraphKey& key) {
  return fmt::format("B={} H={} N={} D={} {} {}, scale {}, {}, device {}", key.batch, key.heads,
                     key.seqlen, key.head_dim, key.causal ? "causal" : "non-causal",
                     dtype_name(key.dtype),
                     std::bit_cast<float>(key.scale_bits), key.stats ? "O and stats" : "O only",
                     key.device);
}

std::string cudnn_not_built_message(std::string_view why) {
  return fmt::format(
      "cudnn: not built — {}. To enable it: scripts/install-deps.sh (it fetches the cuDNN frontend "
      "headers into .deps/), then configure and build again; or set CUDNN_ROOT to a cuDNN 9 "
      "(include/cudnn.h, lib/libcudnn.so.9) and CUDNN_FRONTEND_INCLUDE_DIR to the directory of "
      "cudnn_frontend.h; -DLADDER_WITH_CUDNN=ON makes a missing cuDNN a configure error",
      why);
}

#ifdef LADDER_HAVE_CUDNN
// ================================================================================================
// Built with cuDNN
// ================================================================================================
namespace fe = cudnn_frontend;

namespace {

std::string version_string(std::int64_t v) {  // 91900 -> "9.19.0"
  return fmt::format("{}.{}.{}", v / 10000, (v / 100) % 100, v % 100);
}

std::string versions() {
  return fmt::format("cuDNN {} loaded (compiled against {}.{}.{}, frontend {}.{}.{})",
                     version_string(std::int64_t(cudnnGetVersion())), CUDNN_MAJOR, CUDNN_MINOR,
                     CUDNN_PATCHLEVEL, CUDNN_FRONTEND_MAJOR_VERSION, CUDNN_FRONTEND_MINOR_VERSION,
                     CUDNN_FRONTEND_PATCH_VERSION);
}

constexpr const char* kLogHint =
    "cuDNN's own log: CUDNN_LOGLEVEL_DBG=3 CUDNN_LOGDEST_DBG=stderr; the frontend's: "
    "CUDNN_FRONTEND_LOG_INFO=1 CUDNN_FRONTEND_LOG_FILE=stderr";

// A failed cuDNN library call: the call, cuDNN's name for the status and its last error message.
void check_cudnn(cudnnStatus_t status, const char* call, const char* file, int line) {
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
      hint = kLogHint;
  }
  throw std::runtime_error(fmt::format("{}:{}: {} failed: {}{}{}. {}. {}", file, line, call,
                                       cudnnGetErrorString(status), last[0] ? ": " : "", last,
                                       versions(), hint));
}
#define CUDNN_CHECK(call) check_cudnn((call), #call, __FILE__, __LINE__)

// A failed step of building or running a graph: the step, the problem and the frontend's message.
// The steps that ask cuDNN whether it supports the problem throw LibraryRefusal; the others (a graph
// we described wrongly, a failed execution) throw std::runtime_error.
enum class Stage { Describe, Support, Execute };
void check_fe(fe::error_t status, const char* step, Stage stage, const CudnnGraphKey& key) {
  if (status.is_good()) return;
  const std::string what = fmt::format("cuDNN frontend: {} failed for {}: {} (frontend error code {}). {}",
                                       step, to_string(key), status.get_message(),
                                       int(status.get_code()), versions());
  switch (stage) {
    case Stage::Support:
      throw LibraryRefusal(what + ". cuDNN has no engine for this problem on this GPU, or refused "
                                  "one of its attributes (its message says which); a newer cuDNN "
                                  "may run it (CUDNN_ROOT)");
    case Stage::Describe:
      throw std::runtime_error(what + ". The graph this peer describes is wrong: a bug in "
                                      "common/peers/cudnn_attention.cpp. " + kLogHint);
    case Stage::Execute:
      break;
  }
  throw std::runtime_error(what + ". " + kLogHint);
}

// One cuDNN handle per device, created on the first launch there. cudnnCreate costs milliseconds
// and loads cuDNN's sub-libraries; it binds the handle to the device current at creation.
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
          version_string(loaded), CUDNN_MAJOR, CUDNN_MINOR, CUDNN_PATCHLEVEL, LADDER_CUDNN_LIBRARY_DIR));
    CUDNN_CHECK(cudnnCreate(&handle_));
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

// The tensors' ids in the graph: the variant pack binds device pointers to them at each execution.
enum TensorUid : std::int64_t { kUidQ = 1, kUidK, kUidV, kUidO, kUidStats };

// A built graph and the workspace its plan needs (owned here, so freed with the graph).
struct CudnnGraph {
  fe::graph::Graph graph;
  DeviceBuffer<std::uint8_t> workspace;
};

std::unique_ptr<CudnnGraph> build_graph(cudnnHandle_t handle, const CudnnGraphKey& key) {
  auto built = std::make_unique<CudnnGraph>();
  fe::graph::Graph& graph = built->graph;
  // fp16 (or bf16) in and out; the softmax and both products accumulate in fp32, like the lessons.
  graph.set_io_data_type(key.dtype == DType::BF16 ? fe::DataType_t::BFLOAT16 : fe::DataType_t::HALF)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);

  // [B, H, N, D] contiguous, PyTorch's SDPA layout and the harness's.
  const std::int64_t b = key.batch, h = key.heads, n = key.seqlen, d = key.head_dim;
  const std::vector<std::int64_t> dims = {b, h, n, d};
  const std::vector<std::int64_t> strides = {h * n * d, n * d, d, 1};
  auto input = [&](const char* name, std::int64_t uid) {
    return graph.tensor(
        fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim(dims).set_stride(strides));
  };
  auto q = input("Q", kUidQ);
  auto k = input("K", kUidK);
  auto v = input("V", kUidV);

  // The causal mask is the top-left one (key j visible to query i when j <= i), the harness's.
  auto options = fe::graph::SDPA_attributes()
                     .set_name("sdpa_forward")
                     .set_attn_scale(std::bit_cast<float>(key.scale_bits))
                     .set_causal_mask(key.causal)
                     .set_generate_stats(key.stats);
  auto [o, stats] = graph.sdpa(q, k, v, std::move(options));
  o->set_output(true).set_uid(kUidO).set_dim(dims).set_stride(strides);
  if (key.stats)  // [B, H, N, 1] fp32, natural log: the harness's log-sum-exp layout
    stats->set_output(true)
        .set_uid(kUidStats)
        .set_data_type(fe::DataType_t::FLOAT)
        .set_dim({b, h, n, 1})
        .set_stride({h * n, n, 1, 1});

  check_fe(graph.validate(), "validate", Stage::Describe, key);
  check_fe(graph.build_operation_graph(handle), "build_operation_graph", Stage::Support, key);
  // Heuristics mode A first (PyTorch's choice), the fallback list if A offers nothing.
  check_fe(graph.create_execution_plans({fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK}),
           "create_execution_plans", Stage::Support, key);
  check_fe(graph.check_support(), "check_support", Stage::Support, key);
  check_fe(graph.build_plans(fe::BuildPlanPolicy_t::HEURISTICS_CHOICE), "build_plans", Stage::Support,
           key);

  std::int64_t workspace_bytes = 0;
  check_fe(graph.get_workspace_size(workspace_bytes), "get_workspace_size", Stage::Describe, key);
  built->workspace = DeviceBuffer<std::uint8_t>(std::size_t(workspace_bytes));
  return built;
}

// Handles and graphs of the process. Graphs are declared after handles, so they are destroyed
// first: a graph's plans were made with its device's handle.
struct CudnnState {
  BuildOnceCache<int, CudnnHandle> handles;
  BuildOnceCache<CudnnGraphKey, CudnnGraph> graphs;
};
CudnnState& state() {
  static CudnnState s;  // created by the first launch, destroyed at exit
  return s;
}

// The launch: everything but execute() happens once per problem (see the top of the file). One
// graph's workspace serves all its executions, which the harness issues on one stream in order.
void launch_cudnn(const AttentionArgs& args, cudaStream_t stream, bool stats) {
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CudnnState& s = state();
  const cudnnHandle_t handle =
      s.handles.get(device, [] { return std::make_unique<CudnnHandle>(); }).get();
  const CudnnGraphKey key = cudnn_graph_key(args.shape, args.softmax_scale, stats, device);
  CudnnGraph& g = s.graphs.get(key, [&] { return build_graph(handle, key); });

  CUDNN_CHECK(cudnnSetStream(handle, stream));
  std::unordered_map<std::int64_t, void*> pack = {
      // cuDNN's variant pack is void* (the graph knows the type); it only reads Q, K, V.
      {kUidQ, const_cast<__half*>(args.q)},
      {kUidK, const_cast<__half*>(args.k)},
      {kUidV, const_cast<__half*>(args.v)},
      {kUidO, args.o},
  };
  if (stats) pack[kUidStats] = args.lse;
  check_fe(g.graph.execute(handle, pack, g.workspace.get()), "execute", Stage::Execute, key);
}

Step peers_step() {
  const std::string built_with =
      fmt::format("cuDNN {}.{}.{} headers, frontend {}.{}.{}", CUDNN_MAJOR, CUDNN_MINOR,
                  CUDNN_PATCHLEVEL, CUDNN_FRONTEND_MAJOR_VERSION, CUDNN_FRONTEND_MINOR_VERSION,
                  CUDNN_FRONTEND_PATCH_VERSION);
  return attention_step(99, "peers", "Library peers, timed by the same harness")
      .add(attention_variant("cudnn",
                             "cuDNN fused attention (frontend SDPA graph, " + built_with +
                                 "): fp16 or bf16 in/out, fp32 softmax and accumulation, O only",
                             [](const AttentionArgs& a, cudaStream_t s) { launch_cudnn(a, s, false); })
               .needs_sm(80)
               .for_head_dims({64, 128})
               .for_dtypes({DType::F16, DType::BF16})
               .as_peer())
      .add(attention_variant("cudnn_lse",
                             "the same graph also writing the log-sum-exp (cuDNN's stats output)",
                             [](const AttentionArgs& a, cudaStream_t s) { launch_cudnn(a, s, true); })
               .needs_sm(80)
               .for_head_dims({64, 128})
               .for_dtypes({DType::F16, DType::BF16})
               .with_lse()
               .as_peer())
      .main_is("cudnn");
}

}  // namespace

CudnnBuildInfo cudnn_build_info() {
  CudnnBuildInfo info;
  info.built = true;
  info.headers = fmt::format("{}.{}.{}", CUDNN_MAJOR, CUDNN_MINOR, CUDNN_PATCHLEVEL);
  info.frontend = fmt::format("{}.{}.{}", CUDNN_FRONTEND_MAJOR_VERSION,
                              CUDNN_FRONTEND_MINOR_VERSION, CUDNN_FRONTEND_PATCH_VERSION);
  info.library_dir = LADDER_CUDNN_LIBRARY_DIR;
  return info;
}

std::optional<std::string> cudnn_runtime_version() {
  return version_string(std::int64_t(cudnnGetVersion()));
}

#else
// ================================================================================================
// Built without cuDNN: one row that every problem refuses, saying how to enable it.
// ================================================================================================
#ifndef LADDER_CUDNN_MISSING
#define LADDER_CUDNN_MISSING "the build did not look for it"
#endif

namespace {

Step peers_step() {
  return attention_step(99, "peers", "Library peers, timed by the same harness")
      .add(attention_variant("cudnn", "cuDNN fused attention (not built: see the row's note)",
                             [](const AttentionArgs&, cudaStream_t) {
                               throw std::logic_error(
                                   cudnn_not_built_message(LADDER_CUDNN_MISSING));
                             })
               .for_dtypes({DType::F16, DType::BF16})  // so every problem gets the reason below
               .refuse_if([](const AttentionShape&) -> std::optional<std::string> {
                 return cudnn_not_built_message(LADDER_CUDNN_MISSING);
               })
               .as_peer());
}

}  // namespace

CudnnBuildInfo cudnn_build_info() {
  CudnnBuildInfo info;
  info.missing = LADDER_CUDNN_MISSING;
  return info;
}

std::optional<std::string> cudnn_runtime_version() { return std::nullopt; }

#endif

LADDER_REGISTER_STEP(peers_step());

}  // namespace ladder::peers
