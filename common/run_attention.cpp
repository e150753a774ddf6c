// The forward attention problem: every layout of Parts I-VI (dense, GQA, decode, varlen, paged).
#include <cuda_fp16.h>

#include <algorithm>

#include "common/compare.hpp"
#include "common/device_buffer.hpp"
#include "common/npy.hpp"
#include "common/random.hpp"
#include "common/reference.hpp"
#include "common/reference_cache.hpp"
#include "common/run_args.hpp"
#include "common/run_shared.hpp"

namespace ladder {
using namespace run_detail;
namespace {

// Decode reads every byte of the cache to do a few FLOPs each: below this many FLOPs per byte
// a problem is bound by memory, and its table reports GB/s and the share of a device-to-device copy
// beside TFLOP/s. The H200's ridge is ~200 for wgmma (989 TFLOP/s / 4.8 TB/s) and ~130 for the
// mma.sync that the decode kernels use. In bf16 a decode does as many FLOPs a byte as a K/V head
// has packed rows (the group's heads × the query tokens): 4·rows·D FLOPs a key over 4·D bytes of
// K and V. So speculative decoding's 16 tokens at a GQA ratio of 5 (80 rows) is memory bound.
constexpr double kMemoryBoundFlopsPerByte = 128.0;

// The bandwidth yardstick of a memory-bound attention table: a device-to-device copy of as many
// bytes as the problem must read (at least 256 MiB, at most 2 GiB, so that it is neither an L2
// copy nor a problem of its own), timed the same way; its GB/s counts read and write.
void add_copy_ceiling(Session& session, ProblemRun& run, const AttentionShape& shape,
                      const RunOptions& options) {
  if (!options.time) return;
  const std::size_t bytes =
      std::clamp<std::size_t>(std::size_t(min_bytes(shape)), std::size_t(256) << 20, std::size_t(2) << 30);
  if (free_device_bytes() < 2 * bytes + kHeadroomBytes) {
    run.notes.push_back("no copy yardstick: not enough free device memory for it");
    return;
  }
  DeviceBuffer<std::uint8_t> from(bytes), to(bytes);
  from.fill_bytes(1, session.stream.get());
  Row copy;
  copy.id = "copy";
  copy.description = "cudaMemcpyAsync device to device (read + write counted): the bandwidth yardstick";
  copy.ceiling = true;
  copy.bytes = 2.0 * double(bytes);
  copy.timing = time_launch(
      [&](cudaStream_t s) {
        CUDA_CHECK(cudaMemcpyAsync(to.get(), from.get(), bytes, cudaMemcpyDeviceToDevice, s));
      },
      session.stream.get(), options.timing, session.flusher);
  const double copy_gbps = copy.gbps();
  for (Row& r : run.rows)
    if (r.timing && copy_gbps > 0) r.percent_of_copy = 100.0 * r.gbps() / copy_gbps;
  run.rows.push_back(std::move(copy));
}

// The tensors' element counts: Q and O; K and V as the reference reads them (unpaged); K and V
// as the kernels read them (paged: the pool).
std::size_t q_elements(const AttentionShape& s) { return std::size_t(s.elements()); }
std::size_t kv_logical(const AttentionShape& s) { return std::size_t(s.kv_rows()) * s.head_dim; }
std::size_t kv_stored(const AttentionShape& s) { return std::size_t(s.kv_elements()); }

// The problem's memory, checked before anything is allocated.
void ensure_attention_fits(const Session& session, const AttentionShape& shape,
                           std::span<const VariantRef> variants) {
  // Q, K, V and O hold 16-bit elements (fp16 or bf16), stored as their bits.
  ensure_fits((2 * q_elements(shape) + 2 * kv_stored(shape)) * sizeof(std::uint16_t) +
                  std::size_t(shape.rows()) * sizeof(float) + 2 * session.gpu.l2_bytes,
              "Q, K, V, O and the log-sum-exp");
  // Host: Q, K, V as 16-bit and widened (6 bytes an element each), a paged copy of K and V, and
  // outputs downloaded as 16-bit and widened (6 bytes an element): the one being checked, its
  // rerun, and every output a later row is compared with.
  ensure_host_fits(q_elements(shape) * 6 * (1 + 2 + baselines_needed(variants, &shape).size()) +
                       kv_logical(shape) * 12 + (shape.paged() ? kv_stored(shape) * 4 : 0),
                   "Q, K, V and the outputs kept for comparison");
}

// The seeded inputs on the host and on the device, and the output buffers every variant writes.
struct AttentionBuffers {
  AttentionBuffers(const AttentionShape& shape, const RunOptions& options)
      : q(random_tensor16(q_elements(shape), options.seed, kStreamQ, shape.dtype, options.q_scale)),
        k(random_tensor16(kv_logical(shape), options.seed, kStreamK, shape.dtype, options.k_scale)),
        v(random_tensor16(kv_logical(shape), options.seed, kStreamV, shape.dtype)),
        index(shape),
        dq(q_elements(shape)), dk(kv_stored(shape)), dv(kv_stored(shape)), dout(q_elements(shape)),
        dlse(std::size_t(shape.rows())),
        dcu_q(shape.varlen() ? shape.batch + 1 : 0), dcu_k(shape.varlen() ? shape.batch + 1 : 0),
        dtable(shape.paged() ? std::size_t(shape.batch) * shape.pages_per_seq() : 0) {
    dq.upload(q.bits);
    if (shape.paged()) {
      PagedCache cache = page_cache(shape, index, k.bits, v.bits, options.seed);
      dk.upload(cache.k);
      dv.upload(cache.v);
      dtable.upload(cache.block_table);
      block_table = std::move(cache.block_table);
    } else {
      dk.upload(k.bits);
      dv.upload(v.bits);
    }
    if (shape.varlen()) {
      dcu_q.upload(index.cu_q);
      dcu_k.upload(index.cu_k);
    }
  }
  Tensor16 q, k, v;  // K and V logical (unpaged)
  RowIndex index;
  DeviceBuffer<std::uint16_t> dq, dk, dv, dout;  // K and V as the layout stores them
  DeviceBuffer<float> dlse;
  DeviceBuffer<int> dcu_q, dcu_k, dtable;  // varlen, paged; empty otherwise
  std::vector<int> block_table;
};

struct AttentionReferences {
  AttentionRows fp64, low;
};

// The references of a sample of rows, at fp64 and at the element type's precision.
AttentionReferences attention_references(const AttentionShape& shape, const AttentionBuffers& in,
                                         const RunOptions& options) {
  AttentionReferences refs;
  const double work = double(shape.max_kv_len()) * shape.head_dim * 2;
  const auto selected = select_attention_rows(shape, reference_rows(options, work), options.seed);
  // The test suite's entries share these (common/reference_cache.hpp); the key is every input.
  KeyHash key;
  key.shape(shape).values(std::span<const std::int64_t>(selected));
  key.values(std::span<const float>(in.q.value)).values(std::span<const float>(in.k.value));
  key.values(std::span<const float>(in.v.value));
  for (const Precision p : {Precision::Fp64, Precision::Low})
    (p == Precision::Fp64 ? refs.fp64 : refs.low) = cached_reference(KeyHash(key).value(p).get(), [&] {
      return attention_reference(shape, in.q.value, in.k.value, in.v.value, selected, p);
    });
  return refs;
}

// The tensors' dimensions as the layouts give them (common/problem.hpp), for --save.
struct AttentionDims {
  explicit AttentionDims(const AttentionShape& s) {
    const std::int64_t B = s.batch, H = s.heads, Hkv = s.hkv(), D = s.head_dim;
    q = s.varlen() ? std::vector<std::int64_t>{s.total_q(), H, D} : std::vector<std::int64_t>{B, H, s.seqlen, D};
    kv = s.paged()    ? std::vector<std::int64_t>{s.num_pages(), Hkv, s.page_size, D}
         : s.varlen() ? std::vector<std::int64_t>{s.total_k(), Hkv, D}
                      : std::vector<std::int64_t>{B, Hkv, s.kv_len(0), D};
    lse = s.varlen() ? std::vector<std::int64_t>{H, s.total_q()} : std::vector<std::int64_t>{B, H, s.seqlen};
  }
  std::vector<std::int64_t> q, kv, lse;  // Q and O; K and V; the LSE
};

// --save: the inputs (a paged K and V as the pool the kernels read), in `dir`.
void save_attention_inputs(const std::string& dir, const AttentionShape& shape,
                           const AttentionBuffers& in, const AttentionDims& dims) {
  const DType dtype = shape.dtype;
  const std::int64_t B = shape.batch;
  write_npy16(dir + "/q.npy", dtype, dims.q, in.q.bits);
  write_npy16(dir + "/k.npy", dtype, dims.kv, shape.paged() ? in.dk.download() : in.k.bits);
  write_npy16(dir + "/v.npy", dtype, dims.kv, shape.paged() ? in.dv.download() : in.v.bits);
  if (shape.varlen()) {
    write_npy(dir + "/cu_seqlens_q.npy", "<i4", {B + 1}, in.index.cu_q.data(), in.index.cu_q.size() * 4);
    write_npy(dir + "/cu_seqlens_k.npy", "<i4", {B + 1}, in.index.cu_k.data(), in.index.cu_k.size() * 4);
  }
  if (shape.paged())
    write_npy(dir + "/block_table.npy", "<i4", {B, shape.pages_per_seq()}, in.block_table.data(),
              in.block_table.size() * 4);
}

// What one variant's run needs of its problem.
struct AttentionProblem {
  Session& session;
  const AttentionShape& shape;
  int sm_count;
  AttentionBuffers& buffers;
  const AttentionReferences& refs;
  const AttentionDims& dims;
  const std::string& dir;  // --save's, or empty
};

// The hooks of one variant: poison O and the LSE, launch on its own workspace, download O (and
// the LSE where it writes one), check both against the references, save them. They outlive this
// function, so they capture the problem's objects (through p), never its locals.
VariantHooks attention_hooks(const AttentionProblem& p, const VariantRef& ref) {
  const Variant& variant = ref.variant();
  const AttentionShape& shape = p.shape;
  AttentionBuffers& b = p.buffers;
  auto workspace = std::make_shared<DeviceBuffer<std::uint8_t>>(variant.workspace_bytes(shape));
  workspace->zero();  // the contract of AttentionArgs::workspace (common/registry.hpp)
  const AttentionArgs args = attention_args(
      shape, b.dq.get(), b.dk.get(), b.dv.get(), b.dout.get(), b.dlse.get(), workspace->get(),
      {p.sm_count, p.session.gpu.l2_bytes},
      {shape.varlen() ? b.dcu_q.get() : nullptr, shape.varlen() ? b.dcu_k.get() : nullptr,
       shape.paged() ? b.dtable.get() : nullptr});
  const auto launch = std::get<AttentionLaunch>(variant.launch);

  VariantHooks hooks;
  hooks.poison = [&b = p.buffers, &session = p.session] {
    b.dout.fill_bytes(kPoisonByte, session.stream.get());
    b.dlse.fill_bytes(kPoisonByte, session.stream.get());
  };
  hooks.launch = [args, launch, workspace](cudaStream_t s) { launch(args, s); };
  hooks.download = [&b = p.buffers, &variant = ref.variant(), dtype = shape.dtype] {
    Output out;
    out.bits16 = b.dout.download();
    out.values = widen(dtype, out.bits16);
    if (variant.writes_lse) out.lse = b.dlse.download();
    return out;
  };
  hooks.check = [&variant = ref.variant(), &ref64 = p.refs.fp64, &reflow = p.refs.low,
                 &shape = p.shape](Row& r, const Output& out) {
    r.error = check_attention_output(out.values, shape.head_dim, ref64.rows, ref64.o, reflow.o,
                                     shape.dtype);
    if (variant.writes_lse) {
      std::vector<double> lse(ref64.rows.size());
      for (std::size_t i = 0; i < lse.size(); ++i) lse[i] = out.lse[std::size_t(ref64.lse_at[i])];
      ErrorStats le = compare_with_reference(lse, ref64.lse, reflow.lse, lse_abs_term());
      le.total = std::int64_t(out.lse.size());
      le.nonfinite = count_nonfinite(out.lse);
      le.pass = le.pass && le.nonfinite == 0;
      r.lse_error = le;
    }
  };
  hooks.save = [&variant = ref.variant(), &dims = p.dims, &dir = p.dir, id = file_id(ref.id()),
                dtype = shape.dtype](const Output& out) {
    write_npy16(dir + "/o_" + id + ".npy", dtype, dims.q, out.bits16);
    if (variant.writes_lse)
      write_npy(dir + "/lse_" + id + ".npy", "<f4", dims.lse, out.lse.data(), out.lse.size() * 4);
  };
  return hooks;
}

}  // namespace

ProblemRun run_attention(Session& session, const AttentionShape& shape,
                         std::span<const VariantRef> variants, const RunOptions& options) {
  const int sm_count = launch_sm_count(session, options);  // before any work: a bad value is a usage error
  ProblemRun run = begin_run(Kind::Attention, shape, attention_shape_json(shape, options), variants);
  run.memory_bound = flops(shape) / min_bytes(shape) < kMemoryBoundFlopsPerByte;
  ensure_attention_fits(session, shape, variants);

  AttentionBuffers buffers(shape, options);
  const AttentionReferences refs =
      options.check ? attention_references(shape, buffers, options) : AttentionReferences{};
  const AttentionDims dims(shape);
  const std::string dir = save_directory(options, attention_save_name("attention", shape));
  if (!dir.empty()) save_attention_inputs(dir, shape, buffers, dims);
  const AttentionProblem problem{session, shape, sm_count, buffers, refs, dims, dir};

  run_attention_rows(session, run, variants, shape, options, flops(shape), min_bytes(shape),
                     [&](const VariantRef& ref) { return attention_hooks(problem, ref); });
  if (run.memory_bound) add_copy_ceiling(session, run, shape, options);
  else add_gemm_ceiling(session, run, options);
  return run;
}

}  // namespace ladder
