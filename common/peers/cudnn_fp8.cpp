// 99/cudnn_fp8: cuDNN's FP8 forward attention through the frontend's sdpa_fp8 graph. What the row
// is, its scales and why: cudnn_fp8.hpp. Added to step 99 by cudnn_attention.cpp.
//
// One launch is, like 99/cudnn's (cudnn_attention.cpp):
//   first launch for a problem:  build the graph (heuristics, plans, workspace) and this row's own
//                                buffers, cache them under the problem's key, upload the scales
//                                (again only when a later problem's descales differ), execute
//   every later launch:          look the graph up, set the stream, execute
// cuDNN writes O in e4m3 into the row's buffer (o8), never into the harness's O. The widening of
// o8 into the harness's bf16 O (cudnn_fp8_widen.cu) is not cuDNN's work, so it runs in the
// harness's untimed hook (Variant::untimed_after_launch: the runner calls it after a launch, before
// it reads O back, never inside a timed repetition).
//
// The poison: the harness poisons its bf16 O, which only the widening writes, so the row keeps a
// poison of its own in o8: every byte 0xFF (e4m3 NaN) when allocated and again after each
// widening. A byte cuDNN did not write is widened to NaN, which the harness's check counts.
#include "common/peers/cudnn_fp8.hpp"

#include <fmt/format.h>

#include <array>
#include <bit>
#include <cmath>
#include <initializer_list>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

#include "common/dtype.hpp"
#include "common/peers/cudnn_attention.hpp"

#ifdef LADDER_HAVE_CUDNN
#include <memory>
#include <unordered_map>
#include <vector>

#include "common/check.hpp"
#include "common/device_buffer.hpp"
#include "common/peers/cudnn_common.hpp"     // checks, versions, plan_graph, the handles
#include "common/peers/cudnn_fp8_widen.hpp"  // the widening kernel
#endif

namespace ladder::peers {

namespace {

bool positive_power_of_two(float x) {
  if (!(x > 0.0f) || !std::isfinite(x)) return false;
  int exponent = 0;
  return std::frexp(x, &exponent) == 0.5f;
}

// fp8 problems are dense self-attention (validate_fp8, common/problem.cpp): GQA is the one Part VI
// property they may have, and cuDNN's FP8 graph takes K and V of Hkv heads. Not Feature::HeadScales:
// sdpa_fp8's descale_q, descale_k and descale_v are scalar tensors (1, 1, 1, 1), so a problem with
// one descale per (batch, head) is refused ("does not handle per-head fp8 descales"), built or not.
constexpr std::initializer_list<Feature> kFp8Features = {Feature::Gqa};

}  // namespace

CudnnFp8Scales cudnn_fp8_scales(float q_descale, float k_descale, float v_descale) {
  const std::array<std::pair<const char*, float>, 3> given = {
      {{"q_descale", q_descale}, {"k_descale", k_descale}, {"v_descale", v_descale}}};
  for (const auto& [name, x] : given)
    if (!positive_power_of_two(x))
      throw std::invalid_argument(fmt::format(
          "cuDNN FP8 peer: {} = {} is not a positive power of two (common/dtype.hpp's quantization "
          "gives one, and AttentionArgs carries it)", name, x));
  CudnnFp8Scales s;
  s.descale_q = q_descale;
  s.descale_k = k_descale;
  s.descale_v = v_descale;
  s.scale_s = kCudnnFp8ScaleS;
  s.descale_s = 1.0f / kCudnnFp8ScaleS;
  s.scale_o = 1.0f / (kCudnnFp8OHeadroom * v_descale);
  return s;
}

float cudnn_fp8_o_value(std::uint8_t byte, const CudnnFp8Scales& scales) {
  return from_e4m3(byte) * scales.o_descale();
}

#ifdef LADDER_HAVE_CUDNN
// ================================================================================================
// Built with cuDNN
// ================================================================================================
namespace fe = cudnn_frontend;

namespace {

constexpr const char* kSource = "common/peers/cudnn_fp8.cpp";

// The tensors' ids in the graph; the variant pack binds device pointers to them at each execution.
enum TensorUid : std::int64_t {
  kUidQ = 1, kUidK, kUidV, kUidO,
  kUidDescaleQ, kUidDescaleK, kUidDescaleV, kUidDescaleS, kUidScaleS, kUidScaleO,  // inputs
  kUidAmaxS, kUidAmaxO,                                                              // outputs
};
constexpr int kScaleCount = 6;          // descale q, k, v, s; scale s, o: in this order in `scales`
constexpr int kAmaxCount = 2;           // amax S, amax O
constexpr std::size_t kSlotFloats = 4;  // each scalar on 16 bytes of its own

// A built graph, its workspace and the row's own device memory.
struct CudnnFp8Graph {
  fe::graph::Graph graph;
  DeviceBuffer<std::uint8_t> workspace;
  DeviceBuffer<std::uint8_t> o8;    // cuDNN's e4m3 O, [B, H, N, D]; 0xFF wherever not yet written
  DeviceBuffer<float> scales;       // kScaleCount slots of kSlotFloats
  DeviceBuffer<float> amax;         // kAmaxCount slots (cuDNN writes them; nothing reads them)
  std::optional<CudnnFp8Scales> uploaded;  // what `scales` holds
  std::int64_t elements = 0;        // of O

  float* scale_slot(int i) const { return scales.get() + std::size_t(i) * kSlotFloats; }
  float* amax_slot(int i) const { return amax.get() + std::size_t(i) * kSlotFloats; }
};

void poison(DeviceBuffer<std::uint8_t>& buffer) {  // at set-up, and waits for it, like zero()
  if (buffer.size() == 0) return;
  CUDA_CHECK(cudaMemset(buffer.get(), 0xFF, buffer.bytes()));
  CUDA_CHECK(cudaDeviceSynchronize());
}

std::unique_ptr<CudnnFp8Graph> build_graph(cudnnHandle_t handle, const CudnnGraphKey& key) {
  if (key.varlen() || key.paged() || key.kv_seqlen != key.seqlen)
    throw std::logic_error(fmt::format("cuDNN FP8 peer: {} is not dense self-attention, which every "
                                       "fp8 problem is (validate_fp8)", to_string(key)));
  auto built = std::make_unique<CudnnFp8Graph>();
  fe::graph::Graph& graph = built->graph;
  graph.set_io_data_type(fe::DataType_t::FP8_E4M3)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  const std::int64_t b = key.batch, h = key.heads, hk = key.kv_heads, n = key.seqlen, d = key.head_dim;

  auto q = bhnd_tensor(graph, "Q", kUidQ, b, h, n, d);
  auto k = bhnd_tensor(graph, "K", kUidK, b, hk, n, d);  // GQA: Hkv heads
  auto v = bhnd_tensor(graph, "V", kUidV, b, hk, n, d);
  auto scalar = [&](const char* name, std::int64_t uid) {
    return graph.tensor(fe::graph::Tensor_attributes()
                            .set_name(name)
                            .set_uid(uid)
                            .set_dim({1, 1, 1, 1})
                            .set_stride({1, 1, 1, 1})
                            .set_data_type(fe::DataType_t::FLOAT));
  };
  auto descale_q = scalar("Descale_Q", kUidDescaleQ);
  auto descale_k = scalar("Descale_K", kUidDescaleK);
  auto descale_v = scalar("Descale_V", kUidDescaleV);
  auto descale_s = scalar("Descale_S", kUidDescaleS);
  auto scale_s = scalar("Scale_S", kUidScaleS);
  auto scale_o = scalar("Scale_O", kUidScaleO);

  auto options = fe::graph::SDPA_fp8_attributes()
                     .set_name("sdpa_fp8_forward")
                     .set_generate_stats(false)  // inference: O only
                     .set_attn_scale(std::bit_cast<float>(key.scale_bits))
                     // top left, the harness's mask: an fp8 problem has as many keys as queries
                     .set_causal_mask(key.causal);

  // Describing the node already asks the frontend which implementation serves it (sdpa_internal,
  // graph_interface.h), which throws when none does: cuDNN's refusal, in its words.
  std::array<std::shared_ptr<fe::graph::Tensor_attributes>, 4> outputs;
  try {
    outputs = graph.sdpa_fp8(q, k, v, descale_q, descale_k, descale_v, descale_s, scale_s, scale_o,
                             std::move(options));
  } catch (const std::exception& e) {
    throw LibraryRefusal(fmt::format("cuDNN frontend: sdpa_fp8 failed for {}: {}. {}", to_string(key),
                                     e.what(), cudnn_versions()));
  }
  const auto& [o, stats, amax_s, amax_o] = outputs;
  if (stats || !o || !amax_s || !amax_o)
    throw std::logic_error(fmt::format("cuDNN FP8 peer: the graph for {} has {} (a bug in {}, or the "
                                       "frontend's sdpa_fp8 changed)", to_string(key),
                                       stats ? "a stats output it was not asked for" : "no O or amax outputs",
                                       kSource));
  o->set_output(true)
      .set_uid(kUidO)
      .set_dim({b, h, n, d})
      .set_stride(bhnd_strides(h, n, d))
      .set_data_type(fe::DataType_t::FP8_E4M3);  // Hopper: the only O type cuDNN's FP8 graph has
  amax_s->set_output(true).set_uid(kUidAmaxS);
  amax_o->set_output(true).set_uid(kUidAmaxO);
  for (const auto& amax : {amax_s, amax_o})
    amax->set_dim({1, 1, 1, 1}).set_stride({1, 1, 1, 1}).set_data_type(fe::DataType_t::FLOAT);

  const std::int64_t workspace_bytes = plan_graph(graph, handle, key, kSource);
  built->workspace = DeviceBuffer<std::uint8_t>(std::size_t(workspace_bytes));
  built->elements = b * h * n * d;
  built->o8 = DeviceBuffer<std::uint8_t>(std::size_t(built->elements));
  poison(built->o8);
  built->scales = DeviceBuffer<float>(kScaleCount * kSlotFloats);
  built->amax = DeviceBuffer<float>(kAmaxCount * kSlotFloats);
  return built;
}

// The graphs of the process, created after the handles' cache (so destroyed before it), as 99/cudnn's.
BuildOnceCache<CudnnGraphKey, CudnnFp8Graph>& graphs() {
  cudnn_handles();
  static BuildOnceCache<CudnnGraphKey, CudnnFp8Graph> cache;
  return cache;
}

int current_device() {
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  return device;
}

// The graph of a problem on `device`, built on its first launch (or found); `key` is set to its key.
CudnnFp8Graph& graph_for(const AttentionArgs& args, int device, CudnnGraphKey& key) {
  const cudnnHandle_t handle = cudnn_handle(device);
  key = cudnn_graph_key(args.shape, args.softmax_scale, false, device);
  return graphs().get(key, [&] { return build_graph(handle, key); });
}

// o8 into the harness's bf16 O, then o8 poisoned again (cudnn_fp8_widen.hpp).
void widen(const AttentionArgs& args, cudaStream_t stream, CudnnFp8Graph& g) {
  const CudnnFp8Scales scales = cudnn_fp8_scales(args.q_descale, args.k_descale, args.v_descale);
  launch_widen_e4m3_to_bf16(g.o8.get(), args.as_fp8().o, g.elements, scales.o_descale(), stream);
}

// The launch: cuDNN's graph execution (and, on a problem's first launch, everything before it).
void launch_cudnn_fp8(const AttentionArgs& args, cudaStream_t stream) {
  const auto t = args.as_fp8();  // throws for a problem that is not fp8
  // The row does not serve Feature::HeadScales, so the harness never launches it on such a problem;
  // a caller that did would get the scalar descales (1) and a wrong O, so it is stopped here.
  if (args.shape.head_scales || args.q_head_descale || args.k_head_descale || args.v_head_descale)
    throw std::logic_error("cuDNN FP8 peer: launched with per-head descales, which sdpa_fp8 does not "
                           "take (its descales are scalars); run the problem with --fp8-scales tensor");
  const int device = current_device();
  CudnnGraphKey key;
  CudnnFp8Graph& g = graph_for(args, device, key);
  const cudnnHandle_t handle = cudnn_handle(device);

  // The scales live on the device. They change only with a problem's descales, so only its first
  // launch (the harness's untimed check run) uploads them; upload() waits for the device, so no
  // execution still reading the old ones is overtaken.
  const CudnnFp8Scales scales = cudnn_fp8_scales(args.q_descale, args.k_descale, args.v_descale);
  if (g.uploaded != scales) {
    const std::array<float, kScaleCount> values = {scales.descale_q, scales.descale_k, scales.descale_v,
                                                   scales.descale_s, scales.scale_s,   scales.scale_o};
    std::vector<float> host(kScaleCount * kSlotFloats, 0.0f);
    for (int i = 0; i < kScaleCount; ++i) host[std::size_t(i) * kSlotFloats] = values[std::size_t(i)];
    g.scales.upload(host);
    g.uploaded = scales;
  }

  LADDER_CUDNN_CHECK(cudnnSetStream(handle, stream));
  std::unordered_map<std::int64_t, void*> pack = {
      // cuDNN's variant pack is void* (the graph knows the types); it only reads Q, K, V, the scales.
      {kUidQ, const_cast<std::uint8_t*>(t.q)},
      {kUidK, const_cast<std::uint8_t*>(t.k)},
      {kUidV, const_cast<std::uint8_t*>(t.v)},
      {kUidO, g.o8.get()},
      {kUidDescaleQ, g.scale_slot(0)},
      {kUidDescaleK, g.scale_slot(1)},
      {kUidDescaleV, g.scale_slot(2)},
      {kUidDescaleS, g.scale_slot(3)},
      {kUidScaleS, g.scale_slot(4)},
      {kUidScaleO, g.scale_slot(5)},
      {kUidAmaxS, g.amax_slot(0)},
      {kUidAmaxO, g.amax_slot(1)},
  };
  check_fe(g.graph.execute(handle, pack, g.workspace.get()), "execute", CudnnStage::Execute, key, kSource);
}

// After a launch, untimed (the harness's hook): the widening. The graph is the launch's (a harness
// that called this without a launch would have it built here, and widen o8's poison: NaN).
void after_launch_cudnn_fp8(const AttentionArgs& args, cudaStream_t stream) {
  CudnnGraphKey key;
  widen(args, stream, graph_for(args, current_device(), key));
}

}  // namespace

Variant cudnn_fp8_variant() {
  const std::string built_with =
      fmt::format("cuDNN {}.{}.{} headers, frontend {}.{}.{}", CUDNN_MAJOR, CUDNN_MINOR,
                  CUDNN_PATCHLEVEL, CUDNN_FRONTEND_MAJOR_VERSION, CUDNN_FRONTEND_MINOR_VERSION,
                  CUDNN_FRONTEND_PATCH_VERSION);
  Variant v =
      attention_variant(
          "cudnn_fp8",
          fmt::format("cuDNN FP8 attention (frontend sdpa_fp8 graph, {}): e4m3 Q, K, V with their "
                      "descales, fp32 softmax and accumulation, P scaled by 2^8 into e4m3, O written "
                      "in e4m3 (Hopper's only FP8 output) and widened to bf16 after the timed launch",
                      built_with),
          launch_cudnn_fp8)
          .needs_sm(90)  // cuDNN's FP8 SDPA: Hopper and newer
          .for_head_dims({64, 128})
          .for_dtypes({DType::E4M3})
          .serves(kFp8Features)
          .approximate_because(kCudnnFp8Approximate)
          // Seen on an H100 (2026-12-07, gpu_large: B=2 H=9 N=4224 D=128 causal, cuDNN 9.19): one
          // rerun's O differed from the checked run's, while three later runs of that problem
          // were identical; the row widens O elementwise in stream order, so the difference is
          // cuDNN's. Like the bf16 rows above, its reruns are reported, not required identical.
          .nondeterministic()
          .as_peer()
          .untimed_after_launch(after_launch_cudnn_fp8);
  return v;
}

#else
// ================================================================================================
// Built without cuDNN: the row refuses every problem, saying how to enable it (as 99/cudnn does).
// ================================================================================================
#ifndef LADDER_CUDNN_MISSING
#define LADDER_CUDNN_MISSING "the build did not look for it"
#endif

Variant cudnn_fp8_variant() {
  return attention_variant("cudnn_fp8", "cuDNN FP8 attention (not built: see the row's note)",
                           [](const AttentionArgs&, cudaStream_t) {
                             throw std::logic_error(cudnn_not_built_message(LADDER_CUDNN_MISSING));
                           })
      .for_dtypes({DType::E4M3})  // so that every fp8 problem gets the reason below
      .serves(kFp8Features)
      .refuse_if([](const AttentionShape&) -> std::optional<std::string> {
        return cudnn_not_built_message(LADDER_CUDNN_MISSING);
      })
      .as_peer();
}

#endif

}  // namespace ladder::peers
