// The backward attention problem (Part V): dQ, dK and dV of a dense problem, each gradient
// checked against the fp64 reference.
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>

#include "common/compare.hpp"
#include "common/device_buffer.hpp"
#include "common/npy.hpp"
#include "common/random.hpp"
#include "common/reference.hpp"
#include "common/reference_cache.hpp"
#include "common/reference_gpu.hpp"
#include "common/run_args.hpp"
#include "common/run_shared.hpp"

namespace ladder {
using namespace run_detail;
namespace {

// The GPU's fp64 forward (the backward's inputs and exact statistics) must agree with the CPU's
// fp64 forward on every sampled row, or no gradient it is used to judge means anything.
void check_gpu_forward(const AttentionShape& shape, const Tensor16& q, const Tensor16& k,
                       const Tensor16& v, const Tensor16& d_o, const BackwardStats& gpu,
                       std::span<const std::int64_t> rows) {
  KeyHash key;  // shared by the backward steps' test entries (common/reference_cache.hpp)
  key.shape(shape).values(rows).values(std::span<const float>(q.value)).values(std::span<const float>(k.value));
  key.values(std::span<const float>(v.value)).value(Precision::Fp64);
  const AttentionRows cpu = cached_reference(key.get(), [&] {
    return attention_reference(shape, q.value, k.value, v.value, rows, Precision::Fp64);
  });
  const int d = shape.head_dim;
  for (std::size_t r = 0; r < rows.size(); ++r) {
    const std::size_t row = std::size_t(rows[r]);
    double delta = 0.0, magnitude = 0.0;
    for (int t = 0; t < d; ++t) {
      delta += double(d_o.value[row * d + t]) * cpu.o[r * d + t];
      magnitude += std::fabs(double(d_o.value[row * d + t]) * cpu.o[r * d + t]);
    }
    const bool lse_ok = std::fabs(cpu.lse[r] - gpu.lse[row]) <= 1e-9 * std::max(1.0, std::fabs(cpu.lse[r]));
    const bool delta_ok = std::fabs(delta - gpu.delta[row]) <= 1e-9 * (1.0 + magnitude);
    if (!lse_ok || !delta_ok)
      throw std::logic_error(fmt::format(
          "the fp64 forward on the GPU (common/reference_gpu.cu) disagrees with the CPU's at row {} "
          "of {}: LSE {} vs {}, D {} vs {}; the backward's reference cannot be trusted",
          row, shape.to_string(), gpu.lse[row], cpu.lse[r], gpu.delta[row], delta));
  }
}

// The gradient whose check fails, or the one nearest its tolerance: what the table's error
// columns show for a backward row.
ErrorStats worst_gradient(const std::vector<std::pair<std::string, ErrorStats>>& errors) {
  auto badness = [](const ErrorStats& e) {
    if (!e.pass) return INFINITY;
    return e.tolerance > 0 ? float(e.worst_error / e.tolerance) : 0.f;
  };
  const ErrorStats* worst = &errors.front().second;
  for (const auto& [name, e] : errors)
    if (badness(e) > badness(*worst)) worst = &e;
  return *worst;
}

// The problem's memory, checked before anything is allocated.
void ensure_backward_fits(const Session& session, const AttentionShape& shape,
                          std::span<const VariantRef> variants) {
  const std::size_t elements = std::size_t(shape.elements());
  // Q, K, V, O, dO in and dQ, dK, dV out (16-bit), the stored LSE (fp32) and the exact statistics
  // (two doubles a row).
  ensure_fits(8 * elements * sizeof(std::uint16_t) +
                  std::size_t(shape.rows()) * (sizeof(float) + 2 * sizeof(double)) +
                  2 * session.gpu.l2_bytes,
              "Q, K, V, O, dO, dQ, dK, dV and the row statistics");
  // Host: Q, K, V, dO and O as 16-bit and widened (6 bytes an element each), and the three
  // gradients as 16-bit and widened: the checked ones, their rerun and every kept baseline.
  ensure_host_fits(elements * (5 * 6 + 3 * 6 * (2 + baselines_needed(variants, &shape).size())),
                   "Q, K, V, dO, O and the gradients kept for comparison");
}

// The seeded inputs on the host and on the device, the forward the backward starts from (O and
// the LSE as a forward stores them, and the exact statistics for the fp64 reference), and the
// gradients' buffers every variant writes.
struct BackwardBuffers {
  BackwardBuffers(Session& session, const AttentionShape& shape, const RunOptions& options)
      : q(random_tensor16(std::size_t(shape.elements()), options.seed, kStreamQ, shape.dtype, options.q_scale)),
        k(random_tensor16(std::size_t(shape.elements()), options.seed, kStreamK, shape.dtype, options.k_scale)),
        v(random_tensor16(std::size_t(shape.elements()), options.seed, kStreamV, shape.dtype)),
        d_o(random_tensor16(std::size_t(shape.elements()), options.seed, kStreamDO, shape.dtype)),
        dev_q(q.bits.size()), dev_k(q.bits.size()), dev_v(q.bits.size()), dev_do(q.bits.size()),
        dev_o(q.bits.size()), dev_dq(q.bits.size()), dev_dk(q.bits.size()), dev_dv(q.bits.size()),
        dev_lse(std::size_t(shape.rows())) {
    dev_q.upload(q.bits);
    dev_k.upload(k.bits);
    dev_v.upload(v.bits);
    dev_do.upload(d_o.bits);
    DeviceBuffer<double> dev_lse64(dev_lse.size()), dev_delta64(dev_lse.size());
    forward_for_backward_gpu(shape, dev_q.get(), dev_k.get(), dev_v.get(), dev_do.get(),
                             {dev_o.get(), dev_lse.get(), dev_lse64.get(), dev_delta64.get()},
                             session.stream.get());
    session.stream.synchronize();
    o_stored = widen(shape.dtype, dev_o.download());
    lse_stored = dev_lse.download();
    stats64 = {dev_lse64.download(), dev_delta64.download()};
  }
  Tensor16 q, k, v, d_o;
  DeviceBuffer<std::uint16_t> dev_q, dev_k, dev_v, dev_do, dev_o, dev_dq, dev_dk, dev_dv;
  DeviceBuffer<float> dev_lse;
  BackwardStats stats64;
  std::vector<float> o_stored, lse_stored;
};

struct BackwardReferences {
  BackwardRows fp64, low;
};

// The references of a sample of dQ rows and of dK/dV rows, at fp64 and at the element type's
// precision (the latter from the stored forward, as a kernel sees it).
BackwardReferences backward_references(const AttentionShape& shape, const BackwardBuffers& in,
                                       const RunOptions& options) {
  // A gradient row costs about four D-long dot products per key (or query) it sums over; the
  // budget is shared by the dQ rows and the dK/dV rows.
  const double work = 4.0 * shape.seqlen * shape.head_dim * 2;
  const std::int64_t budget = std::max<std::int64_t>(16, reference_rows(options, work) / 2);
  const auto q_rows = select_rows(shape.rows(), shape.seqlen, budget, options.seed);
  const auto k_rows = select_rows(shape.rows(), shape.seqlen, budget, options.seed + 1);
  check_gpu_forward(shape, in.q, in.k, in.v, in.d_o, in.stats64, q_rows);
  const BackwardInputs inputs{in.q.value, in.k.value, in.v.value, in.d_o.value};
  KeyHash key;  // every input of both references (common/reference_cache.hpp)
  key.shape(shape).values(std::span<const std::int64_t>(q_rows)).values(std::span<const std::int64_t>(k_rows));
  for (const auto& t : {inputs.q, inputs.k, inputs.v, inputs.d_o}) key.values(t);
  key.values(std::span<const double>(in.stats64.lse)).values(std::span<const double>(in.stats64.delta));
  key.values(std::span<const float>(in.o_stored)).values(std::span<const float>(in.lse_stored));
  BackwardReferences refs;
  refs.fp64 = cached_reference(KeyHash(key).value(Precision::Fp64).get(), [&] {
    return backward_reference(shape, inputs, in.stats64, q_rows, k_rows, Precision::Fp64);
  });
  refs.low = cached_reference(KeyHash(key).value(Precision::Low).get(), [&] {
    return backward_reference(shape, inputs,
                              backward_stats_low(shape, in.o_stored, in.d_o.value, in.lse_stored),
                              q_rows, k_rows, Precision::Low);
  });
  return refs;
}

std::vector<std::int64_t> backward_dims(const AttentionShape& s) {
  return {s.batch, s.heads, s.seqlen, s.head_dim};
}

// --save: the inputs and the forward's O and LSE, in `dir`.
void save_backward_inputs(const std::string& dir, const AttentionShape& shape, const BackwardBuffers& in) {
  const DType dtype = shape.dtype;
  const std::vector<std::int64_t> dims = backward_dims(shape);
  write_npy16(dir + "/q.npy", dtype, dims, in.q.bits);
  write_npy16(dir + "/k.npy", dtype, dims, in.k.bits);
  write_npy16(dir + "/v.npy", dtype, dims, in.v.bits);
  write_npy16(dir + "/do.npy", dtype, dims, in.d_o.bits);
  write_npy16(dir + "/o.npy", dtype, dims, in.dev_o.download());
  write_npy(dir + "/lse.npy", "<f4", {shape.batch, shape.heads, shape.seqlen}, in.lse_stored.data(),
            in.lse_stored.size() * 4);
}

// What one variant's run needs of its problem.
struct BackwardProblem {
  Session& session;
  const AttentionShape& shape;
  int sm_count;
  BackwardBuffers& buffers;
  const BackwardReferences& refs;
  const std::string& dir;  // --save's, or empty
};

// The hooks of one variant: poison the three gradients, launch on its own workspace, download
// them one after the other (dQ, dK, dV), check each against the references, save them. They
// outlive this function, so they capture the problem's objects (through p), never its locals.
VariantHooks backward_hooks(const BackwardProblem& p, const VariantRef& ref) {
  const Variant& variant = ref.variant();
  const AttentionShape& shape = p.shape;
  BackwardBuffers& b = p.buffers;
  auto workspace = std::make_shared<DeviceBuffer<std::uint8_t>>(variant.workspace_bytes(shape));
  const BackwardArgs args =
      backward_args(shape, b.dev_q.get(), b.dev_k.get(), b.dev_v.get(), b.dev_o.get(), b.dev_do.get(),
                    b.dev_lse.get(), b.dev_dq.get(), b.dev_dk.get(), b.dev_dv.get(), workspace->get(),
                    {p.sm_count, p.session.gpu.l2_bytes});
  const auto launch = std::get<BackwardLaunch>(variant.launch);
  const std::size_t elements = std::size_t(shape.elements());

  VariantHooks hooks;
  hooks.poison = [&b = p.buffers, &session = p.session] {
    for (auto* g : {&b.dev_dq, &b.dev_dk, &b.dev_dv}) g->fill_bytes(kPoisonByte, session.stream.get());
  };
  hooks.launch = [args, launch, workspace](cudaStream_t s) { launch(args, s); };
  hooks.download = [&b = p.buffers, dtype = shape.dtype] {
    Output o;
    for (const auto* g : {&b.dev_dq, &b.dev_dk, &b.dev_dv}) {
      const auto bits = g->download();
      o.bits16.insert(o.bits16.end(), bits.begin(), bits.end());
    }
    o.values = widen(dtype, o.bits16);
    return o;
  };
  hooks.check = [&ref64 = p.refs.fp64, &reflow = p.refs.low, &shape = p.shape,
                 elements](Row& r, const Output& o) {
    const std::span<const float> all(o.values);
    const int d = shape.head_dim;
    r.gradient_errors = {
        {"dQ", check_gradient_output(all.subspan(0, elements), d, ref64.q_rows, ref64.dq, reflow.dq,
                                     ref64.dq_floor, shape.dtype)},
        {"dK", check_gradient_output(all.subspan(elements, elements), d, ref64.k_rows, ref64.dk,
                                     reflow.dk, ref64.dk_floor, shape.dtype)},
        {"dV", check_gradient_output(all.subspan(2 * elements, elements), d, ref64.k_rows, ref64.dv,
                                     reflow.dv, ref64.dv_floor, shape.dtype)}};
    r.error = worst_gradient(r.gradient_errors);
  };
  hooks.save = [&dir = p.dir, &shape = p.shape, elements, id = file_id(ref.id())](const Output& o) {
    const char* names[] = {"dq", "dk", "dv"};
    for (int g = 0; g < 3; ++g) {
      const std::vector<std::uint16_t> part(o.bits16.begin() + std::ptrdiff_t(g * elements),
                                            o.bits16.begin() + std::ptrdiff_t((g + 1) * elements));
      write_npy16(fmt::format("{}/{}_{}.npy", dir, names[g], id), shape.dtype, backward_dims(shape), part);
    }
  };
  return hooks;
}

}  // namespace

ProblemRun run_backward(Session& session, const AttentionShape& shape,
                        std::span<const VariantRef> variants, const RunOptions& options) {
  const int sm_count = launch_sm_count(session, options);  // before any work: a bad value is a usage error
  // Part V's backward is the dense problem's; Part VI's properties have no backward step yet.
  if (features_of(shape) != 0)
    throw UsageError(fmt::format("the backward track runs dense problems only (asked for {})",
                                 shape.to_string()));
  // A dense shape's JSON and --save name carry none of Part VI's keys (attention_shape_json).
  ProblemRun run = begin_run(Kind::Backward, shape, attention_shape_json(shape, options), variants);
  ensure_backward_fits(session, shape, variants);

  BackwardBuffers buffers(session, shape, options);
  const BackwardReferences refs =
      options.check ? backward_references(shape, buffers, options) : BackwardReferences{};
  const std::string dir = save_directory(options, attention_save_name("backward", shape));
  if (!dir.empty()) save_backward_inputs(dir, shape, buffers);
  const BackwardProblem problem{session, shape, sm_count, buffers, refs, dir};

  run_attention_rows(session, run, variants, shape, options, backward_flops(shape), backward_min_bytes(shape),
                     [&](const VariantRef& ref) { return backward_hooks(problem, ref); });
  add_gemm_ceiling(session, run, options);
  return run;
}

}  // namespace ladder
