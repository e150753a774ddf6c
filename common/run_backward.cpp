// The backward attention problem (Part V, and Part VI's GQA and variable-length batches): dQ, dK
// and dV, each gradient checked against the fp64 reference. Layouts as BackwardArgs gives them.
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

// The tensors' element counts: Q, O, dO and dQ; K, V, dK and dV (Hkv heads).
std::size_t q_elements(const AttentionShape& s) { return std::size_t(s.elements()); }
std::size_t kv_elements(const AttentionShape& s) { return std::size_t(s.kv_rows()) * s.head_dim; }

// The problem's memory, checked before anything is allocated.
void ensure_backward_fits(const Session& session, const AttentionShape& shape,
                          std::span<const VariantRef> variants) {
  const std::size_t nq = q_elements(shape), nkv = kv_elements(shape);
  // Q, O, dO in and dQ out, K, V in and dK, dV out (16-bit), the stored LSE (fp32), the exact
  // statistics (two doubles a row) and the prefix sums.
  ensure_fits((4 * nq + 4 * nkv) * sizeof(std::uint16_t) +
                  std::size_t(shape.rows()) * (sizeof(float) + 2 * sizeof(double)) +
                  2 * (std::size_t(shape.batch) + 1) * sizeof(int) + 2 * session.gpu.l2_bytes,
              "Q, K, V, O, dO, dQ, dK, dV and the row statistics");
  // Host: Q, dO, O, K and V as 16-bit and widened (6 bytes an element each), and the three
  // gradients as 16-bit and widened: the checked ones, their rerun and every kept baseline.
  ensure_host_fits((3 * nq + 2 * nkv) * 6 +
                       (nq + 2 * nkv) * 6 * (2 + baselines_needed(variants, &shape).size()),
                   "Q, K, V, dO, O and the gradients kept for comparison");
}

// The seeded inputs on the host and on the device, the forward the backward starts from (O and
// the LSE as a forward stores them, and the exact statistics for the fp64 reference), and the
// gradients' buffers every variant writes. Dense MHA draws K and V exactly as it always has.
struct BackwardBuffers {
  BackwardBuffers(Session& session, const AttentionShape& shape, const RunOptions& options)
      : q(random_tensor16(q_elements(shape), options.seed, kStreamQ, shape.dtype, options.q_scale)),
        k(random_tensor16(kv_elements(shape), options.seed, kStreamK, shape.dtype, options.k_scale)),
        v(random_tensor16(kv_elements(shape), options.seed, kStreamV, shape.dtype)),
        d_o(random_tensor16(q_elements(shape), options.seed, kStreamDO, shape.dtype)),
        index(shape),
        dev_q(q.bits.size()), dev_k(k.bits.size()), dev_v(k.bits.size()), dev_do(q.bits.size()),
        dev_o(q.bits.size()), dev_dq(q.bits.size()), dev_dk(k.bits.size()), dev_dv(k.bits.size()),
        dev_lse(std::size_t(shape.rows())),
        dev_cu_q(shape.varlen() ? index.cu_q.size() : 0), dev_cu_k(shape.varlen() ? index.cu_k.size() : 0) {
    dev_q.upload(q.bits);
    dev_k.upload(k.bits);
    dev_v.upload(v.bits);
    dev_do.upload(d_o.bits);
    if (shape.varlen()) {
      dev_cu_q.upload(index.cu_q);
      dev_cu_k.upload(index.cu_k);
    }
    DeviceBuffer<double> dev_lse64(dev_lse.size()), dev_delta64(dev_lse.size());
    forward_for_backward_gpu(shape, dev_q.get(), dev_k.get(), dev_v.get(), dev_do.get(),
                             {dev_o.get(), dev_lse.get(), dev_lse64.get(), dev_delta64.get()},
                             session.stream.get(), cu_q(), cu_k());
    session.stream.synchronize();
    o_stored = widen(shape.dtype, dev_o.download());
    lse_stored = dev_lse.download();
    stats64 = {dev_lse64.download(), dev_delta64.download()};
  }
  // The device prefix sums, or null for a dense problem.
  const int* cu_q() const { return dev_cu_q.size() ? dev_cu_q.get() : nullptr; }
  const int* cu_k() const { return dev_cu_k.size() ? dev_cu_k.get() : nullptr; }

  Tensor16 q, k, v, d_o;
  RowIndex index;
  DeviceBuffer<std::uint16_t> dev_q, dev_k, dev_v, dev_do, dev_o, dev_dq, dev_dk, dev_dv;
  DeviceBuffer<float> dev_lse;  // the LSE's layout (lse_index), as the forward writes it
  DeviceBuffer<int> dev_cu_q, dev_cu_k;  // varlen; empty otherwise
  BackwardStats stats64;  // by query row
  std::vector<float> o_stored, lse_stored;
};

struct BackwardReferences {
  BackwardRows fp64, low;
};

// The references of a sample of dQ rows (over every query row) and of dK/dV rows (over every key
// row, of every sequence), at fp64 and at the element type's precision (the latter from the
// stored forward, as a kernel sees it).
BackwardReferences backward_references(const AttentionShape& shape, const BackwardBuffers& in,
                                       const RunOptions& options) {
  // A gradient row costs about four D-long dot products per key (or query) it sums over; the
  // budget (in dQ rows' worth, both of its limits) is shared by the dQ rows and the dK/dV rows, and
  // a dK/dV row of GQA sums over its whole group's queries: it counts `group` dQ rows.
  const double work_q = 4.0 * shape.max_kv_len() * shape.head_dim * 2;
  const std::int64_t budget = reference_rows(options, work_q);
  const auto q_rows = select_attention_rows(shape, std::max<std::int64_t>(16, budget / 2), options.seed);
  const auto k_rows =
      select_key_rows(shape, std::max<std::int64_t>(16, budget / (2 * shape.group())), options.seed + 1);
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

// The tensors' dimensions as the layouts give them, for --save.
struct BackwardDims {
  explicit BackwardDims(const AttentionShape& s) {
    const std::int64_t B = s.batch, H = s.heads, Hkv = s.hkv(), D = s.head_dim;
    q = s.varlen() ? std::vector<std::int64_t>{s.total_q(), H, D} : std::vector<std::int64_t>{B, H, s.seqlen, D};
    kv = s.varlen() ? std::vector<std::int64_t>{s.total_k(), Hkv, D} : std::vector<std::int64_t>{B, Hkv, s.seqlen, D};
    lse = s.varlen() ? std::vector<std::int64_t>{H, s.total_q()} : std::vector<std::int64_t>{B, H, s.seqlen};
  }
  std::vector<std::int64_t> q, kv, lse;  // Q, O, dO, dQ; K, V, dK, dV; the LSE
};

// --save: the inputs and the forward's O and LSE (and a varlen batch's prefix sums), in `dir`.
void save_backward_inputs(const std::string& dir, const AttentionShape& shape, const BackwardBuffers& in,
                          const BackwardDims& dims) {
  const DType dtype = shape.dtype;
  write_npy16(dir + "/q.npy", dtype, dims.q, in.q.bits);
  write_npy16(dir + "/k.npy", dtype, dims.kv, in.k.bits);
  write_npy16(dir + "/v.npy", dtype, dims.kv, in.v.bits);
  write_npy16(dir + "/do.npy", dtype, dims.q, in.d_o.bits);
  write_npy16(dir + "/o.npy", dtype, dims.q, in.dev_o.download());
  write_npy(dir + "/lse.npy", "<f4", dims.lse, in.lse_stored.data(), in.lse_stored.size() * 4);
  if (shape.varlen()) {
    const std::int64_t n = shape.batch + 1;
    write_npy(dir + "/cu_seqlens_q.npy", "<i4", {n}, in.index.cu_q.data(), in.index.cu_q.size() * 4);
    write_npy(dir + "/cu_seqlens_k.npy", "<i4", {n}, in.index.cu_k.data(), in.index.cu_k.size() * 4);
  }
}

// What one variant's run needs of its problem.
struct BackwardProblem {
  Session& session;
  const AttentionShape& shape;
  int sm_count;
  BackwardBuffers& buffers;
  const BackwardReferences& refs;
  const BackwardDims& dims;
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
                    {p.sm_count, p.session.gpu.l2_bytes}, b.cu_q(), b.cu_k());
  const auto launch = std::get<BackwardLaunch>(variant.launch);
  const std::size_t nq = q_elements(shape), nkv = kv_elements(shape);

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
  hooks.check = [&ref64 = p.refs.fp64, &reflow = p.refs.low, &shape = p.shape, nq, nkv](Row& r, const Output& o) {
    const std::span<const float> all(o.values);
    const int d = shape.head_dim;
    r.gradient_errors = {
        {"dQ", check_gradient_output(all.subspan(0, nq), d, ref64.q_rows, ref64.dq, reflow.dq,
                                     ref64.dq_floor, shape.dtype)},
        {"dK", check_gradient_output(all.subspan(nq, nkv), d, ref64.k_rows, ref64.dk, reflow.dk,
                                     ref64.dk_floor, shape.dtype)},
        {"dV", check_gradient_output(all.subspan(nq + nkv, nkv), d, ref64.k_rows, ref64.dv,
                                     reflow.dv, ref64.dv_floor, shape.dtype)}};
    r.error = worst_gradient(r.gradient_errors);
  };
  hooks.save = [&dir = p.dir, &dims = p.dims, dtype = shape.dtype, nq, nkv, id = file_id(ref.id())](const Output& o) {
    const char* names[] = {"dq", "dk", "dv"};
    const std::size_t begin[] = {0, nq, nq + nkv}, size[] = {nq, nkv, nkv};
    for (int g = 0; g < 3; ++g) {
      const auto from = o.bits16.begin() + std::ptrdiff_t(begin[g]);
      const std::vector<std::uint16_t> part(from, from + std::ptrdiff_t(size[g]));
      write_npy16(fmt::format("{}/{}_{}.npy", dir, names[g], id), dtype, g == 0 ? dims.q : dims.kv, part);
    }
  };
  return hooks;
}

}  // namespace

ProblemRun run_backward(Session& session, const AttentionShape& shape,
                        std::span<const VariantRef> variants, const RunOptions& options) {
  const int sm_count = launch_sm_count(session, options);  // before any work: a bad value is a usage error
  // Dense, GQA and varlen self-attention; decode shapes and paged caches have no backward. A
  // variant that does not serve the shape's GQA or varlen is skipped with the reason (its
  // Constraints::refuse), as the forward's are.
  if (auto why = validate_backward(shape)) throw UsageError(*why);
  // A dense shape's JSON and --save name carry none of Part VI's keys (attention_shape_json).
  ProblemRun run = begin_run(Kind::Backward, shape, attention_shape_json(shape, options), variants);
  ensure_backward_fits(session, shape, variants);

  BackwardBuffers buffers(session, shape, options);
  const BackwardReferences refs =
      options.check ? backward_references(shape, buffers, options) : BackwardReferences{};
  const BackwardDims dims(shape);
  const std::string dir = save_directory(options, attention_save_name("backward", shape));
  if (!dir.empty()) save_backward_inputs(dir, shape, buffers, dims);
  const BackwardProblem problem{session, shape, sm_count, buffers, refs, dims, dir};

  run_attention_rows(session, run, variants, shape, options, backward_flops(shape), backward_min_bytes(shape),
                     [&](const VariantRef& ref) { return backward_hooks(problem, ref); });
  add_gemm_ceiling(session, run, options);
  return run;
}

}  // namespace ladder
