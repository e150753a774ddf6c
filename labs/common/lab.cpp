#include "labs/common/lab.hpp"

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <stdexcept>

#include "common/gpu_info.hpp"
#include "common/report.hpp"

namespace lab {

using namespace ladder;

namespace {
bool g_small = false;  // --small: set once by parse(), read by the grids below
}  // namespace

Options parse(int argc, char** argv, const char* lab, const char* what) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--cpu")) {
      o.cpu_only = true;
    } else if (!std::strcmp(argv[i], "--no-time")) {
      o.no_time = true;
    } else if (!std::strcmp(argv[i], "--small")) {
      o.small = g_small = true;
    } else if (!std::strcmp(argv[i], "--help") || !std::strcmp(argv[i], "-h")) {
      fmt::print("{}: {}\nusage: {} [--cpu] [--no-time] [--small]\n"
                 "  --cpu      run the CPU parts only (what CI runs)\n"
                 "  --no-time  the check grid only, no timed run\n"
                 "  --small    a few ragged shapes instead of the grid (for compute-sanitizer)\n"
                 "exit: 0 pass, 1 a check failed, 77 no GPU (CPU parts ran)\n",
                 lab, what, argv[0]);
      std::exit(kPass);
    } else {
      fmt::print(stderr, "{}: unknown argument '{}' (try --help)\n", lab, argv[i]);
      std::exit(kUsage);
    }
  }
  fmt::print("== {}: {}\n", lab, what);
  return o;
}

int Verdict::finish() const {
  fmt::print("\n");
  for (const auto& line : infos_) fmt::print("{}\n", line);
  if (failures_.empty()) {
    fmt::print("{}: PASS\n", lab_);
    return kPass;
  }
  fmt::print("{}: FAIL ({} check{} failed)\n", lab_, failures_.size(), failures_.size() == 1 ? "" : "s");
  const std::size_t shown = std::min<std::size_t>(failures_.size(), 12);
  for (std::size_t i = 0; i < shown; ++i) fmt::print("  - {}\n", failures_[i]);
  if (shown < failures_.size()) fmt::print("  … and {} more (the lines above list them all)\n", failures_.size() - shown);
  return kFail;
}

int Verdict::finish_without_gpu(const std::string& reason) const {
  fmt::print("\n");
  for (const auto& line : infos_) fmt::print("{}\n", line);
  if (!failures_.empty()) return finish();
  fmt::print("{}: NOT CHECKED ON A GPU ({}). Your kernel compiled and the CPU parts passed; the "
             "kernel itself has not been run.\n", lab_, reason);
  return kNoGpu;
}

int Verdict::finish_cpu_only() const {
  if (!failures_.empty()) return finish();
  fmt::print("\n");
  for (const auto& line : infos_) fmt::print("{}\n", line);
  fmt::print("{}: CPU parts PASS (--cpu: the kernels were compiled, not run)\n", lab_);
  return kPass;
}

void check_registration(int number, std::initializer_list<const char*> names, Verdict& verdict) {
  const Step* step = Registry::instance().find(number);
  if (!step) {
    verdict.fail(fmt::format("the lab's kernel file registered no step {} (is its LADDER_REGISTER_STEP block intact?)", number));
    return;
  }
  std::string listed;
  for (const auto& v : step->variants) listed += (listed.empty() ? "" : ", ") + v.name;
  fmt::print("\nregistered: step {} \"{}\" with variants {}\n", number, step->title, listed);
  for (const char* name : names) {
    bool found = false;
    for (const auto& v : step->variants) found = found || v.name == name;
    if (!found) verdict.fail(fmt::format("step {} has no variant '{}' (the checker needs it)", number, name));
  }
}

std::unique_ptr<Session> open_gpu(std::string& reason) {
  const DeviceCount devices = cuda_device_count();
  if (devices.count == 0) {
    reason = devices.no_gpu ? "no CUDA GPU on this machine" : "CUDA cannot use the driver: " + devices.error;
    return nullptr;
  }
  auto session = std::make_unique<Session>(query_gpu());
  fmt::print("GPU: {} (sm_{}, {} SMs)\n", session->gpu.name, session->gpu.sm, session->gpu.sm_count);
  return session;
}

std::vector<VariantRef> variants_of_step(int number) {
  const Step* step = Registry::instance().find(number);
  if (!step) throw std::logic_error(fmt::format("step {} is not registered in this checker", number));
  std::vector<VariantRef> out;
  for (std::size_t i = 0; i < step->variants.size(); ++i) out.push_back({step, i});
  return out;
}

VariantRef variant(int number, const std::string& name) {
  for (const auto& ref : variants_of_step(number))
    if (ref.variant().name == name) return ref;
  throw std::logic_error(fmt::format("step {} has no variant '{}'", number, name));
}

RunOptions check_options() {
  RunOptions o;
  o.time = false;
  o.check = true;
  o.max_reference_rows = 1 << 20;
  return o;
}

RunOptions timed_options() {
  RunOptions o;
  o.timing.rounds = 2;
  o.timing.target_ms = 50;
  return o;
}

std::vector<AttentionShape> attention_grid_shapes() {
  // Named arrays, not a ?: between two braced lists: the arrays behind such initializer_lists die
  // at the end of the ?: expression, and the loop would read freed stack (garbage sizes).
  static constexpr int kSmallSeqlens[] = {113, 600};
  static constexpr int kGridSeqlens[] = {1, 17, 64, 113, 128, 1000, 2048};
  const std::span<const int> seqlens = g_small ? std::span<const int>(kSmallSeqlens) : std::span<const int>(kGridSeqlens);
  std::vector<AttentionShape> shapes;
  for (int d : {64, 128})
    for (bool causal : {false, true})
      for (int n : seqlens)
        shapes.push_back({.batch = 1, .heads = 3, .seqlen = n, .head_dim = d, .causal = causal});
  return shapes;
}

std::vector<AttentionShape> large_logit_shapes() {
  std::vector<AttentionShape> shapes;
  if (g_small) return shapes;  // the small grid: the protocol, not the softmax's range
  for (int d : {64, 128})
    for (bool causal : {false, true})
      shapes.push_back({.batch = 2, .heads = 3, .seqlen = 1000, .head_dim = d, .causal = causal});
  return shapes;
}

RunOptions large_logit_options() {
  RunOptions o = check_options();
  o.q_scale = 5.0f;
  o.k_scale = 3.0f;
  return o;
}

std::string judge(const Row& r, const Variant& v, const Problem& problem, int sm) {
  if (r.status == Row::Status::Skipped) {
    if (!r.duplicate_of.empty()) return {};
    const bool declared = std::visit([&](const auto& s) { return bool(v.constraints.refuse(s, sm)); }, problem);
    return declared ? std::string{} : "skipped, but its declared constraints allow this shape: " + r.note;
  }
  if (r.status != Row::Status::Ok) return "did not run: " + r.note;
  if (!r.error) return "no comparison with the reference";
  if (r.error->nonfinite > 0)
    return fmt::format("{} of {} output values are NaN or inf: never written (the output is "
                       "poisoned with NaN before the launch), or computed as NaN, e.g. by "
                       "exp(−inf − (−inf)) or 0/0", r.error->nonfinite, r.error->total);
  if (!r.error->pass) return "wrong values: " + r.error->verdict();
  if (r.lse_error && !r.lse_error->pass) return "log-sum-exp: " + r.lse_error->verdict();
  if (r.deterministic && r.rerun_identical && !*r.rerun_identical)
    return "a second launch gave different bits (a race, or uninitialized memory?)";
  return {};
}

namespace {

std::string error_figures(const Row& r) {
  if (!r.error) return r.note;
  return fmt::format("max|err| {:.2e} (allowed {:.2e}), rel L2 {:.2e}", r.error->max_abs,
                     r.error->tolerance, r.error->rel_l2);
}

template <class Shape, class RunFn>
int grid(Session& session, std::span<const VariantRef> variants, std::span<const Shape> shapes,
         Verdict& verdict, RunFn run_fn) {
  int failed = 0;
  for (const auto& shape : shapes) {
    if (session.context_lost) {
      verdict.fail("a kernel fault made the GPU unusable; the rest of the grid did not run");
      return failed + 1;
    }
    const ProblemRun run = run_fn(shape);
    for (const Row& r : run.rows) {
      if (r.ceiling) continue;  // a yardstick row (the copy, the GEMM ceiling), not a solution
      const VariantRef* ref = nullptr;
      for (const auto& v : variants)
        if (v.id() == r.id) ref = &v;
      if (!ref) continue;
      const std::string why = judge(r, ref->variant(), Problem(shape), session.gpu.sm);
      const bool skipped = r.status == Row::Status::Skipped && why.empty();
      fmt::print("  {:<44} {:<16} {}  {}\n", run.shape, r.id,
                 skipped ? "skip" : why.empty() ? " ok " : "FAIL", skipped ? r.note : why.empty() ? error_figures(r) : why);
      if (!why.empty()) {
        ++failed;
        verdict.fail(fmt::format("{} on {}: {}", r.id, run.shape, why));
      }
    }
  }
  return failed;
}

}  // namespace

int attention_grid(Session& session, std::span<const VariantRef> variants,
                   std::span<const AttentionShape> shapes, Verdict& verdict, const RunOptions& options) {
  fmt::print("\ncheck grid: {} attention problems, fp64 reference, output poisoned with NaN\n", shapes.size());
  return grid(session, variants, shapes, verdict,
              [&](const AttentionShape& s) { return run_attention(session, s, variants, options); });
}

int matmul_grid(Session& session, std::span<const VariantRef> variants,
                std::span<const MatmulShape> shapes, Verdict& verdict) {
  fmt::print("\ncheck grid: {} matrix products, fp64 reference, output poisoned with NaN\n", shapes.size());
  RunOptions options = check_options();
  options.max_reference_rows = 256;
  return grid(session, variants, shapes, verdict,
              [&](const MatmulShape& s) { return run_matmul(session, s, variants, options); });
}

int reduction_grid(Session& session, std::span<const VariantRef> variants,
                   std::span<const std::int64_t> counts, Verdict& verdict) {
  fmt::print("\ncheck grid: {} sums, fp64 reference\n", counts.size());
  std::vector<ReductionShape> shapes;
  for (auto n : counts) shapes.push_back(ReductionShape{n});
  return grid(session, variants, std::span<const ReductionShape>(shapes), verdict,
              [&](const ReductionShape& s) { return run_reduction(session, s, variants, check_options()); });
}

ProblemRun show(ProblemRun run) {
  fmt::print("\n");
  print_table(run, true);
  std::fflush(stdout);
  return run;
}

}  // namespace lab
