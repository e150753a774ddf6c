#include "common/report.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <stdexcept>

#include "common/build_info.hpp"

namespace ladder {

double Row::tflops() const {
  return timing && timing->median_ms > 0 ? flops / (timing->median_ms * 1e-3) / 1e12 : 0;
}
std::string Row::status_text() const {
  switch (status) {
    case Row::Status::Skipped: return "skipped";
    case Row::Status::Failed: return "FAIL";
    case Row::Status::Ok: break;
  }
  if (!error) return "-";
  const bool pass = error->pass && (!lse_error || lse_error->pass);
  if (pass) return "pass";
  if (!approximate.empty() && error->within(kApproximateSlack) &&
      (!lse_error || lse_error->within(kApproximateSlack)))
    return "approx";
  return "FAIL";
}

double Row::gbps() const {
  return timing && timing->median_ms > 0 ? bytes / (timing->median_ms * 1e-3) / 1e9 : 0;
}

namespace {

std::string sci(double x) { return std::isnan(x) ? "nan" : fmt::format("{:.2e}", x); }

std::string status_text(const Row& r) { return r.status_text(); }

std::string speedup_text(const Row& r) {
  if (!r.speedup) return "";
  if (r.same_speed) return "same";
  return fmt::format("{:.2f}x", *r.speedup);
}

std::string rerun_text(const Row& r) {
  if (!r.rerun_identical) return "";
  if (*r.rerun_identical) return "identical";
  if (r.deterministic) return "DIFFERS";
  return r.rerun_max_abs ? fmt::format("Δ {:.1e} (atomics)", *r.rerun_max_abs) : "differs (atomics)";
}

}  // namespace

void print_table(const ProblemRun& run, bool show_resources) {
  const bool bandwidth = run.kind == Kind::Reduction || run.memory_bound;
  fmt::print("\n== {} {} ==\n", kind_name(run.kind), run.shape);
  fmt::print("{:<22} {:>10} {:>19} {:>9} {:>9} {:>9} {:>9} {:>7}  {:<20} {:>7} {:>9} {:>10}\n",
             "id", "median ms", "p20-p80 ms", bandwidth ? "GB/s" : "TFLOP/s", "max err",
             "rel L2", "tol", "check", "vs", "speed", "max |Δ|", "rerun");
  double copy_gbps = 0;
  for (const Row& r : run.rows)
    if (r.ceiling && r.timing) copy_gbps = r.gbps();
  for (const Row& r : run.rows) {
    if (!r.duplicate_of.empty()) continue;  // listed under the table, below
    std::string id = r.id + (r.peer ? " (peer)" : "") + (r.ceiling ? " (ceiling)" : "");
    if (r.status == Row::Status::Skipped || !r.timing) {
      fmt::print("{:<22} {} {}\n", id, status_text(r), r.note);
      continue;
    }
    const Timing& t = *r.timing;
    const double rate = bandwidth ? r.gbps() : r.tflops();
    fmt::print("{:<22} {:>10.4f} {:>19} {:>9.2f} {:>9} {:>9} {:>9} {:>7}  {:<20} {:>7} {:>9} {:>10}",
               id, t.median_ms, fmt::format("{:.4f}-{:.4f}", t.p20_ms, t.p80_ms), rate,
               r.error ? sci(r.error->worst_error > 0 ? r.error->worst_error : r.error->max_abs) : "",
               r.error ? sci(r.error->rel_l2) : "",
               r.error ? sci(r.error->tolerance) : "", status_text(r), r.baseline,
               speedup_text(r), r.diff_vs_baseline ? sci(*r.diff_vs_baseline) : "",
               rerun_text(r));
    if (bandwidth && copy_gbps > 0 && !r.ceiling)
      fmt::print("  {:.0f}% of copy", 100.0 * r.gbps() / copy_gbps);
    if (run.memory_bound && !r.ceiling) fmt::print("  {:.2f} TFLOP/s", r.tflops());
    if (r.percent_of_gemm) fmt::print("  {:.0f}% of GEMM", *r.percent_of_gemm);
    fmt::print("\n");
    // A variant declared approximate that stays within its slack is a measured trade, not a
    // failure: its line says why and how far past the pass rule, and never says FAIL.
    const bool approx = status_text(r) == "approx";
    if (r.status == Row::Status::Failed || (r.error && !r.error->pass))
      fmt::print("    -> {}\n", !r.error || r.error->pass ? r.note
                                 : approx             ? r.error->approx_verdict(r.approximate)
                                                      : r.error->verdict());
    if (r.error_vs_unquantized)
      fmt::print("    fp8: rel RMS {} vs the unquantized inputs' fp64 attention\n", sci(*r.error_vs_unquantized));
    if (r.lse_error && !r.lse_error->pass)
      fmt::print("    -> log-sum-exp: {}\n",
                 approx ? r.lse_error->approx_verdict(r.approximate) : r.lse_error->verdict());
    for (const auto& [name, e] : r.gradient_errors)
      if (!e.pass) fmt::print("    -> {}: {}\n", name, e.verdict());
  }
  for (const auto& note : run.notes) fmt::print("  note: {}\n", note);
  for (const Row& r : run.rows)
    if (!r.duplicate_of.empty()) fmt::print("  note: {} {}\n", r.id, r.note);
  const bool any_kernels = std::any_of(run.rows.begin(), run.rows.end(),
                                      [](const Row& r) { return !r.kernels.empty(); });
  if (!show_resources || !any_kernels) return;
  fmt::print("\n  {:<22} {:<28} {:>7} {:>5} {:>7} {:>9} {:>9} {:>9} {:>9}\n", "id", "kernel",
             "threads", "regs", "spill B", "smem st", "smem dyn", "blocks/SM", "occupancy");
  for (const Row& r : run.rows)
    for (const auto& k : r.kernels)
      fmt::print("  {:<22} {:<28} {:>7} {:>5} {:>7} {:>9} {:>9} {:>9} {:>8.0f}%\n", r.id, k.name,
                 k.threads, k.registers, k.local_bytes, k.static_smem, k.dynamic_smem,
                 k.blocks_per_sm, 100 * k.occupancy);
}

nlohmann::json to_json(const GpuInfo& g) {
  nlohmann::json j = {{"name", g.name},
                      {"compute_capability", g.sm},
                      {"sm_count", g.sm_count},
                      {"l2_bytes", g.l2_bytes},
                      {"smem_per_sm", g.smem_per_sm},
                      {"smem_per_block_optin", g.smem_per_block_optin},
                      {"memory_bytes", g.memory_bytes},
                      {"cuda_runtime", g.cuda_runtime},
                      {"cuda_driver_api", g.cuda_driver},
                      {"driver_version", g.driver_version}};
  auto opt = [&](const char* key, const std::optional<int>& v) {
    j[key] = v ? nlohmann::json(*v) : nlohmann::json(nullptr);
  };
  opt("sm_clock_mhz", g.sm_clock_mhz);
  opt("mem_clock_mhz", g.mem_clock_mhz);
  opt("max_sm_clock_mhz", g.max_sm_clock_mhz);
  opt("max_mem_clock_mhz", g.max_mem_clock_mhz);
  opt("temperature_c", g.temperature_c);
  opt("power_limit_w", g.power_limit_w);
  j["pci_bus_id"] = g.pci_bus_id;
  if (g.clock_event_reasons) {
    j["clock_event_reasons"] = *g.clock_event_reasons;
    j["clock_event_reasons_text"] = describe_clock_events(*g.clock_event_reasons);
  } else {
    j["clock_event_reasons"] = nullptr;
  }
  return j;
}

namespace {

nlohmann::json to_json(const ErrorStats& e) {
  auto finite = [](double x) { return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(nullptr); };
  nlohmann::json j = {{"checked", e.checked},     {"total", e.total},
                      {"nonfinite", e.nonfinite}, {"max_abs", finite(e.max_abs)},
                      {"rel_l2", finite(e.rel_l2)}, {"lowprec_max_abs", finite(e.lowprec_max_abs)},
                      {"tolerance", finite(e.tolerance)}, {"worst_row_error", finite(e.worst_error)},
                      {"reference_nonfinite", e.reference_nonfinite}, {"pass", e.pass}};
  if (e.median_row_limit > 0) {  // fp8's aggregate rule (compare.hpp)
    j["median_row_ratio"] = finite(e.median_row_ratio);
    j["median_row_limit"] = e.median_row_limit;
  }
  return j;
}

nlohmann::json to_json(const Row& r) {
  nlohmann::json j = {{"id", r.id},
                      {"step", r.step},
                      {"variant", r.variant},
                      {"description", r.description},
                      {"peer", r.peer},
                      {"ceiling", r.ceiling},
                      {"status", r.status == Row::Status::Ok       ? "ok"
                                 : r.status == Row::Status::Failed ? "failed"
                                                                   : "skipped"},
                      {"note", r.note},
                      {"duplicate_of", r.duplicate_of},
                      {"flops", r.flops},
                      {"bytes", r.bytes},
                      {"deterministic", r.deterministic},
                      {"baseline", r.baseline}};
  if (r.timing) {
    j["median_ms"] = r.timing->median_ms;
    j["p20_ms"] = r.timing->p20_ms;
    j["p80_ms"] = r.timing->p80_ms;
    j["min_ms"] = r.timing->min_ms;
    j["samples_ms"] = r.timing->samples_ms;
    j["round_medians_ms"] = r.timing->round_medians_ms;
    j["tflops"] = r.tflops();
    j["gbps"] = r.gbps();
  }
  if (r.error) j["error"] = to_json(*r.error);
  if (r.lse_error) j["lse_error"] = to_json(*r.lse_error);
  if (r.error_vs_unquantized)  // fp8 only; a number, rel RMS as rel_l2 is (null if not finite)
    j["error_vs_unquantized"] =
        std::isfinite(*r.error_vs_unquantized) ? nlohmann::json(*r.error_vs_unquantized) : nullptr;
  for (const auto& [name, e] : r.gradient_errors) j["gradient_errors"][name] = to_json(e);
  if (r.speedup) {
    j["speedup_vs_baseline"] = *r.speedup;
    j["same_speed_as_baseline"] = r.same_speed;
  }
  if (r.diff_vs_baseline)
    j["max_abs_diff_vs_baseline"] =
        std::isfinite(*r.diff_vs_baseline) ? nlohmann::json(*r.diff_vs_baseline) : nullptr;
  if (r.rerun_identical) j["rerun_identical"] = *r.rerun_identical;
  if (r.rerun_max_abs)
    j["rerun_max_abs"] = std::isfinite(*r.rerun_max_abs) ? nlohmann::json(*r.rerun_max_abs) : nullptr;
  if (r.percent_of_gemm) j["percent_of_gemm"] = *r.percent_of_gemm;
  if (r.percent_of_copy) j["percent_of_copy"] = *r.percent_of_copy;
  if (!r.approximate.empty()) {
    j["approximate"] = r.approximate;
    j["status_text"] = r.status_text();
  }
  for (const auto& k : r.kernels)
    j["kernels"].push_back({{"name", k.name},
                            {"threads", k.threads},
                            {"registers", k.registers},
                            {"local_bytes", k.local_bytes},
                            {"static_smem", k.static_smem},
                            {"dynamic_smem", k.dynamic_smem},
                            {"blocks_per_sm", k.blocks_per_sm},
                            {"occupancy", k.occupancy}});
  return j;
}

}  // namespace

nlohmann::json to_json(const Report& report) {
  nlohmann::json runs = nlohmann::json::array();
  for (const auto& run : report.runs) {
    nlohmann::json rows = nlohmann::json::array();
    for (const auto& r : run.rows) rows.push_back(to_json(r));
    runs.push_back({{"kind", kind_name(run.kind)},
                    {"shape", run.shape_json},
                    {"shape_text", run.shape},
                    {"memory_bound", run.memory_bound},
                    {"notes", run.notes},
                    {"gpu_after", run.gpu_after ? to_json(*run.gpu_after) : nlohmann::json(nullptr)},
                    {"rows", rows}});
  }
  const BuildInfo& build = build_info();
  const TimingOptions& t = report.timing;
  return {{"schema", "attention-ladder/results/1"},
          {"provenance",
           {{"gpu", to_json(report.gpu)},
            {"gpu_after", to_json(report.gpu_after)},
            {"git_commit", git_commit()},
            {"git_dirty", git_dirty()},
            {"tree_hash", tree_hash().empty() ? nlohmann::json(nullptr) : nlohmann::json(tree_hash())},
            {"build",
             {{"commit", build.commit},
              {"dirty", build.dirty},
              {"tree_hash", build.tree_hash},
              {"nvcc", build.nvcc},
              {"cuda_flags", build.cuda_flags},
              {"build_type", build.build_type},
              {"cuda_architectures", build.architectures}}},
            {"timing",
             {{"warmup_ms", t.warmup_ms},
              {"min_reps", t.min_reps},
              {"max_reps", t.max_reps},
              {"target_ms_per_round", t.target_ms},
              {"rounds", t.rounds},
              {"round_order", "alternating: ladder order, reverse, ladder order, ..."},
              {"flush_l2", t.flush != L2Flush::none},
              {"l2_flush", to_string(t.flush)},
              {"launch_gate", t.gate},
              {"statistic", "median of CUDA-event times, all rounds pooled"}}},
            {"date", report.started_at},
            {"host", host_name()},
            {"command_line", report.command_line}}},
          {"runs", runs}};
}

void write_json(const Report& report, const std::string& path) {
  std::ofstream out(path);
  if (!out) throw std::ios_base::failure(fmt::format("cannot open {} for writing", path));
  out << to_json(report).dump(1) << "\n";
  if (!out) throw std::ios_base::failure(fmt::format("failed writing {}", path));
}

bool any_lesson_ran(const Report& report) {
  for (const auto& run : report.runs)
    for (const auto& r : run.rows)
      if (!r.peer && !r.ceiling && r.status != Row::Status::Skipped) return true;
  return false;
}

bool all_passed(const Report& report) {
  for (const auto& run : report.runs)
    for (const auto& r : run.rows) {
      if (r.status == Row::Status::Failed) return false;
      if (r.status_text() == "FAIL") return false;  // an "approx" row is a measured trade, not a bug
      for (const auto& [name, e] : r.gradient_errors)
        if (!e.pass) return false;
      if (r.rerun_identical && !*r.rerun_identical && r.deterministic) return false;
    }
  return true;
}

}  // namespace ladder
