// What every lab's checker shares: finding the lab's variants in the registry, running the check
// grid through the harness (the same runner, references and pass rule as the ladder's GPU tests),
// and one verdict printed at the end, with an exit code a script can read.
//
// A lab kernel file registers itself like a step, with the number 50 + lab (51 … 60; L09, L11 and L12 run their own kernels and register none). It is linked
// only into its lab's checker, never into `ladder` or the GPU tests: a starter fails by design, and
// the ladder must not.
#pragma once

#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/registry.hpp"
#include "common/runner.hpp"

namespace lab {

// Exit codes of every checker (labs/check.sh reads them).
inline constexpr int kPass = 0;
inline constexpr int kFail = 1;    // a check failed: the message says which and why
inline constexpr int kUsage = 2;
inline constexpr int kNoGpu = 77;  // compiled and ran the CPU parts; no GPU to run the rest

struct Options {
  bool cpu_only = false;  // --cpu: the CPU parts only (what CI runs)
  bool no_time = false;   // --no-time: the check grid only, no timed run
  bool small = false;     // --small: N ∈ {113, 600} only, no large-logit set (compute-sanitizer's
                          // runs: ~100× slower, and 600 still wraps a 128-row ring)
};
// Parses --cpu, --no-time, --small, --help; exits on a bad argument.
Options parse(int argc, char** argv, const char* lab, const char* what);

// Collects failures; prints the verdict and returns the exit code.
class Verdict {
 public:
  explicit Verdict(std::string lab) : lab_(std::move(lab)) {}
  void fail(std::string why) { failures_.push_back(std::move(why)); }
  void info(std::string line) { infos_.push_back(std::move(line)); }
  bool ok() const { return failures_.empty(); }
  int finish() const;                 // PASS / FAIL
  int finish_without_gpu(const std::string& reason) const;  // CPU parts ran, GPU parts did not
  int finish_cpu_only() const;        // --cpu: the CPU parts' verdict

 private:
  std::string lab_;
  std::vector<std::string> failures_, infos_;
};

// The GPU session, or null with `reason` set (no GPU, or a driver CUDA cannot use).
std::unique_ptr<ladder::Session> open_gpu(std::string& reason);

// A CPU part of every checker: the lab's kernel file registered step `number` with these
// variants (a lab file that lost its registration block fails here, without a GPU).
void check_registration(int number, std::initializer_list<const char*> names, Verdict& verdict);

// Every variant of step `number`, in registration order; one variant by name.
std::vector<ladder::VariantRef> variants_of_step(int number);
ladder::VariantRef variant(int step, const std::string& name);

// Check-only options (no timing, every row against the reference) and timed options.
ladder::RunOptions check_options();
ladder::RunOptions timed_options();

// The ladder's ragged attention grid, a little smaller (three heads throughout):
// N ∈ {1, 17, 64, 113, 128, 1000, 2048}, D ∈ {64, 128}, causal and not.
std::vector<ladder::AttentionShape> attention_grid_shapes();
// The GPU tests' large-logit case: Q×5, K×3 (a running maximum that moves a lot), B=2 H=3 N=1000,
// D ∈ {64, 128}, causal and not.
std::vector<ladder::AttentionShape> large_logit_shapes();
ladder::RunOptions large_logit_options();

// Run check-only problems and judge every row as the GPU tests do; one line per problem and
// variant, failures recorded in `verdict`. Returns the number of failed rows.
int attention_grid(ladder::Session& session, std::span<const ladder::VariantRef> variants,
                   std::span<const ladder::AttentionShape> shapes, Verdict& verdict,
                   const ladder::RunOptions& options);
int matmul_grid(ladder::Session& session, std::span<const ladder::VariantRef> variants,
                std::span<const ladder::MatmulShape> shapes, Verdict& verdict);
int reduction_grid(ladder::Session& session, std::span<const ladder::VariantRef> variants,
                   std::span<const std::int64_t> counts, Verdict& verdict);

// The same judgement for one row (empty = passed; else why not).
std::string judge(const ladder::Row& row, const ladder::Variant& variant,
                  const ladder::Problem& problem, int sm);

// Prints a timed problem's table (the harness's own) and returns it.
ladder::ProblemRun show(ladder::ProblemRun run);

}  // namespace lab
