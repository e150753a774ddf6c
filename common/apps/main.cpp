// main() of every step executable (built with LADDER_ONLY_STEP=N) and of `ladder` (all steps).
// The steps register themselves; this file only parses the command line and runs the harness.
#include <fmt/format.h>

#include <cstdio>
#include <exception>

#include "common/check.hpp"
#include "common/cli.hpp"
#include "common/exit_codes.hpp"
#include "common/build_info.hpp"
#include "common/gpu_info.hpp"
#include "common/report.hpp"
#include "common/runner.hpp"

#ifndef LADDER_ONLY_STEP
#define LADDER_ONLY_STEP -1
#endif

namespace {

using namespace ladder::exit_code;

std::string join_args(int argc, char** argv) {
  std::string s;
  for (int i = 0; i < argc; ++i) s += (i ? " " : "") + std::string(argv[i]);
  return s;
}

void print_gpu(const ladder::GpuInfo& g) {
  fmt::print("GPU: {} (sm_{}, {} SMs, {:.0f} GiB, L2 {} MiB), driver {}, CUDA runtime {}.{}\n",
             g.name, g.sm, g.sm_count, double(g.memory_bytes) / (1ull << 30), g.l2_bytes >> 20,
             g.driver_version.empty() ? "?" : g.driver_version, g.cuda_runtime / 1000,
             (g.cuda_runtime % 1000) / 10);
  if (g.sm_clock_mhz)
    fmt::print("clocks now: SM {} MHz (max {}), memory {} MHz; ", *g.sm_clock_mhz,
               g.max_sm_clock_mhz.value_or(0), g.mem_clock_mhz.value_or(0));
  const auto& b = ladder::build_info();
  fmt::print("commit {} (dirty: {}), nvcc {}, {} build for {}\n", ladder::git_commit(), ladder::git_dirty(),
             b.nvcc, b.build_type, b.architectures);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace ladder;
  const int only_step = LADDER_ONLY_STEP;
  const ParseOutcome parsed = parse_cli(argc, argv, only_step);
  if (!parsed.options) {
    std::fputs(parsed.message.c_str(), parsed.exit_code ? stderr : stdout);
    std::fputs("\n", parsed.exit_code ? stderr : stdout);
    return parsed.exit_code;
  }
  const CliOptions& options = *parsed.options;
  if (options.list) {  // no CUDA call before this point or in it
    fmt::print("{}", list_steps(Registry::instance(), only_step));
    return 0;
  }

  try {
    const auto selected = select_variants(Registry::instance(), options, only_step);
    // Every problem is validated before any GPU work: a bad size is a usage error on any machine.
    for (const auto& shape : attention_shapes(options))
      if (auto why = validate(shape)) throw UsageError(*why);
    if (auto why = validate(MatmulShape{options.gemm[0], options.gemm[1], options.gemm[2]}))
      throw UsageError(*why);
    if (auto why = validate(ReductionShape{options.count})) throw UsageError(*why);
    const DeviceCount devices = cuda_device_count();
    if (devices.count == 0 && devices.no_gpu) {
      fmt::print(stderr,
                 "error: no CUDA GPU is available{}.\n"
                 "The ladder runs kernels and needs an NVIDIA GPU with a working driver.\n"
                 "On a machine without one you can still build everything and run the CPU tests "
                 "(see README.md), or list the steps with --list.\n",
                 devices.error.empty() ? "" : " (" + devices.error + ")");
      return kNoGpu;
    }
    if (devices.count == 0) {
      fmt::print(stderr,
                 "error: an NVIDIA driver is installed but CUDA cannot use it ({}).\n"
                 "Check `nvidia-smi`; a driver older than this CUDA runtime needs updating.\n",
                 devices.error);
      return kCudaError;
    }

    Report report;
    report.command_line = join_args(argc, argv);
    report.started_at = utc_now();
    report.timing = options.run.timing;
    Session session(query_gpu());
    report.gpu = session.gpu;
    print_gpu(session.gpu);

    std::vector<VariantRef> attention, matmul, reduction, backward;
    for (const auto& ref : selected) {
      switch (ref.step->kind) {
        case Kind::Attention: attention.push_back(ref); break;
        case Kind::Matmul: matmul.push_back(ref); break;
        case Kind::Reduction: reduction.push_back(ref); break;
        case Kind::Backward: backward.push_back(ref); break;
      }
    }
    auto show = [&](ProblemRun run) {
      GpuInfo after = session.gpu;
      refresh_clocks(after);  // right after the timing, so a throttled run shows up
      run.gpu_after = after;
      print_table(run, options.resources);
      std::fflush(stdout);
      report.runs.push_back(std::move(run));
    };
    if (!attention.empty())
      for (const auto& shape : attention_shapes(options)) {
        if (session.context_lost) break;
        show(run_attention(session, shape, attention, options.run));
      }
    if (!backward.empty())
      for (const auto& shape : attention_shapes(options)) {
        if (session.context_lost) break;
        // Dense, GQA and varlen have a backward; decode shapes and paged caches do not (a run of
        // both tracks on them times the forward and says so here).
        if (auto why = validate_backward(shape)) {
          fmt::print("\n== backward {} ==\n  skipped: {}\n", shape.to_string(), *why);
          continue;
        }
        show(run_backward(session, shape, backward, options.run));
      }
    if (!matmul.empty() && !session.context_lost) {
      const MatmulShape shape{options.gemm[0], options.gemm[1], options.gemm[2]};
      show(run_matmul(session, shape, matmul, options.run));
    }
    if (!reduction.empty() && !session.context_lost)
      show(run_reduction(session, ReductionShape{options.count}, reduction, options.run));

    report.gpu_after = session.gpu;
    refresh_clocks(report.gpu_after);
    if (!options.json_path.empty()) {
      write_json(report, options.json_path);
      fmt::print("\nresults written to {}\n", options.json_path);
    }
    if (session.context_lost) {
      fmt::print(stderr, "error: a kernel fault made the GPU unusable; later variants did not run\n");
      return kCudaError;
    }
    if (!all_passed(report)) {
      fmt::print(stderr, "error: at least one variant failed its checks (see the table)\n");
      return kChecksFailed;
    }
    if (!any_lesson_ran(report)) {
      fmt::print(stderr, "error: every selected variant was skipped on this GPU (see the notes in "
                         "the table); nothing was measured\n");
      return kNothingRan;
    }
    return kOk;
  } catch (const UsageError& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return kUsage;
  } catch (const HostMemoryError& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return kHostMemory;
  } catch (const CudaError& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return kCudaError;
  } catch (const std::ios_base::failure& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return kIo;
  } catch (const std::exception& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return kChecksFailed;
  }
}
