#include "common/run_shared.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <variant>

#include "common/compare.hpp"
#include "common/npy.hpp"

namespace ladder {
namespace run_detail {
namespace {

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

template <typename T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

}  // namespace

std::size_t free_device_bytes() {
  std::size_t free_bytes = 0, total = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
  return free_bytes;
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

std::int64_t count_nonfinite(const std::vector<float>& values) {
  return std::count_if(values.begin(), values.end(), [](float x) { return !std::isfinite(x); });
}

std::int64_t reference_rows(const RunOptions& options, double work_per_row) {
  // Keep the CPU reference to about 2^33 multiply-adds (a few seconds on a few cores).
  const double budget = 8.6e9;
  return std::max<std::int64_t>(16, std::min<std::int64_t>(options.max_reference_rows,
                                                           std::int64_t(budget / work_per_row)));
}

// ---- --save ---------------------------------------------------------------------------------
std::string save_directory(const RunOptions& options, const std::string& name) {
  if (options.save_dir.empty()) return {};
  std::string dir = options.save_dir + "/" + name;
  std::filesystem::create_directories(dir);
  return dir;
}

// Part VI's properties appear only where they are on, so a dense problem's name reads as before
// them (forward and backward alike: a GQA or varlen backward problem carries its suffix).
std::string attention_save_name(const std::string& kind, const AttentionShape& shape) {
  std::string name = fmt::format("{}_B{}_H{}_N{}_D{}_{}{}", kind, shape.batch, shape.heads,
                                 shape.seqlen, shape.head_dim, shape.causal ? "causal" : "full",
                                 shape.dtype == DType::F16 ? "" : std::string("_") + dtype_name(shape.dtype));
  if (shape.gqa()) name += fmt::format("_Hkv{}", shape.hkv());
  if (!shape.varlen() && shape.kv_len(0) != shape.seqlen) name += fmt::format("_Nkv{}", shape.kv_len(0));
  if (shape.varlen()) name += fmt::format("_varlen{}", shape.total_q());
  if (shape.paged()) name += fmt::format("_page{}", shape.page_size);
  if (shape.head_scales) name += "_headscales";  // fp8 per head: its bytes differ from per tensor's
  return name;
}

// bf16, which NumPy has no type for, is widened to fp32 ("<f4"), which holds every bf16 value exactly.
// fp8 is not 16 bits: widen() refuses it (its bytes are written as "|u1", run_attention.cpp).
void write_npy16(const std::string& path, DType dtype, const std::vector<std::int64_t>& dims,
                 const std::vector<std::uint16_t>& bits) {
  if (dtype == DType::F16) {
    write_npy(path, "<f2", dims, bits.data(), bits.size() * 2);
  } else {
    const std::vector<float> wide = widen(dtype, bits);
    write_npy(path, "<f4", dims, wide.data(), wide.size() * 4);
  }
}

std::string file_id(const std::string& id) {
  std::string s = id;
  std::replace(s.begin(), s.end(), '/', '_');
  return s;
}

nlohmann::json attention_shape_json(const AttentionShape& shape, const RunOptions& options) {
  nlohmann::json json = {{"batch", shape.batch}, {"heads", shape.heads}, {"seqlen", shape.seqlen},
                         {"head_dim", shape.head_dim}, {"causal", shape.causal},
                         {"dtype", dtype_name(shape.dtype)}, {"q_scale", options.q_scale},
                         {"k_scale", options.k_scale}};
  // Part VI's properties appear only where they are on, so earlier rounds' files read the same.
  if (shape.gqa()) json["kv_heads"] = shape.hkv();
  if (!shape.varlen() && shape.kv_seqlen > 0 && shape.kv_seqlen != shape.seqlen)
    json["kv_seqlen"] = shape.kv_seqlen;
  if (shape.varlen()) {
    json["q_lens"] = shape.q_lens;
    if (!shape.kv_lens.empty()) json["kv_lens"] = shape.kv_lens;
  }
  if (shape.paged()) json["page_size"] = shape.page_size;
  // Part VIII's per-head descales likewise: only where on, so per-tensor fp8 files read as before.
  if (shape.head_scales) json["head_scales"] = true;
  if (options.head_magnitudes) json["head_magnitudes"] = true;  // the inputs differ: say so
  return json;
}

// ---- rows and baselines ---------------------------------------------------------------------
// "99/cudnn vs 06/h200": the main variant of the last lesson step selected, not its own step.
std::string lesson_for_peers(std::span<const VariantRef> variants) {
  std::string lesson;
  for (const auto& ref : variants)
    if (!ref.step->peers_only()) lesson = variant_id(*ref.step, ref.step->variants[ref.step->main_variant]);
  return lesson;
}

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

std::set<std::string> baselines_needed(std::span<const VariantRef> variants,
                                       const AttentionShape* shape) {
  std::set<std::string> ids;
  for (const auto& ref : variants) {
    ids.insert(baseline_id(*ref.step, ref.index));
    if (shape) ids.insert(resolve_baseline(baseline_id(*ref.step, ref.index), *shape));
  }
  ids.insert(lesson_for_peers(variants));
  if (shape) ids.insert(resolve_baseline(lesson_for_peers(variants), *shape));
  return ids;
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

// ---- one variant's run ----------------------------------------------------------------------
void run_variant(Session& session, const VariantRef& ref, Row& row, VariantHooks& hooks,
                 const RunOptions& options, Baselines& baselines, const Problem& problem,
                 std::size_t row_index, bool retain) {
  cudaStream_t stream = session.stream.get();
  // Poison, launch once, wait, read the output back.
  auto run_once = [&] {
    hooks.poison();
    hooks.launch(stream);
    if (hooks.after_launch) hooks.after_launch(stream);
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
      if (hooks.after_launch) hooks.after_launch(stream);
      session.stream.synchronize();
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

// The first round, with the checks, was in ladder order; rounds 2..K go alternately in reverse
// and in ladder order (TimingOptions::rounds says why). A row's comparison with its baseline's
// timing needs every round of both, so it comes last.
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

// Timed on first need, so it sits in the same process (and round of clocks) as the kernels it is
// compared with.
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

}  // namespace run_detail

// ---- the public part: resources and the SM count --------------------------------------------
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

}  // namespace ladder
