// What every problem kind's runner (common/run_attention.cpp, run_backward.cpp, run_kernels.cpp)
// does the same way: the memory checks before any allocation, the rows and their refusals, one
// variant's run (poison → launch → check → time → rerun), the later timing rounds, the ceilings,
// and --save's files. Internal to the runner; runner.hpp is the interface.
#pragma once

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "common/runner.hpp"

namespace ladder::run_detail {

inline constexpr int kPoisonByte = 0xFF;  // every byte 0xFF: NaN in fp16, bf16 and fp32

// Streams of the random generator, one per input tensor, so Q, K and V are independent.
enum InputStream : std::uint64_t { kStreamQ = 1, kStreamK, kStreamV, kStreamA, kStreamB, kStreamX, kStreamDO };

// Leave headroom for the CUDA context, cuBLAS workspaces and fragmentation.
inline constexpr std::size_t kHeadroomBytes = std::size_t(512) << 20;

// Workspaces above this are freed after the first round: such a variant (the naive step's N×N
// matrix) is timed in one round only, rather than holding gigabytes while the others run.
inline constexpr std::size_t kMaxRetainedWorkspace = std::size_t(1) << 30;

std::size_t free_device_bytes();
inline double gib(double bytes) { return bytes / double(1ull << 30); }
// Throw HostMemoryError / UsageError when `what` does not fit in available RAM / free device memory.
void ensure_host_fits(std::size_t bytes, const std::string& what);
void ensure_fits(std::size_t bytes, const std::string& what);

// 16-bit elements as float (E4M3 throws: widen an fp8 problem's O as output_dtype, bf16).
std::vector<float> widen(DType dtype, const std::vector<std::uint16_t>& bits);
std::int64_t count_nonfinite(const std::vector<float>& values);
// Keeps the CPU reference to a few seconds: the rows it may check at `work_per_row` multiply-adds.
std::int64_t reference_rows(const RunOptions& options, double work_per_row);

// ---- --save ---------------------------------------------------------------------------------
// The directory `options.save_dir/name`, created; empty (and nothing created) without --save.
std::string save_directory(const RunOptions& options, const std::string& name);
// An attention problem's directory name (forward and backward alike): "attention_B4_H8_N4096_D64_full",
// "_bf16" or "_fp8" appended for those.
std::string attention_save_name(const std::string& kind, const AttentionShape& shape);
// A 16-bit tensor as .npy: fp16 as it is, bf16 widened to fp32 (NumPy has no bf16).
void write_npy16(const std::string& path, DType dtype, const std::vector<std::int64_t>& dims,
                 const std::vector<std::uint16_t>& bits);
std::string file_id(const std::string& id);  // "05/bc32" -> "05_bc32"

// An attention problem's shape as the JSON writes it (forward and backward alike).
nlohmann::json attention_shape_json(const AttentionShape& shape, const RunOptions& options);

// ---- one variant's run ----------------------------------------------------------------------
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
  // May be empty. After a launch whose output is read, before the read, never timed: work the
  // output needs that is not the variant's to be timed (Variant::untimed_after_launch).
  std::function<void(cudaStream_t)> after_launch;
  std::function<Output()> download;
  std::function<void(Row&, const Output&)> check;
  std::function<void(const Output&)> save;
};

// A variant's launch kept for the later timing rounds; it owns (shares) what it needs.
struct Retimer {
  std::size_t row;  // index into ProblemRun::rows
  std::function<void(cudaStream_t)> launch;
};

struct Baselines {
  std::set<std::string> needed;  // ids whose outputs a later row is compared with
  std::map<std::string, Output> outputs;
  std::vector<Retimer> retimers;
  std::map<std::size_t, std::vector<Timing>> rounds;  // row index -> its rounds so far
};

// The ids some selected variant is compared with: only their outputs are kept (a ladder run
// would otherwise hold every variant's output in host memory).
std::set<std::string> baselines_needed(std::span<const VariantRef> variants,
                                       const AttentionShape* shape = nullptr);
// A baseline that is left out for this shape (same_kernel_at, same_kernel_when) stands for the
// variant whose kernel it is: compare with that one.
std::string resolve_baseline(std::string id, const AttentionShape& shape);
// A library row of a peers-only step is compared with the best lesson in the run.
std::string lesson_for_peers(std::span<const VariantRef> variants);
Row make_row(const VariantRef& ref);

// Poison, launch, check, save, resources, first timing round, rerun, baseline difference; a
// failure becomes the row's status and note. `retain`: keep the launch for the later rounds.
void run_variant(Session& session, const VariantRef& ref, Row& row, VariantHooks& hooks,
                 const RunOptions& options, Baselines& baselines, const Problem& problem,
                 std::size_t row_index, bool retain);
// Rounds 2..K of every retained variant, then each row's pooled timing and speed-up.
void finish_timing(Session& session, ProblemRun& run, const RunOptions& options,
                   Baselines& baselines);
// The tensor-core ceiling row of an attention table, and every row's share of it.
void add_gemm_ceiling(Session& session, ProblemRun& run, const RunOptions& options);

// A variant this GPU cannot hold: more shared memory per block than it allows, or more workspace
// than is free. The row is skipped with the reason.
bool refused_resources(Row& row, const Variant& variant, const AttentionShape& shape, const GpuInfo& gpu);

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

// ---- the run's frame ------------------------------------------------------------------------
template <typename Shape>
void add_step_notes(ProblemRun& run, std::span<const VariantRef> variants, const Shape& shape) {
  const Step* last = nullptr;
  for (const auto& ref : variants) {
    if (ref.step == last || !ref.step->notes) continue;
    last = ref.step;
    for (auto& line : ref.step->notes(Problem(shape))) run.notes.push_back(fmt::format("step {:02}: {}", ref.step->number, line));
  }
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

// Adds a row per variant, and runs each (body(ref, row, row_index)) unless the session is lost.
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

// The rows of an attention problem, forward or backward: each variant's work and traffic, its
// refusals, its hooks (hooks_of(ref)) and its first run; then the later timing rounds of them all.
template <typename HooksOf>
void run_attention_rows(Session& session, ProblemRun& run, std::span<const VariantRef> variants,
                        const AttentionShape& shape, const RunOptions& options, double work,
                        double bytes, HooksOf hooks_of) {
  Baselines baselines;
  baselines.needed = baselines_needed(variants, &shape);
  for_each_variant(session, run, variants, [&](const VariantRef& ref, Row& row, std::size_t row_index) {
    const Variant& variant = ref.variant();
    row.flops = work;
    row.bytes = bytes;
    row.baseline = resolve_baseline(row.baseline, shape);
    if (refused(row, variant, shape, session.gpu.sm) || refused_resources(row, variant, shape, session.gpu))
      return;
    VariantHooks hooks = hooks_of(ref);
    run_variant(session, ref, row, hooks, options, baselines, shape, row_index,
                variant.workspace_bytes(shape) <= kMaxRetainedWorkspace);
  });
  finish_timing(session, run, options, baselines);
}

}  // namespace ladder::run_detail
