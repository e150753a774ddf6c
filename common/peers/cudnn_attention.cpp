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
#include "common/peers/cudnn_common.hpp"  // checks, versions, the per-device handles
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

#ifdef LADDER_HAVE_CUDNN
// ================================================================================================
// Built with cuDNN
// ================================================================================================
namespace fe = cudnn_frontend;

namespace {

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
  set_attention_data_types(graph, key.dtype);
  const std::int64_t b = key.batch, h = key.heads, n = key.seqlen, d = key.head_dim;
  const std::vector<std::int64_t> dims = {b, h, n, d}, strides = bhnd_strides(h, n, d);
  auto input = [&](const char* name, std::int64_t uid) { return bhnd_tensor(graph, name, uid, b, h, n, d); };
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

  const std::int64_t workspace_bytes = plan_graph(graph, handle, key, "common/peers/cudnn_attention.cpp");
  built->workspace = DeviceBuffer<std::uint8_t>(std::size_t(workspace_bytes));
  return built;
}

// The graphs of the process. The handles' cache (common/peers/cudnn_common.hpp) is created first,
// so it is destroyed after this one: a graph's plans were made with its device's handle.
BuildOnceCache<CudnnGraphKey, CudnnGraph>& graphs() {
  cudnn_handles();
  static BuildOnceCache<CudnnGraphKey, CudnnGraph> cache;  // created by the first launch
  return cache;
}

// The launch: everything but execute() happens once per problem (see the top of the file). One
// graph's workspace serves all its executions, which the harness issues on one stream in order.
void launch_cudnn(const AttentionArgs& args, cudaStream_t stream, bool stats) {
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  const cudnnHandle_t handle = cudnn_handle(device);
  const CudnnGraphKey key = cudnn_graph_key(args.shape, args.softmax_scale, stats, device);
  CudnnGraph& g = graphs().get(key, [&] { return build_graph(handle, key); });

  LADDER_CUDNN_CHECK(cudnnSetStream(handle, stream));
  std::unordered_map<std::int64_t, void*> pack = {
      // cuDNN's variant pack is void* (the graph knows the type); it only reads Q, K, V.
      {kUidQ, const_cast<__half*>(args.q)},
      {kUidK, const_cast<__half*>(args.k)},
      {kUidV, const_cast<__half*>(args.v)},
      {kUidO, args.o},
  };
  if (stats) pack[kUidStats] = args.lse;
  check_fe(g.graph.execute(handle, pack, g.workspace.get()), "execute", CudnnStage::Execute, key,
           "common/peers/cudnn_attention.cpp");
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
  return cudnn_version_string(std::int64_t(cudnnGetVersion()));
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
