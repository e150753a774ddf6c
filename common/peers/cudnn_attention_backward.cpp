// cuDNN's fused attention backward through the cuDNN frontend's graph API, registered as the
// backward track's peer step (98 "backward_peers"). What the row is and how its graphs are keyed:
// cudnn_attention_backward.hpp. It is step 99's forward peer (cudnn_attention.cpp) turned around:
// the same handles, the same build-once cache, the same checks (cudnn_common.hpp).
//
// One launch is:
//   first launch for a problem:  build the SDPA backward graph (heuristics, plan compilation,
//                                workspace), cache it under its key, then execute it
//   every later launch:          look the graph up, set the stream, execute
// The harness's first launch of a variant is its untimed check run, and its timing loop warms up
// before the first timed repetition, so no build is ever inside a timed repetition.
#include "common/peers/cudnn_attention_backward.hpp"

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

CudnnBackwardKey cudnn_backward_key(const AttentionShape& shape, float softmax_scale, int device) {
  CudnnBackwardKey key;
  key.device = device;
  key.batch = shape.batch;
  key.heads = shape.heads;
  key.seqlen = shape.seqlen;
  key.head_dim = shape.head_dim;
  key.causal = shape.causal;
  key.dtype = shape.dtype;
  key.scale_bits = std::bit_cast<std::uint32_t>(softmax_scale);
  return key;
}

std::string to_string(const CudnnBackwardKey& key) {
  return fmt::format("backward B={} H={} N={} D={} {} {}, scale {}, device {}", key.batch, key.heads,
                     key.seqlen, key.head_dim, key.causal ? "causal" : "non-causal",
                     dtype_name(key.dtype), std::bit_cast<float>(key.scale_bits), key.device);
}

namespace {
constexpr const char* kTitle = "cuDNN's fused attention backward (a library row)";
}  // namespace

#ifdef LADDER_HAVE_CUDNN
// ================================================================================================
// Built with cuDNN
// ================================================================================================
namespace fe = cudnn_frontend;

namespace {

constexpr const char* kSource = "common/peers/cudnn_attention_backward.cpp";

// The tensors' ids in the graph: the variant pack binds device pointers to them at each execution.
enum TensorUid : std::int64_t { kUidQ = 1, kUidK, kUidV, kUidO, kUidDO, kUidStats, kUidDQ, kUidDK, kUidDV };

// A built graph and the workspace its plan needs (owned here, so freed with the graph). The
// workspace holds the frontend's fp32 dQ accumulator and D = rowsum(dO * O) ("softmax_sum"); the
// frontend zeroes what needs zeroing inside execute(), on the stream, so a launch needs nothing
// from the harness's workspace.
struct CudnnBackwardGraph {
  fe::graph::Graph graph;
  DeviceBuffer<std::uint8_t> workspace;
};

std::unique_ptr<CudnnBackwardGraph> build_graph(cudnnHandle_t handle, const CudnnBackwardKey& key) {
  auto built = std::make_unique<CudnnBackwardGraph>();
  fe::graph::Graph& graph = built->graph;
  set_attention_data_types(graph, key.dtype);
  const std::int64_t b = key.batch, h = key.heads, n = key.seqlen, d = key.head_dim;
  const std::vector<std::int64_t> dims = {b, h, n, d}, strides = bhnd_strides(h, n, d);
  auto input = [&](const char* name, std::int64_t uid) { return bhnd_tensor(graph, name, uid, b, h, n, d); };
  auto q = input("Q", kUidQ);
  auto k = input("K", kUidK);
  auto v = input("V", kUidV);
  auto o = input("O", kUidO);
  auto d_o = input("dO", kUidDO);
  // The forward's log-sum-exp, which cuDNN calls stats: [B, H, N, 1] fp32, the natural log of the
  // sum of exp(scale * S) over a row; the harness's [B, H, N] is the same memory.
  auto stats = graph.tensor(fe::graph::Tensor_attributes()
                                .set_name("Stats")
                                .set_uid(kUidStats)
                                .set_data_type(fe::DataType_t::FLOAT)
                                .set_dim({b, h, n, 1})
                                .set_stride({h * n, n, 1, 1}));

  auto options = fe::graph::SDPA_backward_attributes()
                     .set_name("sdpa_backward")
                     .set_attn_scale(std::bit_cast<float>(key.scale_bits));
  // The harness's causal mask: key j visible to query i when j <= i, the diagonal through the top
  // left corner (for N_q = N_kv, the only case here, top left and bottom right coincide).
  if (key.causal)
    options.set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT).set_diagonal_band_right_bound(0);
  auto [dq, dk, dv] = graph.sdpa_backward(q, k, v, o, d_o, stats, std::move(options));
  dq->set_output(true).set_uid(kUidDQ).set_dim(dims).set_stride(strides);
  dk->set_output(true).set_uid(kUidDK).set_dim(dims).set_stride(strides);
  dv->set_output(true).set_uid(kUidDV).set_dim(dims).set_stride(strides);

  const std::int64_t workspace_bytes = plan_graph(graph, handle, key, kSource);
  built->workspace = DeviceBuffer<std::uint8_t>(std::size_t(workspace_bytes));
  return built;
}

// The backward graphs of the process. The handles' cache (cudnn_common.hpp) is created first, so it
// is destroyed after this one: a graph's plans were made with its device's handle.
BuildOnceCache<CudnnBackwardKey, CudnnBackwardGraph>& graphs() {
  cudnn_handles();
  static BuildOnceCache<CudnnBackwardKey, CudnnBackwardGraph> cache;  // created by the first launch
  return cache;
}

// The launch: everything but execute() happens once per problem (see the top of the file). One
// graph's workspace serves all its executions, which the harness issues on one stream in order.
void launch_cudnn_backward(const BackwardArgs& args, cudaStream_t stream) {
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  const cudnnHandle_t handle = cudnn_handle(device);
  const CudnnBackwardKey key = cudnn_backward_key(args.shape, args.softmax_scale, device);
  CudnnBackwardGraph& g = graphs().get(key, [&] { return build_graph(handle, key); });

  LADDER_CUDNN_CHECK(cudnnSetStream(handle, stream));
  // cuDNN's variant pack is void* (the graph knows the types); it only reads the inputs.
  auto in = [](const void* p) { return const_cast<void*>(p); };
  std::unordered_map<std::int64_t, void*> pack = {
      {kUidQ, in(args.q)},   {kUidK, in(args.k)},   {kUidV, in(args.v)},
      {kUidO, in(args.o)},   {kUidDO, in(args.d_o)}, {kUidStats, in(args.lse)},
      {kUidDQ, args.dq},     {kUidDK, args.dk},     {kUidDV, args.dv},
  };
  check_fe(g.graph.execute(handle, pack, g.workspace.get()), "execute", CudnnStage::Execute, key,
           kSource);
}

Step backward_peers_step() {
  const std::string built_with =
      fmt::format("cuDNN {}.{}.{} headers, frontend {}.{}.{}", CUDNN_MAJOR, CUDNN_MINOR,
                  CUDNN_PATCHLEVEL, CUDNN_FRONTEND_MAJOR_VERSION, CUDNN_FRONTEND_MINOR_VERSION,
                  CUDNN_FRONTEND_PATCH_VERSION);
  return backward_step(98, "backward_peers", kTitle)
      .add(backward_variant("cudnn",
                            "cuDNN fused attention backward (frontend SDPA backward graph, " +
                                built_with + "): dQ, dK, dV from Q, K, V, O, dO and the stats; "
                                "fp16 or bf16 in/out, fp32 inside",
                            launch_cudnn_backward)
               .needs_sm(80)
               .for_head_dims({64, 128})
               .for_dtypes({DType::F16, DType::BF16})
               // cuDNN's default algorithm (set_deterministic_algorithm not asked): dQ_accum, fp32 in
               // the workspace, gathers each key block's share with float atomics.
               .nondeterministic()
               .as_peer());
}

}  // namespace

#else
// ================================================================================================
// Built without cuDNN: one row that every problem refuses, saying how to enable it.
// ================================================================================================
#ifndef LADDER_CUDNN_MISSING
#define LADDER_CUDNN_MISSING "the build did not look for it"
#endif

namespace {

Step backward_peers_step() {
  return backward_step(98, "backward_peers", kTitle)
      .add(backward_variant("cudnn", "cuDNN fused attention backward (not built: see the row's note)",
                            [](const BackwardArgs&, cudaStream_t) {
                              throw std::logic_error(cudnn_not_built_message(LADDER_CUDNN_MISSING));
                            })
               .for_dtypes({DType::F16, DType::BF16})  // so every problem gets the reason below
               .refuse_if([](const AttentionShape&) -> std::optional<std::string> {
                 return cudnn_not_built_message(LADDER_CUDNN_MISSING);
               })
               .as_peer());
}

}  // namespace

#endif

LADDER_REGISTER_STEP(backward_peers_step());

}  // namespace ladder::peers
