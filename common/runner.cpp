#include "common/runner.hpp"

#include <cuda_fp16.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>
#include <numeric>
#include <fstream>
#include <optional>
#include <set>
#include <type_traits>
#include <map>

#include "common/compare.hpp"
#include "common/device_buffer.hpp"
#include "common/npy.hpp"
#include "common/random.hpp"
#include "common/reference.hpp"
#include "common/reference_cache.hpp"
#include "common/reference_gpu.hpp"

namespace ladder {
namespace {

constexpr int kPoisonByte = 0xFF;  // every byte 0xFF: NaN in fp16, bf16 and fp32

// Streams of the random generator, one per input tensor, so Q, K and V are independent.
enum InputStream : std::uint64_t { kStreamQ = 1, kStreamK, kStreamV, kStreamA, kStreamB, kStreamX, kStreamDO };

std::size_t free_device_bytes() {
  std::size_t free_bytes = 0, total = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
  return free_bytes;
}

// Leave headroom for the CUDA context, cuBLAS workspaces and fragmentation.
constexpr std::size_t kHeadroomBytes = std::size_t(512) << 20;

double gib(double bytes) { return bytes / double(1ull << 30); }

// MemAvailable from /proc/meminfo (Linux), or nothing where it cannot be read.
std::optional<std::size_t> available_host_bytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  std::size_t kib = 0;
  std::string unit;
  while (meminfo >> key >> kib >> unit)
    if (key == "MemAvailable:") return kib * 1024;
  return std::nullopt;
}

void ensure_host_fits(std::size_t bytes, const std::string& what) {
  const auto available = available_host_bytes();
  if (available && bytes > *available)
    throw HostMemoryError(fmt::format(
        "{} need {:.2f} GiB of host memory but only {:.2f} GiB is available: use a smaller problem",
        what, double(bytes) / (1ull << 30), double(*available) / (1ull << 30)));
}

void ensure_fits(std::size_t bytes, const std::string& what) {
  const std::size_t free_bytes = free_device_bytes();
  if (bytes + kHeadroomBytes > free_bytes)
    throw UsageError(fmt::format(
        "{} need {:.2f} GiB of device memory but only {:.2f} GiB is free: use a smaller problem",
        what, gib(double(bytes)), gib(double(free_bytes))));
}

std::vector<float> widen(DType dtype, const std::vector<std::uint16_t>& bits) {
  std::vector<float> f(bits.size());
  for (std::size_t i = 0; i < bits.size(); ++i) f[i] = from_bits(dtype, bits[i]);
  return f;
}

// A 16-bit tensor as .npy: fp16 as it is ("<f2"); bf16, which NumPy has no type for, widened to
// fp32 ("<f4"), which holds every bf16 value exactly.
void write_npy16(const std::string& path, DType dtype, const std::vector<std::int64_t>& dims,
                 const std::vector<std::uint16_t>& bits) {
  if (dtype == DType::F16) {
    write_npy(path, "<f2", dims, bits.data(), bits.size() * 2);
  } else {
    const std::vector<float> wide = widen(dtype, bits);
    write_npy(path, "<f4", dims, wide.data(), wide.size() * 4);
  }
}

std::int64_t count_nonfinite(const std::vector<float>& values) {
  return std::count_if(values.begin(), values.end(), [](float x) { return !std::isfinite(x); });
}

template <typename T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

// A library row of a peers-only step is compared with the best lesson in the run: the main
// variant of the last lesson step selected ("99/cudnn vs 06/h200"), not with its own step.
std::string lesson_for_peers(std::span<const VariantRef> variants) {
  std::string lesson;
  for (const auto& ref : variants)
    if (!ref.step->peers_only()) lesson = variant_id(*ref.step, ref.step->variants[ref.step->main_variant]);
  return lesson;
}

// A baseline that is left out for this shape (same_kernel_at, same_kernel_when) stands for the
// variant whose kernel it is: compare with that one.
std::string resolve_baseline(std::string id, const AttentionShape& shape) {
  for (int hop = 0; hop < 8; ++hop) {
    const Variant* v = Registry::instance().find_variant(id);
    if (!v) break;
    const auto other = v->constraints.duplicate_of(shape);
    if (!other) break;
    id = *other;
  }
  return id;
}

Row make_row(const VariantRef& ref) {
  Row row;
  row.id = ref.id();
  row.step = ref.step->number;
  row.variant = ref.variant().name;
  row.description = ref.variant().description;
  row.peer = ref.variant().peer;
  row.deterministic = ref.variant().deterministic;
  row.approximate = ref.variant().approximate;
  row.baseline = baseline_id(*ref.step, ref.index);
  return row;
}

// The shared part of every variant's run. `launch` runs the variant once on `stream`; `download`
// returns its output (as raw bits for the rerun check and as floats); `check` fills row.error.
struct Output {
  std::vector<std::uint16_t> bits16;  // fp16 or bf16 outputs
  std::vector<float> values;          // widened (fp32 outputs are copied as they are)
  std::vector<float> lse;             // attention variants that write it
};

struct VariantHooks {
  std::function<void()> poison;
  std::function<void(cudaStream_t)> launch;
  std::function<Output()> download;
  std::function<void(Row&, const Output&)> check;
  std::function<void(const Output&)> save;
};

// A variant's launch kept for the later timing rounds; it owns (shares) what it needs.
struct Retimer {
  std::size_t row;  // index into ProblemRun::rows
  std::function<void(cudaStream_t)> launch;
};

// Workspaces above this are freed after the first round: such a variant (the naive step's N×N
// matrix) is timed in one round only, rather than holding gigabytes while the others run.
constexpr std::size_t kMaxRetainedWorkspace = std::size_t(1) << 30;

struct Baselines {
  std::set<std::string> needed;  // ids whose outputs a later row is compared with
  std::map<std::string, Output> outputs;
  std::vector<Retimer> retimers;
  std::map<std::size_t, std::vector<Timing>> rounds;  // row index -> its rounds so far
};

// Rounds 2..K of every variant that ran, alternately in reverse and in ladder order (the first
// round, with the checks, was in ladder order; TimingOptions::rounds says why); then each row's
// pooled timing and its comparison with its baseline's, which needs every round of both.
void finish_timing(Session& session, ProblemRun& run, const RunOptions& options,
                   Baselines& baselines) {
  for (int round = 1; round < options.timing.rounds && !session.context_lost; ++round) {
    std::vector<const Retimer*> order;
    for (const Retimer& t : baselines.retimers) order.push_back(&t);
    if (round % 2 == 1) std::reverse(order.begin(), order.end());
    for (const Retimer* retimer : order) {
      const Retimer& t = *retimer;
      try {
        baselines.rounds[t.row].push_back(
            time_launch(t.launch, session.stream.get(), options.timing, session.flusher));
      } catch (const CudaError& e) {
        Row& row = run.rows[t.row];
        row.status = Row::Status::Failed;
        row.note = fmt::format("timing round {}: {}", round + 1, e.what());
        if (cudaDeviceSynchronize() != cudaSuccess) session.context_lost = true;
        cudaGetLastError();
        if (session.context_lost) break;
      }
    }
  }
  std::map<std::string, Timing> by_id;
  for (auto& [index, rounds] : baselines.rounds) {
    run.rows[index].timing = merge_rounds(rounds);
    by_id[run.rows[index].id] = *run.rows[index].timing;
  }
  for (Row& row : run.rows) {
    if (!row.timing || row.ceiling) continue;
    if (auto it = by_id.find(row.baseline); it != by_id.end()) {
      row.speedup = it->second.median_ms / row.timing->median_ms;
      row.same_speed = same_speed(*row.timing, it->second);
    }
  }
}

// The tensor-core ceiling row of an attention table, and every row's share of it. Timed on first
// need, so it sits in the same process (and round of clocks) as the kernels it is compared with.
void add_gemm_ceiling(Session& session, ProblemRun& run, const RunOptions& options) {
  if (!options.time || session.context_lost) return;
  if (!session.gemm_tried) {
    session.gemm_tried = true;
    try {
      session.gemm = time_gemm_ceiling(session.stream.get(), options.timing, session.flusher,
                                       &session.gemm_why_not);
    } catch (const std::exception& e) {
      session.gemm_why_not = e.what();
      if (cudaDeviceSynchronize() != cudaSuccess) session.context_lost = true;
      cudaGetLastError();
    }
  }
  Row row;
  row.id = "gemm-fp16";
  row.ceiling = true;
  if (!session.gemm) {
    row.status = Row::Status::Skipped;
    row.description = "cuBLAS fp16 GEMM ceiling";
    row.note = session.gemm_why_not;
    run.rows.push_back(std::move(row));
    return;
  }
  const GemmCeiling& g = *session.gemm;
  row.id = g.id;
  row.description = g.description;
  row.flops = g.flops;
  row.timing = g.timing;
  for (Row& r : run.rows)
    if (r.timing && r.flops > 0) r.percent_of_gemm = g.percent_of(r.tflops());
  run.rows.push_back(std::move(row));
}

// The ids some selected variant is compared with: only their outputs are kept (a ladder run
// would otherwise hold every variant's output in host memory).
std::set<std::string> baselines_needed(std::span<const VariantRef> variants,
                                       const AttentionShape* shape = nullptr) {
  std::set<std::string> ids;
  for (const auto& ref : variants) {
    ids.insert(baseline_id(*ref.step, ref.index));
    if (shape) ids.insert(resolve_baseline(baseline_id(*ref.step, ref.index), *shape));
  }
  ids.insert(lesson_for_peers(variants));
  if (shape) ids.insert(resolve_baseline(lesson_for_peers(variants), *shape));
  return ids;
}

void run_variant(Session& session, const VariantRef& ref, Row& row, VariantHooks& hooks,
                 const RunOptions& options, Baselines& baselines, const Problem& problem,
                 std::size_t row_index, bool retain) {
  cudaStream_t stream = session.stream.get();
  // Poison, launch once, wait, read the output back.
  auto run_once = [&] {
    hooks.poison();
    hooks.launch(stream);
    session.stream.synchronize();
    return hooks.download();
  };
  auto identical = [](const Output& a, const Output& b) {
    return same_bits(a.bits16, b.bits16) && same_bits(a.values, b.values) && same_bits(a.lse, b.lse);
  };
  try {
    Output out = run_once();
    if (options.check) hooks.check(row, out);
    if (!options.save_dir.empty()) hooks.save(out);
    // The resource table lists the kernels this problem launched, not every kernel the variant has.
    row.kernels = std::visit(
        [&](const auto& shape) {
          if constexpr (std::is_same_v<std::decay_t<decltype(shape)>, AttentionShape>)
            return kernel_resources(ref.variant(), shape, session.gpu);
          else
            return kernel_resources(ref.variant(), 0, session.gpu);
        },
        problem);

    if (options.time) {
      baselines.rounds[row_index].push_back(
          time_launch(hooks.launch, stream, options.timing, session.flusher));
      row.timing = baselines.rounds[row_index].back();
      // The last timed launch overwrote the output: it must equal the checked one bit for bit.
      const Output again = hooks.download();
      row.rerun_identical = identical(out, again);
      if (!*row.rerun_identical) row.rerun_max_abs = max_abs_difference(out.values, again.values);
      if (retain) baselines.retimers.push_back({row_index, hooks.launch});
    } else {
      const Output again = run_once();
      row.rerun_identical = identical(out, again);
      if (!*row.rerun_identical) row.rerun_max_abs = max_abs_difference(out.values, again.values);
    }
    if (auto it = baselines.outputs.find(row.baseline); it != baselines.outputs.end())
      row.diff_vs_baseline = max_abs_difference(out.values, it->second.values);
    if (baselines.needed.count(row.id)) baselines.outputs[row.id] = std::move(out);
  } catch (const LibraryRefusal& e) {
    row.status = Row::Status::Skipped;
    row.note = e.what();
  } catch (const CudaError& e) {
    row.status = Row::Status::Failed;
    row.note = e.what();
    // A fault inside a kernel (illegal address, say) is sticky: the context is gone.
    if (cudaDeviceSynchronize() != cudaSuccess) session.context_lost = true;
    cudaGetLastError();
  } catch (const std::exception& e) {
    row.status = Row::Status::Failed;
    row.note = e.what();
  }
}

// Adds each distinct step's notes once, and runs each variant unless the session is lost.
template <typename Body>
void for_each_variant(Session& session, ProblemRun& run, std::span<const VariantRef> variants,
                      Body body) {
  const std::string lesson = lesson_for_peers(variants);
  for (const auto& ref : variants) {
    Row row = make_row(ref);
    if (ref.step->peers_only() && !lesson.empty()) row.baseline = lesson;
    if (session.context_lost) {
      row.status = Row::Status::Skipped;
      row.note = "not run: an earlier kernel fault left the CUDA context unusable";
    } else {
      body(ref, row, run.rows.size());
    }
    run.rows.push_back(std::move(row));
  }
}

template <typename Shape>
void add_step_notes(ProblemRun& run, std::span<const VariantRef> variants, const Shape& shape) {
  const Step* last = nullptr;
  for (const auto& ref : variants) {
    if (ref.step == last || !ref.step->notes) continue;
    last = ref.step;
    for (auto& line : ref.step->notes(Problem(shape))) run.notes.push_back(fmt::format("step {:02}: {}", ref.step->number, line));
  }
}

std::string file_id(const std::string& id) {
  std::string s = id;
  std::replace(s.begin(), s.end(), '/', '_');
  return s;
}

std::int64_t reference_rows(const RunOptions& options, double work_per_row) {
  // Keep the CPU reference to about 2^33 multiply-adds (a few seconds on a few cores).
  const double budget = 8.6e9;
  return std::max<std::int64_t>(16, std::min<std::int64_t>(options.max_reference_rows,
                                                           std::int64_t(budget / work_per_row)));
}

// The start of every run: a valid shape, its description, and the steps' notes for it.
template <typename Shape>
ProblemRun begin_run(Kind kind, const Shape& shape, nlohmann::json shape_json,
                     std::span<const VariantRef> variants) {
  if (auto error = validate(shape)) throw UsageError(*error);
  ProblemRun run;
  run.kind = kind;
  run.shape = shape.to_string();
  run.shape_json = std::move(shape_json);
  add_step_notes(run, variants, shape);
  return run;
}

// A variant whose constraints rule this problem out is reported as skipped, with the reason.
template <typename Shape>
bool refused(Row& row, const Variant& variant, const Shape& shape, int sm) {
  if constexpr (std::is_same_v<Shape, AttentionShape>) {
    if (auto other = variant.constraints.duplicate_of(shape)) {
      row.status = Row::Status::Skipped;
      row.duplicate_of = *other;
      row.note = variant.constraints.same_kernel_at.count(shape.head_dim)
                     ? fmt::format("at D={} the same kernel as {}: not listed", shape.head_dim, *other)
                     : fmt::format("on this problem the same kernel as {}: not listed", *other);
      return true;
    }
  }
  auto why = variant.constraints.refuse(shape, sm);
  if (!why) return false;
  row.status = Row::Status::Skipped;
  row.note = *why;
  return true;
}

// A variant this GPU cannot hold: more shared memory per block than it allows, or more workspace
// than is free. The row is skipped with the reason.
bool refused_resources(Row& row, const Variant& variant, const AttentionShape& shape, const GpuInfo& gpu) {
  for (const auto& k : variant.launched_kernels(shape))
    if (k.dynamic_smem > gpu.smem_per_block_optin) {
      row.status = Row::Status::Skipped;
      row.note = fmt::format("{} needs {} KB of shared memory per block; this GPU allows {} KB",
                             k.name, k.dynamic_smem / 1024, gpu.smem_per_block_optin / 1024);
      return true;
    }
  const std::size_t ws = variant.workspace_bytes(shape);
  if (ws + kHeadroomBytes > free_device_bytes()) {
    row.status = Row::Status::Skipped;
    row.note = fmt::format("needs {:.1f} GiB of workspace, more than the GPU has free", gib(double(ws)));
    return true;
  }
  return false;
}

}  // namespace

namespace {
std::vector<KernelResources> resources_of(const std::vector<KernelInfo>& kernels, const GpuInfo& gpu) {
  std::vector<KernelResources> out;
  for (const auto& k : kernels) {
    // A kernel above the default 48 KB of dynamic shared memory must opt in before the occupancy
    // calculator will place even one block (it reports 0 otherwise); its launch function does the
    // same opt-in, so setting it here changes nothing about the run.
    if (k.dynamic_smem > 48 * 1024)
      CUDA_CHECK(cudaFuncSetAttribute(k.func, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      int(k.dynamic_smem)));
    cudaFuncAttributes attr{};
    CUDA_CHECK(cudaFuncGetAttributes(&attr, k.func));
    KernelResources r;
    r.name = k.name;
    r.threads = k.threads;
    r.registers = attr.numRegs;
    r.local_bytes = int(attr.localSizeBytes);
    r.static_smem = attr.sharedSizeBytes;
    r.dynamic_smem = k.dynamic_smem;
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&r.blocks_per_sm, k.func, k.threads,
                                                             k.dynamic_smem));
    const int warps_per_block = (k.threads + 31) / 32;
    r.occupancy = gpu.max_threads_per_sm > 0
                      ? double(r.blocks_per_sm * warps_per_block) / (gpu.max_threads_per_sm / 32)
                      : 0;
    out.push_back(r);
  }
  return out;
}
}  // namespace

std::vector<KernelResources> kernel_resources(const Variant& variant, int head_dim,
                                              const GpuInfo& gpu) {
  return variant.kernels ? resources_of(variant.kernels(head_dim), gpu) : std::vector<KernelResources>{};
}

std::vector<KernelResources> kernel_resources(const Variant& variant, const AttentionShape& shape,
                                              const GpuInfo& gpu) {
  return resources_of(variant.launched_kernels(shape), gpu);
}

// ---- attention -----------------------------------------------------------------------------
namespace {

// Decode reads every byte of the cache to do a few FLOPs each: below this many FLOPs per byte
// (the H200's ridge is 989 TFLOP/s / 4.8 TB/s ≈ 200) a problem is bound by memory, and its table
// reports GB/s and the share of a device-to-device copy beside TFLOP/s.
constexpr double kMemoryBoundFlopsPerByte = 64.0;

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

}  // namespace

int launch_sm_count(const Session& session, const RunOptions& options) {
  if (options.grid_sms <= 0) return session.gpu.sm_count;
  // More CTAs than SMs would not be resident together, and the dynamic tile scheduler and the
  // split-KV workspace are sized for the GPU's count: a smaller count only is meaningful.
  if (options.grid_sms > session.gpu.sm_count)
    throw UsageError(fmt::format("--grid-sms {}: this GPU has {} SMs; give 1 to {} (or leave the "
                                 "option out for all of them)",
                                 options.grid_sms, session.gpu.sm_count, session.gpu.sm_count));
  return options.grid_sms;
}

ProblemRun run_attention(Session& session, const AttentionShape& shape,
                         std::span<const VariantRef> variants, const RunOptions& options) {
  const int sm_count = launch_sm_count(session, options);  // before any work: a bad value is a usage error
  nlohmann::json shape_json = {{"batch", shape.batch}, {"heads", shape.heads}, {"seqlen", shape.seqlen},
                               {"head_dim", shape.head_dim}, {"causal", shape.causal},
                               {"dtype", dtype_name(shape.dtype)}, {"q_scale", options.q_scale},
                               {"k_scale", options.k_scale}};
  // Part VI's properties appear only where they are on, so earlier rounds' files read the same.
  if (shape.gqa()) shape_json["kv_heads"] = shape.hkv();
  if (!shape.varlen() && shape.kv_seqlen > 0 && shape.kv_seqlen != shape.seqlen)
    shape_json["kv_seqlen"] = shape.kv_seqlen;
  if (shape.varlen()) {
    shape_json["q_lens"] = shape.q_lens;
    if (!shape.kv_lens.empty()) shape_json["kv_lens"] = shape.kv_lens;
  }
  if (shape.paged()) shape_json["page_size"] = shape.page_size;
  ProblemRun run = begin_run(Kind::Attention, shape, std::move(shape_json), variants);
  run.memory_bound = flops(shape) / min_bytes(shape) < kMemoryBoundFlopsPerByte;

  const std::size_t elements = std::size_t(shape.elements());        // Q, O
  const std::size_t kv_logical = std::size_t(shape.kv_rows()) * shape.head_dim;
  const std::size_t kv_stored = std::size_t(shape.kv_elements());    // K, V (paged: the pool)
  const std::size_t rows = std::size_t(shape.rows());
  // Q, K, V and O hold 16-bit elements (fp16 or bf16), stored as their bits.
  ensure_fits((2 * elements + 2 * kv_stored) * sizeof(std::uint16_t) + rows * sizeof(float) +
                  2 * session.gpu.l2_bytes,
              "Q, K, V, O and the log-sum-exp");
  // Host: Q, K, V as 16-bit and widened (6 bytes an element each), a paged copy of K and V, and
  // outputs downloaded as 16-bit and widened (6 bytes an element): the one being checked, its
  // rerun, and every output a later row is compared with.
  ensure_host_fits(elements * 6 * (1 + 2 + baselines_needed(variants, &shape).size()) +
                       kv_logical * 12 + (shape.paged() ? kv_stored * 4 : 0),
                   "Q, K, V and the outputs kept for comparison");

  const DType dtype = shape.dtype;
  const Tensor16 q = random_tensor16(elements, options.seed, kStreamQ, dtype, options.q_scale);
  const Tensor16 k = random_tensor16(kv_logical, options.seed, kStreamK, dtype, options.k_scale);
  const Tensor16 v = random_tensor16(kv_logical, options.seed, kStreamV, dtype);
  const RowIndex index(shape);
  DeviceBuffer<std::uint16_t> dq(elements), dk(kv_stored), dv(kv_stored), dout(elements);
  DeviceBuffer<float> dlse(rows);
  DeviceBuffer<int> dcu_q(shape.varlen() ? shape.batch + 1 : 0), dcu_k(shape.varlen() ? shape.batch + 1 : 0);
  DeviceBuffer<int> dtable(shape.paged() ? std::size_t(shape.batch) * shape.pages_per_seq() : 0);
  dq.upload(q.bits);
  std::vector<int> block_table;
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

  AttentionRows ref64, reflow;
  if (options.check) {
    const double work = double(shape.max_kv_len()) * shape.head_dim * 2;
    const auto selected = select_attention_rows(shape, reference_rows(options, work), options.seed);
    // The test suite's entries share these (common/reference_cache.hpp); the key is every input.
    KeyHash key;
    key.shape(shape).values(std::span<const std::int64_t>(selected));
    key.values(std::span<const float>(q.value)).values(std::span<const float>(k.value));
    key.values(std::span<const float>(v.value));
    for (const Precision p : {Precision::Fp64, Precision::Low})
      (p == Precision::Fp64 ? ref64 : reflow) = cached_reference(KeyHash(key).value(p).get(), [&] {
        return attention_reference(shape, q.value, k.value, v.value, selected, p);
      });
  }

  // The tensors' dimensions as the layouts give them (common/problem.hpp), for --save.
  const std::int64_t B = shape.batch, H = shape.heads, Hkv = shape.hkv(), D = shape.head_dim;
  const std::vector<std::int64_t> q_dims =
      shape.varlen() ? std::vector<std::int64_t>{shape.total_q(), H, D}
                     : std::vector<std::int64_t>{B, H, shape.seqlen, D};
  const std::vector<std::int64_t> kv_dims =
      shape.paged() ? std::vector<std::int64_t>{shape.num_pages(), Hkv, shape.page_size, D}
      : shape.varlen() ? std::vector<std::int64_t>{shape.total_k(), Hkv, D}
                       : std::vector<std::int64_t>{B, Hkv, shape.kv_len(0), D};
  const std::vector<std::int64_t> lse_dims =
      shape.varlen() ? std::vector<std::int64_t>{H, shape.total_q()}
                     : std::vector<std::int64_t>{B, H, shape.seqlen};
  std::string dir;
  if (!options.save_dir.empty()) {
    dir = fmt::format("{}/attention_B{}_H{}_N{}_D{}_{}{}", options.save_dir, shape.batch,
                      shape.heads, shape.seqlen, shape.head_dim, shape.causal ? "causal" : "full",
                      dtype == DType::BF16 ? "_bf16" : "");
    if (shape.gqa()) dir += fmt::format("_Hkv{}", Hkv);
    if (!shape.varlen() && shape.kv_len(0) != shape.seqlen) dir += fmt::format("_Nkv{}", shape.kv_len(0));
    if (shape.varlen()) dir += fmt::format("_varlen{}", shape.total_q());
    if (shape.paged()) dir += fmt::format("_page{}", shape.page_size);
    std::filesystem::create_directories(dir);
    write_npy16(dir + "/q.npy", dtype, q_dims, q.bits);
    write_npy16(dir + "/k.npy", dtype, kv_dims, shape.paged() ? dk.download() : k.bits);
    write_npy16(dir + "/v.npy", dtype, kv_dims, shape.paged() ? dv.download() : v.bits);
    if (shape.varlen()) {
      write_npy(dir + "/cu_seqlens_q.npy", "<i4", {B + 1}, index.cu_q.data(), index.cu_q.size() * 4);
      write_npy(dir + "/cu_seqlens_k.npy", "<i4", {B + 1}, index.cu_k.data(), index.cu_k.size() * 4);
    }
    if (shape.paged())
      write_npy(dir + "/block_table.npy", "<i4", {B, shape.pages_per_seq()}, block_table.data(),
                block_table.size() * 4);
  }

  Baselines baselines;
  baselines.needed = baselines_needed(variants, &shape);
  for_each_variant(session, run, variants, [&](const VariantRef& ref, Row& row, std::size_t row_index) {
    const Variant& variant = ref.variant();
    row.flops = flops(shape);
    row.bytes = min_bytes(shape);
    row.baseline = resolve_baseline(row.baseline, shape);
    if (refused(row, variant, shape, session.gpu.sm) || refused_resources(row, variant, shape, session.gpu))
      return;
    const std::size_t ws = variant.workspace_bytes(shape);
    auto workspace = std::make_shared<DeviceBuffer<std::uint8_t>>(ws);
    // The tensors travel as fp16 pointers whatever the dtype (AttentionArgs::as<Element>()).
    AttentionArgs args{shape,
                       shape.softmax_scale(),
                       reinterpret_cast<const __half*>(dq.get()),
                       reinterpret_cast<const __half*>(dk.get()),
                       reinterpret_cast<const __half*>(dv.get()),
                       reinterpret_cast<__half*>(dout.get()),
                       dlse.get(),
                       workspace->get(),
                       sm_count,
                       session.gpu.l2_bytes};
    if (shape.varlen()) {
      args.cu_seqlens_q = dcu_q.get();
      args.cu_seqlens_k = dcu_k.get();
    }
    if (shape.paged()) args.block_table = dtable.get();
    const auto launch = std::get<AttentionLaunch>(variant.launch);

    VariantHooks hooks;
    hooks.poison = [&] {
      dout.fill_bytes(kPoisonByte, session.stream.get());
      dlse.fill_bytes(kPoisonByte, session.stream.get());
    };
    hooks.launch = [args, launch, workspace](cudaStream_t s) { launch(args, s); };
    hooks.download = [&] {
      Output out;
      out.bits16 = dout.download();
      out.values = widen(dtype, out.bits16);
      if (variant.writes_lse) out.lse = dlse.download();
      return out;
    };
    hooks.check = [&](Row& r, const Output& out) {
      r.error = check_attention_output(out.values, shape.head_dim, ref64.rows, ref64.o, reflow.o,
                                       dtype);
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
    hooks.save = [&](const Output& out) {
      write_npy16(dir + "/o_" + file_id(ref.id()) + ".npy", dtype, q_dims, out.bits16);
      if (variant.writes_lse)
        write_npy(dir + "/lse_" + file_id(ref.id()) + ".npy", "<f4", lse_dims, out.lse.data(),
                  out.lse.size() * 4);
    };
    run_variant(session, ref, row, hooks, options, baselines, shape, row_index,
                ws <= kMaxRetainedWorkspace);
  });
  finish_timing(session, run, options, baselines);
  if (run.memory_bound) add_copy_ceiling(session, run, shape, options);
  else add_gemm_ceiling(session, run, options);
  return run;
}

// ---- matrix product ------------------------------------------------------------------------
ProblemRun run_matmul(Session& session, const MatmulShape& shape,
                      std::span<const VariantRef> variants, const RunOptions& options) {
  ProblemRun run =
      begin_run(Kind::Matmul, shape, {{"m", shape.m}, {"n", shape.n}, {"k", shape.k}}, variants);

  const std::size_t a_elems = std::size_t(shape.m) * shape.k, b_elems = std::size_t(shape.k) * shape.n,
                    c_elems = std::size_t(shape.m) * shape.n;
  ensure_fits((a_elems + b_elems + c_elems) * sizeof(float) + 2 * session.gpu.l2_bytes, "A, B and C");
  const auto a = random_normal(a_elems, options.seed, kStreamA);
  const auto b = random_normal(b_elems, options.seed, kStreamB);
  DeviceBuffer<float> da(a_elems), db(b_elems), dc(c_elems);
  da.upload(a);
  db.upload(b);

  MatmulRows ref64, reflow;
  if (options.check) {
    const auto selected = select_rows(shape.m, shape.m, reference_rows(options, double(shape.n) * shape.k),
                                      options.seed);
    ref64 = matmul_reference(shape, a, b, selected, Precision::Fp64);
    reflow = matmul_reference(shape, a, b, selected, Precision::Low);
  }
  std::string dir;
  if (!options.save_dir.empty()) {
    dir = fmt::format("{}/matmul_M{}_N{}_K{}", options.save_dir, shape.m, shape.n, shape.k);
    std::filesystem::create_directories(dir);
    write_npy(dir + "/a.npy", "<f4", {shape.m, shape.k}, a.data(), a_elems * 4);
    write_npy(dir + "/b.npy", "<f4", {shape.k, shape.n}, b.data(), b_elems * 4);
  }

  Baselines baselines;
  baselines.needed = baselines_needed(variants);
  for_each_variant(session, run, variants, [&](const VariantRef& ref, Row& row, std::size_t row_index) {
    const Variant& variant = ref.variant();
    row.flops = flops(shape);
    row.bytes = min_bytes(shape);
    if (refused(row, variant, shape, session.gpu.sm)) return;
    auto workspace = std::make_shared<DeviceBuffer<std::uint8_t>>(variant.workspace_bytes(shape));
    const MatmulArgs args{shape, da.get(), db.get(), dc.get(), workspace->get()};
    const auto launch = std::get<MatmulLaunch>(variant.launch);
    VariantHooks hooks;
    hooks.poison = [&] { dc.fill_bytes(kPoisonByte, session.stream.get()); };
    hooks.launch = [args, launch, workspace](cudaStream_t s) { launch(args, s); };
    hooks.download = [&] {
      Output out;
      out.values = dc.download();
      return out;
    };
    hooks.check = [&](Row& r, const Output& out) {
      std::vector<double> got(ref64.rows.size() * std::size_t(shape.n));
      for (std::size_t i = 0; i < ref64.rows.size(); ++i)
        for (int j = 0; j < shape.n; ++j)
          got[i * shape.n + j] = out.values[std::size_t(ref64.rows[i]) * shape.n + j];
      ErrorStats e = compare_with_reference(got, ref64.c, reflow.c, matmul_abs_term(shape.k));
      e.total = std::int64_t(out.values.size());
      e.nonfinite = count_nonfinite(out.values);
      e.pass = e.pass && e.nonfinite == 0;
      r.error = e;
    };
    hooks.save = [&](const Output& out) {
      write_npy(dir + "/c_" + file_id(ref.id()) + ".npy", "<f4", {shape.m, shape.n},
                out.values.data(), out.values.size() * 4);
    };
    run_variant(session, ref, row, hooks, options, baselines, shape, row_index, true);
  });
  finish_timing(session, run, options, baselines);
  return run;
}

// ---- reduction -----------------------------------------------------------------------------
ProblemRun run_reduction(Session& session, const ReductionShape& shape,
                         std::span<const VariantRef> variants, const RunOptions& options) {
  ProblemRun run = begin_run(Kind::Reduction, shape, {{"count", shape.count}}, variants);

  const std::size_t n = std::size_t(shape.count);
  ensure_fits(2 * n * sizeof(float) + 2 * session.gpu.l2_bytes, "the input and a copy of it");
  const auto x = random_normal(n, options.seed, kStreamX);
  DeviceBuffer<float> dx(n), dout(1);
  dx.upload(x);
  const double ref64 = reduction_reference(x, Precision::Fp64);
  const double reflow = reduction_reference(x, Precision::Low);
  const double abs_term = reduction_abs_term(sum_of_magnitudes(x));
  std::string dir;
  if (!options.save_dir.empty()) {
    dir = fmt::format("{}/reduction_n{}", options.save_dir, shape.count);
    std::filesystem::create_directories(dir);
    write_npy(dir + "/x.npy", "<f4", {shape.count}, x.data(), n * 4);
  }

  // The yardstick: a device-to-device copy of the same bytes, timed the same way. A reduction
  // reads 4n bytes; the copy reads 4n and writes 4n, and its GB/s counts both.
  if (options.time && !session.context_lost) {
    Row copy;
    copy.id = "copy";
    copy.description = "cudaMemcpyAsync device to device of the input (read + write counted)";
    copy.ceiling = true;
    copy.bytes = 2.0 * n * sizeof(float);
    DeviceBuffer<float> dst(n);
    copy.timing = time_launch(
        [&](cudaStream_t s) {
          CUDA_CHECK(cudaMemcpyAsync(dst.get(), dx.get(), n * sizeof(float), cudaMemcpyDeviceToDevice, s));
        },
        session.stream.get(), options.timing, session.flusher);
    run.rows.push_back(std::move(copy));
  }

  Baselines baselines;
  baselines.needed = baselines_needed(variants);
  for_each_variant(session, run, variants, [&](const VariantRef& ref, Row& row, std::size_t row_index) {
    const Variant& variant = ref.variant();
    row.flops = flops(shape);
    row.bytes = min_bytes(shape);
    if (refused(row, variant, shape, session.gpu.sm)) return;
    auto workspace = std::make_shared<DeviceBuffer<std::uint8_t>>(variant.workspace_bytes(shape));
    const ReductionArgs args{shape, dx.get(), dout.get(), workspace->get()};
    const auto launch = std::get<ReductionLaunch>(variant.launch);
    VariantHooks hooks;
    hooks.poison = [&] { dout.fill_bytes(kPoisonByte, session.stream.get()); };
    hooks.launch = [args, launch, workspace](cudaStream_t s) { launch(args, s); };
    hooks.download = [&] {
      Output out;
      out.values = dout.download();
      return out;
    };
    hooks.check = [&](Row& r, const Output& out) {
      const std::vector<double> got = {double(out.values[0])}, r64 = {ref64}, rlow = {reflow};
      ErrorStats e = compare_with_reference(got, r64, rlow, abs_term);
      e.total = 1;
      e.nonfinite = count_nonfinite(out.values);
      e.pass = e.pass && e.nonfinite == 0;
      r.error = e;
    };
    hooks.save = [&](const Output& out) {
      write_npy(dir + "/sum_" + file_id(ref.id()) + ".npy", "<f4", {1}, out.values.data(), 4);
    };
    run_variant(session, ref, row, hooks, options, baselines, shape, row_index, true);
  });
  finish_timing(session, run, options, baselines);
  return run;
}

// ---- attention backward (Part V) -------------------------------------------------------------
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

}  // namespace

ProblemRun run_backward(Session& session, const AttentionShape& shape,
                        std::span<const VariantRef> variants, const RunOptions& options) {
  const int sm_count = launch_sm_count(session, options);  // before any work: a bad value is a usage error
  // Part V's backward is the dense problem's; Part VI's properties have no backward step yet.
  if (features_of(shape) != 0)
    throw UsageError(fmt::format("the backward track runs dense problems only (asked for {})",
                                 shape.to_string()));
  ProblemRun run = begin_run(
      Kind::Backward, shape,
      {{"batch", shape.batch}, {"heads", shape.heads}, {"seqlen", shape.seqlen},
       {"head_dim", shape.head_dim}, {"causal", shape.causal}, {"dtype", dtype_name(shape.dtype)},
       {"q_scale", options.q_scale}, {"k_scale", options.k_scale}},
      variants);

  const std::size_t elements = std::size_t(shape.elements());
  const std::size_t rows = std::size_t(shape.rows());
  // Q, K, V, O, dO in and dQ, dK, dV out (16-bit), the stored LSE (fp32) and the exact statistics
  // (two doubles a row).
  ensure_fits(8 * elements * sizeof(std::uint16_t) + rows * (sizeof(float) + 2 * sizeof(double)) +
                  2 * session.gpu.l2_bytes,
              "Q, K, V, O, dO, dQ, dK, dV and the row statistics");
  // Host: Q, K, V, dO and O as 16-bit and widened (6 bytes an element each), and the three
  // gradients as 16-bit and widened: the checked ones, their rerun and every kept baseline.
  ensure_host_fits(elements * (5 * 6 + 3 * 6 * (2 + baselines_needed(variants, &shape).size())),
                   "Q, K, V, dO, O and the gradients kept for comparison");

  const DType dtype = shape.dtype;
  const Tensor16 q = random_tensor16(elements, options.seed, kStreamQ, dtype, options.q_scale);
  const Tensor16 k = random_tensor16(elements, options.seed, kStreamK, dtype, options.k_scale);
  const Tensor16 v = random_tensor16(elements, options.seed, kStreamV, dtype);
  const Tensor16 d_o = random_tensor16(elements, options.seed, kStreamDO, dtype);
  DeviceBuffer<std::uint16_t> dev_q(elements), dev_k(elements), dev_v(elements), dev_do(elements),
      dev_o(elements), dev_dq(elements), dev_dk(elements), dev_dv(elements);
  DeviceBuffer<float> dev_lse(rows);
  dev_q.upload(q.bits);
  dev_k.upload(k.bits);
  dev_v.upload(v.bits);
  dev_do.upload(d_o.bits);

  // The forward the backward starts from: O and the LSE as a forward stores them, and the exact
  // statistics for the fp64 reference.
  BackwardStats stats64;
  std::vector<float> o_stored, lse_stored;
  {
    DeviceBuffer<double> dev_lse64(rows), dev_delta64(rows);
    forward_for_backward_gpu(shape, dev_q.get(), dev_k.get(), dev_v.get(), dev_do.get(),
                             {dev_o.get(), dev_lse.get(), dev_lse64.get(), dev_delta64.get()},
                             session.stream.get());
    session.stream.synchronize();
    o_stored = widen(dtype, dev_o.download());
    lse_stored = dev_lse.download();
    stats64 = {dev_lse64.download(), dev_delta64.download()};
  }

  BackwardRows ref64, reflow;
  if (options.check) {
    // A gradient row costs about four D-long dot products per key (or query) it sums over; the
    // budget is shared by the dQ rows and the dK/dV rows.
    const double work = 4.0 * shape.seqlen * shape.head_dim * 2;
    const std::int64_t budget = std::max<std::int64_t>(16, reference_rows(options, work) / 2);
    const auto q_rows = select_rows(shape.rows(), shape.seqlen, budget, options.seed);
    const auto k_rows = select_rows(shape.rows(), shape.seqlen, budget, options.seed + 1);
    check_gpu_forward(shape, q, k, v, d_o, stats64, q_rows);
    const BackwardInputs in{q.value, k.value, v.value, d_o.value};
    KeyHash key;  // every input of both references (common/reference_cache.hpp)
    key.shape(shape).values(std::span<const std::int64_t>(q_rows)).values(std::span<const std::int64_t>(k_rows));
    for (const auto& t : {in.q, in.k, in.v, in.d_o}) key.values(t);
    key.values(std::span<const double>(stats64.lse)).values(std::span<const double>(stats64.delta));
    key.values(std::span<const float>(o_stored)).values(std::span<const float>(lse_stored));
    ref64 = cached_reference(KeyHash(key).value(Precision::Fp64).get(), [&] {
      return backward_reference(shape, in, stats64, q_rows, k_rows, Precision::Fp64);
    });
    reflow = cached_reference(KeyHash(key).value(Precision::Low).get(), [&] {
      return backward_reference(shape, in, backward_stats_low(shape, o_stored, d_o.value, lse_stored),
                                q_rows, k_rows, Precision::Low);
    });
  }

  std::string dir;
  const std::vector<std::int64_t> dims = {shape.batch, shape.heads, shape.seqlen, shape.head_dim};
  if (!options.save_dir.empty()) {
    dir = fmt::format("{}/backward_B{}_H{}_N{}_D{}_{}{}", options.save_dir, shape.batch,
                      shape.heads, shape.seqlen, shape.head_dim, shape.causal ? "causal" : "full",
                      dtype == DType::BF16 ? "_bf16" : "");
    std::filesystem::create_directories(dir);
    write_npy16(dir + "/q.npy", dtype, dims, q.bits);
    write_npy16(dir + "/k.npy", dtype, dims, k.bits);
    write_npy16(dir + "/v.npy", dtype, dims, v.bits);
    write_npy16(dir + "/do.npy", dtype, dims, d_o.bits);
    write_npy16(dir + "/o.npy", dtype, dims, dev_o.download());
    write_npy(dir + "/lse.npy", "<f4", {shape.batch, shape.heads, shape.seqlen}, lse_stored.data(),
              lse_stored.size() * 4);
  }

  Baselines baselines;
  baselines.needed = baselines_needed(variants, &shape);
  for_each_variant(session, run, variants, [&](const VariantRef& ref, Row& row, std::size_t row_index) {
    const Variant& variant = ref.variant();
    row.flops = backward_flops(shape);
    row.bytes = backward_min_bytes(shape);
    row.baseline = resolve_baseline(row.baseline, shape);
    if (refused(row, variant, shape, session.gpu.sm) || refused_resources(row, variant, shape, session.gpu))
      return;
    auto workspace = std::make_shared<DeviceBuffer<std::uint8_t>>(variant.workspace_bytes(shape));
    auto in = [](const DeviceBuffer<std::uint16_t>& b) { return reinterpret_cast<const __half*>(b.get()); };
    auto out = [](DeviceBuffer<std::uint16_t>& b) { return reinterpret_cast<__half*>(b.get()); };
    const BackwardArgs args{shape,        shape.softmax_scale(), in(dev_q),       in(dev_k),
                            in(dev_v),    in(dev_o),             in(dev_do),      dev_lse.get(),
                            out(dev_dq),  out(dev_dk),           out(dev_dv),     workspace->get(),
                            sm_count,     session.gpu.l2_bytes};
    const auto launch = std::get<BackwardLaunch>(variant.launch);

    VariantHooks hooks;
    hooks.poison = [&] {
      for (auto* b : {&dev_dq, &dev_dk, &dev_dv}) b->fill_bytes(kPoisonByte, session.stream.get());
    };
    hooks.launch = [args, launch, workspace](cudaStream_t s) { launch(args, s); };
    // The three gradients, one after the other: dQ, dK, dV.
    hooks.download = [&] {
      Output o;
      for (const auto* b : {&dev_dq, &dev_dk, &dev_dv}) {
        const auto bits = b->download();
        o.bits16.insert(o.bits16.end(), bits.begin(), bits.end());
      }
      o.values = widen(dtype, o.bits16);
      return o;
    };
    hooks.check = [&](Row& r, const Output& o) {
      const std::span<const float> all(o.values);
      const int d = shape.head_dim;
      r.gradient_errors = {
          {"dQ", check_gradient_output(all.subspan(0, elements), d, ref64.q_rows, ref64.dq, reflow.dq,
                                       ref64.dq_floor, dtype)},
          {"dK", check_gradient_output(all.subspan(elements, elements), d, ref64.k_rows, ref64.dk,
                                       reflow.dk, ref64.dk_floor, dtype)},
          {"dV", check_gradient_output(all.subspan(2 * elements, elements), d, ref64.k_rows, ref64.dv,
                                       reflow.dv, ref64.dv_floor, dtype)}};
      r.error = worst_gradient(r.gradient_errors);
    };
    hooks.save = [&](const Output& o) {
      const char* names[] = {"dq", "dk", "dv"};
      for (int g = 0; g < 3; ++g) {
        const std::vector<std::uint16_t> part(o.bits16.begin() + std::ptrdiff_t(g * elements),
                                              o.bits16.begin() + std::ptrdiff_t((g + 1) * elements));
        write_npy16(fmt::format("{}/{}_{}.npy", dir, names[g], file_id(ref.id())), dtype, dims, part);
      }
    };
    run_variant(session, ref, row, hooks, options, baselines, shape, row_index,
                variant.workspace_bytes(shape) <= kMaxRetainedWorkspace);
  });
  finish_timing(session, run, options, baselines);
  add_gemm_ceiling(session, run, options);
  return run;
}

}  // namespace ladder
