// One row per variant run, printed as a table and written as JSON with provenance.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

#include "common/compare.hpp"
#include "common/gpu_info.hpp"
#include "common/problem.hpp"
#include "common/timing.hpp"

namespace ladder {

// The compiler's and the occupancy calculator's view of one kernel of a variant.
struct KernelResources {
  std::string name;
  int threads = 0;
  int registers = 0;            // per thread
  int local_bytes = 0;          // per thread: spills and local arrays (0 is the goal)
  std::size_t static_smem = 0;  // bytes per block
  std::size_t dynamic_smem = 0;
  int blocks_per_sm = 0;        // resident blocks per SM at this configuration
  double occupancy = 0;         // resident warps / the SM's maximum
};

struct Row {
  std::string id;  // "05/bc32"
  int step = -1;
  std::string variant, description;
  bool peer = false;
  bool ceiling = false;
  std::string approximate;  // the variant trades accuracy on purpose (Variant::approximate), why
  // The row's outcome: "pass", "approx" (an approximate variant past the pass rule but within
  // kApproximateSlack of it), "FAIL", "skipped", or "-" (not checked).
  std::string status_text() const;  // a yardstick row (the device-to-device copy), not a solution

  enum class Status { Ok, Failed, Skipped } status = Status::Ok;
  std::string note;  // why it was skipped or failed
  std::string duplicate_of;  // skipped because at this shape it is the same kernel as this id

  std::optional<Timing> timing;
  double flops = 0, bytes = 0;  // per launch, the problem's counts (not the kernel's traffic)

  std::optional<ErrorStats> error;      // against the references
  std::optional<ErrorStats> lse_error;  // for variants that write the log-sum-exp
  // fp8 problems only: ‖O − ref‖ / ‖ref‖ over the checked rows, ref the fp64 attention of the
  // inputs before their e4m3 quantization (what FlashAttention-3's paper measures). Reported, not
  // judged: the pass rule's references are those of the quantized inputs (compare.hpp).
  std::optional<double> error_vs_unquantized;
  // Backward problems: one check per gradient ("dQ", "dK", "dV"); `error` is then the one that
  // fails, or the one nearest its tolerance, so the table's columns show the worst gradient.
  std::vector<std::pair<std::string, ErrorStats>> gradient_errors;
  std::string baseline;                 // id this row is compared with
  std::optional<double> speedup;        // baseline median / this median
  bool same_speed = false;              // the difference is inside the spread
  std::optional<double> diff_vs_baseline;  // max |this output − baseline output|
  std::optional<bool> rerun_identical;     // the last timed launch's output equals the checked one
  std::optional<double> rerun_max_abs;     // where it does not: max |Δ| between the two (atomics)
  std::optional<double> percent_of_gemm;   // attention: 100 · TFLOP/s / the fp16 GEMM ceiling's
  std::optional<double> percent_of_copy;   // memory-bound attention: 100 · GB/s / the copy's
  bool deterministic = true;
  std::vector<KernelResources> kernels;

  double tflops() const;
  double gbps() const;
};

struct ProblemRun {
  Kind kind = Kind::Attention;
  // An attention problem bound by memory (decode): the table's rate column is GB/s, with the
  // device-to-device copy as its yardstick, and TFLOP/s follows each row.
  bool memory_bound = false;
  std::string shape;     // human readable
  nlohmann::json shape_json;
  std::vector<Row> rows;
  std::vector<std::string> notes;  // steps' ledgers and the like, printed under the table
  std::optional<GpuInfo> gpu_after;  // clocks re-read right after this problem's timing
};

struct Report {
  GpuInfo gpu;
  GpuInfo gpu_after;  // clocks re-read after the last timing
  std::string command_line;
  std::string started_at;
  TimingOptions timing;  // the settings every row was timed with
  std::vector<ProblemRun> runs;
};

void print_table(const ProblemRun& run, bool show_resources);
nlohmann::json to_json(const Report& report);
void write_json(const Report& report, const std::string& path);
nlohmann::json to_json(const GpuInfo& gpu);

// True if every row that ran passed its checks.
bool all_passed(const Report& report);
// True if at least one row that is not a peer or a ceiling ran (was not skipped).
bool any_lesson_ran(const Report& report);

}  // namespace ladder
