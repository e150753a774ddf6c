// The forward attention problem: every layout of Parts I-VI (dense, GQA, decode, varlen, paged).
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <stdexcept>

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
  // Q, K, V hold element_bytes(dtype) an element (fp16, bf16: 2; fp8: 1), O its output type's.
  const std::size_t in_bytes = std::size_t(element_bytes(shape.dtype));
  const std::size_t out_bytes = std::size_t(element_bytes(output_dtype(shape.dtype)));
  ensure_fits((q_elements(shape) + 2 * kv_stored(shape)) * in_bytes + q_elements(shape) * out_bytes +
                  std::size_t(shape.rows()) * sizeof(float) + 2 * session.gpu.l2_bytes,
              "Q, K, V, O and the log-sum-exp");
  // Host: Q, K, V as drawn, 16-bit and widened (6 bytes an element), and for fp8 also quantized,
  // bytes and dequantized values (5 more); a paged copy of K and V; and outputs downloaded as
  // 16-bit and widened (6 bytes an element): the one being checked, its rerun, and every output a
  // later row is compared with.
  const std::size_t input = sizeof(std::uint16_t) + sizeof(float) +
                            (shape.dtype == DType::E4M3 ? sizeof(std::uint8_t) + sizeof(float) : 0);
  const std::size_t output = sizeof(std::uint16_t) + sizeof(float);
  ensure_host_fits(q_elements(shape) * (input + output * (2 + baselines_needed(variants, &shape).size())) +
                       kv_logical(shape) * 2 * input + (shape.paged() ? kv_stored(shape) * 4 : 0),
                   "Q, K, V and the outputs kept for comparison");
}

// RunOptions::head_magnitudes: head g (of `heads` contiguous blocks) times 2^(g mod 4 - 2). The
// 16-bit bits are re-rounded from the scaled values (exact but at fp16's extremes) and the values
// re-read from them, so the two stay one tensor.
constexpr int kHeadMagnitudeCycle = 4, kHeadMagnitudeLowest = -2;
void vary_head_magnitudes(Tensor16& t, std::int64_t heads, const AttentionShape& shape) {
  if (shape.varlen())  // [total, H, D] interleaves the heads: no contiguous block a head
    throw std::invalid_argument("RunOptions::head_magnitudes takes the dense layouts only, not a "
                                "variable-length batch (" + shape.to_string() + ")");
  const std::size_t size = t.value.size() / std::size_t(heads);
  for (std::size_t i = 0; i < t.value.size(); ++i) {
    const int exponent = int((i / size) % kHeadMagnitudeCycle) + kHeadMagnitudeLowest;
    t.bits[i] = to_bits(t.dtype, std::ldexp(t.value[i], exponent));
    t.value[i] = from_bits(t.dtype, t.bits[i]);
  }
}

// One of Q, K, V: drawn as the problem's 16-bit type draws it, and for fp8 drawn as bf16 (the same
// seed, stream and scale) and then quantized (common/dtype.hpp), per tensor or, with
// shape.head_scales, per head (`heads` groups: B·H of Q, B·Hkv of K and V, each (b, h) head a
// contiguous block of the dense layout), so that an fp8 problem is the bf16 problem of the same
// options, rounded once more.
struct InputTensor {
  InputTensor(std::size_t count, const RunOptions& options, InputStream stream, const AttentionShape& shape,
              std::int64_t heads, float scale)
      : drawn(random_tensor16(count, options.seed, stream,
                              shape.dtype == DType::E4M3 ? DType::BF16 : shape.dtype, scale)),
        quantized(shape.dtype == DType::E4M3), per_head(shape.head_scales) {
    if (options.head_magnitudes) vary_head_magnitudes(drawn, heads, shape);
    if (quantized) fp8 = quantize_e4m3(drawn.value, per_head ? std::size_t(heads) : 1);
  }
  // What the kernels compute with, and so the references: the elements, or their e4m3 values
  // (each times its own head's descale when per head).
  const std::vector<float>& value() const { return quantized ? fp8.value : drawn.value; }
  // The scalar descale (AttentionArgs::q_descale, ...): 1 unless fp8 per tensor; per head it is 1,
  // the contract of AttentionArgs::q_head_descale, so that each head's factor is applied once.
  float descale() const { return quantized && !per_head ? fp8.descale : 1.0f; }
  // The per-head descales (AttentionArgs::q_head_descale, ...), or nothing unless per head.
  std::vector<float> head_descales() const { return per_head ? fp8.descales : std::vector<float>{}; }
  // The bytes the device holds: the 16-bit elements' bits, or the e4m3 bytes.
  const void* data() const { return quantized ? static_cast<const void*>(fp8.bits.data()) : drawn.bits.data(); }
  std::size_t bytes() const { return quantized ? fp8.bits.size() : drawn.bits.size() * sizeof(std::uint16_t); }

  Tensor16 drawn;  // fp8: the bf16 values before quantization
  bool quantized;
  bool per_head;        // fp8 with shape.head_scales
  QuantizedTensor fp8;  // fp8 only
};

// The device buffers of Q, K and V are bytes (element_bytes(dtype) an element): a copy of the host's.
void upload_bytes(DeviceBuffer<std::uint8_t>& to, const void* from, std::size_t bytes) {
  CUDA_CHECK(cudaMemcpy(to.get(), from, std::min(bytes, to.bytes()), cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaDeviceSynchronize());  // as DeviceBuffer::upload: the DMA lands before any launch
}
std::vector<std::uint16_t> as_16bit(const std::vector<std::uint8_t>& bytes) {
  std::vector<std::uint16_t> out(bytes.size() / sizeof(std::uint16_t));
  std::memcpy(out.data(), bytes.data(), out.size() * sizeof(std::uint16_t));
  return out;
}

// The seeded inputs on the host and on the device, and the output buffers every variant writes.
struct AttentionBuffers {
  AttentionBuffers(const AttentionShape& shape, const RunOptions& options)
      : q(q_elements(shape), options, kStreamQ, shape, std::int64_t(shape.batch) * shape.heads, options.q_scale),
        k(kv_logical(shape), options, kStreamK, shape, std::int64_t(shape.batch) * shape.hkv(), options.k_scale),
        v(kv_logical(shape), options, kStreamV, shape, std::int64_t(shape.batch) * shape.hkv(), 1.0f),
        index(shape),
        dq(q_elements(shape) * element_bytes(shape.dtype)),
        dk(kv_stored(shape) * element_bytes(shape.dtype)),
        dv(kv_stored(shape) * element_bytes(shape.dtype)),
        dout(q_elements(shape)),
        dlse(std::size_t(shape.rows())),
        dcu_q(shape.varlen() ? shape.batch + 1 : 0), dcu_k(shape.varlen() ? shape.batch + 1 : 0),
        dtable(shape.paged() ? std::size_t(shape.batch) * shape.pages_per_seq() : 0),
        dq_head_descale(q.head_descales().size()), dk_head_descale(k.head_descales().size()),
        dv_head_descale(v.head_descales().size()) {
    upload_bytes(dq, q.data(), q.bytes());
    if (shape.head_scales) {  // fp8 per head (validate: fp8 only); empty buffers, null pointers, otherwise
      dq_head_descale.upload(q.head_descales());
      dk_head_descale.upload(k.head_descales());
      dv_head_descale.upload(v.head_descales());
    }
    if (shape.paged()) {  // 16-bit only: validate() refuses a paged fp8 cache
      PagedCache cache = page_cache(shape, index, k.drawn.bits, v.drawn.bits, options.seed);
      upload_bytes(dk, cache.k.data(), cache.k.size() * sizeof(std::uint16_t));
      upload_bytes(dv, cache.v.data(), cache.v.size() * sizeof(std::uint16_t));
      dtable.upload(cache.block_table);
      block_table = std::move(cache.block_table);
    } else {
      upload_bytes(dk, k.data(), k.bytes());
      upload_bytes(dv, v.data(), v.bytes());
    }
    if (shape.varlen()) {
      dcu_q.upload(index.cu_q);
      dcu_k.upload(index.cu_k);
    }
  }
  InputTensor q, k, v;  // K and V logical (unpaged)
  RowIndex index;
  DeviceBuffer<std::uint8_t> dq, dk, dv;  // bytes; K and V as the layout stores them
  DeviceBuffer<std::uint16_t> dout;       // 16-bit: the element type, or fp8's bf16
  DeviceBuffer<float> dlse;
  DeviceBuffer<int> dcu_q, dcu_k, dtable;  // varlen, paged; empty otherwise
  // fp8 per head: B·H, B·Hkv, B·Hkv descales (AttentionArgs::q_head_descale, ...); empty otherwise.
  DeviceBuffer<float> dq_head_descale, dk_head_descale, dv_head_descale;
  std::vector<int> block_table;
};

struct AttentionReferences {
  AttentionRows fp64, low;
  AttentionRows unquantized;  // fp8: fp64 on the bf16 draws before quantization; empty otherwise
  // fp8: the low reference of each key block other than kE4M3KeyBlock that a variant declares.
  std::map<int, AttentionRows> low_by_block;
  const AttentionRows& low_for(const Variant& v, DType dtype) const {
    if (dtype != DType::E4M3 || v.fp8_key_block == kE4M3KeyBlock) return low;
    return low_by_block.at(v.fp8_key_block);
  }
};

// The references of a sample of rows, at fp64 and at the element type's precision (fp8: of the
// dequantized inputs, which is what the kernel is given); for fp8 also the fp64 reference of the
// same rows on the inputs before quantization, for Row::error_vs_unquantized, and the low
// reference again for each other key block the variants declare (Variant::fp8_key_block).
AttentionReferences attention_references(const AttentionShape& shape, const AttentionBuffers& in,
                                         const RunOptions& options, std::span<const VariantRef> variants) {
  AttentionReferences refs;
  const double work = double(shape.max_kv_len()) * shape.head_dim * 2;
  const auto selected = select_attention_rows(shape, reference_rows(options, work), options.seed);
  // The test suite's entries share these (common/reference_cache.hpp); the key is every input.
  auto key_of = [&](const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v) {
    KeyHash key;
    key.shape(shape).values(std::span<const std::int64_t>(selected));
    key.values(std::span<const float>(q)).values(std::span<const float>(k)).values(std::span<const float>(v));
    return key;
  };
  const KeyHash key = key_of(in.q.value(), in.k.value(), in.v.value());
  for (const Precision p : {Precision::Fp64, Precision::Low})
    (p == Precision::Fp64 ? refs.fp64 : refs.low) = cached_reference(KeyHash(key).value(p).get(), [&] {
      return attention_reference(shape, in.q.value(), in.k.value(), in.v.value(), selected, p);
    });
  if (shape.dtype == DType::E4M3) {
    const auto& q = in.q.drawn.value;
    const auto& k = in.k.drawn.value;
    const auto& v = in.v.drawn.value;
    refs.unquantized = cached_reference(key_of(q, k, v).value(Precision::Fp64).get(), [&] {
      return attention_reference(shape, q, k, v, selected, Precision::Fp64);
    });
    for (const VariantRef& ref : variants) {
      const int block = ref.variant().fp8_key_block;
      if (block == kE4M3KeyBlock || refs.low_by_block.count(block)) continue;
      refs.low_by_block[block] = cached_reference(KeyHash(key).value(Precision::Low).value(block).get(), [&] {
        return attention_reference(shape, in.q.value(), in.k.value(), in.v.value(), selected, Precision::Low, block);
      });
    }
  }
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

// --save of an fp8 problem's inputs: the e4m3 bytes as uint8 ("|u1"; NumPy has no e4m3, and
// ml_dtypes.float8_e4m3fn reads the same bytes) and the descales, value = e4m3(byte) · descale.
// Per head, the scalars are 1 (AttentionArgs' contract) and q_head_descale, k_head_descale,
// v_head_descale are lists in the (b, h) order of the arrays the kernels get (B·H, B·Hkv, B·Hkv
// long, index b·H + h): head (b, h)'s value = e4m3(byte) * descale * head_descale[b·H + h].
void save_fp8_inputs(const std::string& dir, const AttentionBuffers& in, const AttentionDims& dims) {
  write_npy(dir + "/q.npy", "|u1", dims.q, in.q.data(), in.q.bytes());
  write_npy(dir + "/k.npy", "|u1", dims.kv, in.k.data(), in.k.bytes());
  write_npy(dir + "/v.npy", "|u1", dims.kv, in.v.data(), in.v.bytes());
  nlohmann::json descales = {
      {"format", "OCP e4m3fn bytes (bias 7, max 448, 0x7F/0xFF NaN); value = e4m3(byte) * descale"},
      {"q_descale", in.q.descale()}, {"k_descale", in.k.descale()}, {"v_descale", in.v.descale()}};
  if (in.q.per_head) {
    descales["format"] = "OCP e4m3fn bytes (bias 7, max 448, 0x7F/0xFF NaN); value = e4m3(byte) * "
                         "descale * head_descale[b * heads + h] (heads: of that tensor, K/V heads "
                         "for k and v)";
    descales["q_head_descale"] = in.q.head_descales();
    descales["k_head_descale"] = in.k.head_descales();
    descales["v_head_descale"] = in.v.head_descales();
  }
  std::ofstream out(dir + "/descales.json");
  out << descales.dump(1) << "\n";
  if (!out) throw std::ios_base::failure("failed writing " + dir + "/descales.json");
}

// --save: the inputs (a paged K and V as the pool the kernels read), in `dir`.
void save_attention_inputs(const std::string& dir, const AttentionShape& shape,
                           const AttentionBuffers& in, const AttentionDims& dims) {
  const DType dtype = shape.dtype;
  const std::int64_t B = shape.batch;
  if (dtype == DType::E4M3) return save_fp8_inputs(dir, in, dims);  // dense only (validate)
  write_npy16(dir + "/q.npy", dtype, dims.q, in.q.drawn.bits);
  write_npy16(dir + "/k.npy", dtype, dims.kv, shape.paged() ? as_16bit(in.dk.download()) : in.k.drawn.bits);
  write_npy16(dir + "/v.npy", dtype, dims.kv, shape.paged() ? as_16bit(in.dv.download()) : in.v.drawn.bits);
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
  AttentionArgs args = attention_args(
      shape, b.dq.get(), b.dk.get(), b.dv.get(), b.dout.get(), b.dlse.get(), workspace->get(),
      {p.sm_count, p.session.gpu.l2_bytes},
      {shape.varlen() ? b.dcu_q.get() : nullptr, shape.varlen() ? b.dcu_k.get() : nullptr,
       shape.paged() ? b.dtable.get() : nullptr});
  args.q_descale = b.q.descale();  // 1 unless fp8 per tensor
  args.k_descale = b.k.descale();
  args.v_descale = b.v.descale();
  args.q_head_descale = b.dq_head_descale.get();  // null unless fp8 per head (an empty buffer)
  args.k_head_descale = b.dk_head_descale.get();
  args.v_head_descale = b.dv_head_descale.get();
  const auto launch = std::get<AttentionLaunch>(variant.launch);

  VariantHooks hooks;
  hooks.poison = [&b = p.buffers, &session = p.session] {
    b.dout.fill_bytes(kPoisonByte, session.stream.get());
    b.dlse.fill_bytes(kPoisonByte, session.stream.get());
  };
  hooks.launch = [args, launch, workspace](cudaStream_t s) { launch(args, s); };
  if (variant.after_launch_untimed)
    hooks.after_launch = [args, after = variant.after_launch_untimed](cudaStream_t s) { after(args, s); };
  hooks.download = [&b = p.buffers, &variant = ref.variant(), dtype = shape.dtype] {
    Output out;
    out.bits16 = b.dout.download();
    out.values = widen(output_dtype(dtype), out.bits16);
    if (variant.writes_lse) out.lse = b.dlse.download();
    return out;
  };
  hooks.check = [&variant = ref.variant(), &ref64 = p.refs.fp64, &reflow = p.refs.low_for(ref.variant(), p.shape.dtype),
                 &unquantized = p.refs.unquantized, &shape = p.shape](Row& r, const Output& out) {
    r.error = check_attention_output(out.values, shape.head_dim, ref64.rows, ref64.o, reflow.o,
                                     shape.dtype, ref64.floor);
    if (!unquantized.rows.empty())
      r.error_vs_unquantized = relative_rms_error(out.values, shape.head_dim, unquantized.rows, unquantized.o);
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
    write_npy16(dir + "/o_" + id + ".npy", output_dtype(dtype), dims.q, out.bits16);
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
      options.check ? attention_references(shape, buffers, options, variants) : AttentionReferences{};
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
