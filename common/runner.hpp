// The harness's data flow for one problem:
//
//   inputs (seeded, on the device) → references (CPU, fp64 and low precision, once per problem)
//   → for each variant, in ladder order:
//        constraints → poison → launch → every element written? → error vs reference
//        → difference from its baseline's output → timing → rerun identical?
//   → one ProblemRun (rows + notes), printed by report.hpp and written as JSON.
//
// One file per problem kind: common/run_attention.cpp, run_backward.cpp and run_kernels.cpp
// (matmul, reduction), over what they share in common/run_shared.hpp; run_args.hpp builds a
// launch's arguments for the runner and the C interface alike.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/gpu_info.hpp"
#include "common/peers/gemm_ceiling.hpp"
#include "common/registry.hpp"
#include "common/report.hpp"
#include "common/timing.hpp"

namespace ladder {

// A bad request from the user (a shape no step can run, a problem too large for the GPU).
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The problem's host-side buffers (inputs, downloaded outputs) do not fit in available RAM.
class HostMemoryError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct VariantRef {
  const Step* step;
  std::size_t index;
  const Variant& variant() const { return step->variants[index]; }
  std::string id() const { return variant_id(*step, variant()); }
};

struct RunOptions {
  TimingOptions timing;
  bool time = true;         // false: check only (the GPU tests)
  bool check = true;        // false: skip the CPU reference (timing only)
  std::int64_t max_reference_rows = 2048;
  std::uint64_t seed = 20261129;
  float q_scale = 1.0f, k_scale = 1.0f;  // the large-logit case multiplies Q and K
  // Attention, dense layouts: each (b, h) head of Q (and (b, hk) head of K and V) drawn times a
  // power of two of its own, 2^(g mod 4 - 2) for head g = b·H + h (b·Hkv + hk), so that the heads'
  // magnitudes, and so their per-head fp8 descales, differ: a kernel that reads another head's
  // descale fails (the GPU tests' per-head grid). Exact in every type (a power of two).
  bool head_magnitudes = false;
  std::string save_dir;     // non-empty: write inputs and outputs as .npy here
  bool verbose = false;
  // > 0: the SM count the launches are told (AttentionArgs / BackwardArgs::sm_count) instead of
  // the GPU's, at most the GPU's (`--grid-sms`): a persistent grid of min(tiles, grid_sms) CTAs
  // then walks several tiles per CTA at a small problem, and a split-KV decode plans its splits
  // for that many SMs. For the sanitizer (scripts/sanitize.sh); a timing with it is not the GPU's.
  int grid_sms = 0;
};

// The GPU state a sequence of runs shares.
struct Session {
  GpuInfo gpu;
  L2Flusher flusher;
  CudaStream stream;
  bool context_lost = false;  // a kernel fault poisoned the CUDA context; nothing more can run
  // The fp16 GEMM ceiling (cuBLAS), timed once per process on first need and shown in every
  // attention table; why_not says why it is absent.
  std::optional<GemmCeiling> gemm;
  std::string gemm_why_not;
  bool gemm_tried = false;
  explicit Session(const GpuInfo& info) : gpu(info), flusher(info.l2_bytes) {}
};

// The SM count a launch is told: the GPU's, or options.grid_sms; throws UsageError if that is
// more than the GPU has.
int launch_sm_count(const Session& session, const RunOptions& options);

ProblemRun run_attention(Session& session, const AttentionShape& shape,
                         std::span<const VariantRef> variants, const RunOptions& options);
// The backward pass of an attention problem (Part V): dQ, dK and dV of every backward variant,
// each gradient checked against the fp64 reference.
ProblemRun run_backward(Session& session, const AttentionShape& shape,
                        std::span<const VariantRef> variants, const RunOptions& options);
ProblemRun run_matmul(Session& session, const MatmulShape& shape,
                      std::span<const VariantRef> variants, const RunOptions& options);
ProblemRun run_reduction(Session& session, const ReductionShape& shape,
                         std::span<const VariantRef> variants, const RunOptions& options);

// Resources of a variant's kernels (registers, spills, shared memory, blocks per SM): all of them
// for a head dimension (0 outside attention), or those an attention problem launches (its mask and
// element type: Variant::launched_kernels), which is what a problem's table lists.
std::vector<KernelResources> kernel_resources(const Variant& variant, int head_dim,
                                              const GpuInfo& gpu);
std::vector<KernelResources> kernel_resources(const Variant& variant, const AttentionShape& shape,
                                              const GpuInfo& gpu);

}  // namespace ladder
