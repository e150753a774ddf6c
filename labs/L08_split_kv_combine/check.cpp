// Lab 08's checker (given, do not edit): your combine.hpp's answers 1 and 2 in a CPU combine
// first (no GPU needed), then the kernel that runs your combine_row (combine_kernel.cu) on the
// same cases: S ∈ {1, 2, 7, 64} splits × D ∈ {64, 128}, rows with no key, one key, empty splits
// in the middle and at the end, logits up to ±3000; outputs poisoned with NaN, two launches
// compared bit for bit, every row against the fp64 softmax over all its keys.
#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

// <>, not "": your answers or the solution's (labs/CMakeLists.txt), the kernel's file.
#include <combine.hpp>

#include "common/check.hpp"
#include "common/device_buffer.hpp"
#include "labs/L08_split_kv_combine/lab08.hpp"
#include "labs/L08_split_kv_combine/model.hpp"
#include "labs/common/lab.hpp"

namespace {

lab08::model::Answers yours() { return {combine::merged_lse, combine::split_weight}; }

// One case on the GPU; empty = every row right, else the first wrong row.
std::string run_case(const lab08::model::Case& c, std::string& figures) {
  using ladder::DeviceBuffer;
  DeviceBuffer<float> o_part(c.o_part.size()), lse_part(c.lse_part.size());
  o_part.upload(c.o_part);
  lse_part.upload(c.lse_part);
  DeviceBuffer<float> o(std::size_t(c.rows) * c.head_dim), lse(c.rows);
  std::vector<float> o_got, lse_got;
  bool identical = true;
  for (int run = 0; run < 2; ++run) {
    o.fill_bytes(0xFF, nullptr);  // NaN: every element must be written
    lse.fill_bytes(0xFF, nullptr);
    lab08::launch_combine(o_part.get(), lse_part.get(), c.rows, c.splits, c.head_dim, o.get(), lse.get(), nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
    auto o_now = o.download(), lse_now = lse.download();
    if (run == 1)
      identical = std::memcmp(o_now.data(), o_got.data(), o_now.size() * sizeof(float)) == 0 &&
                  std::memcmp(lse_now.data(), lse_got.data(), lse_now.size() * sizeof(float)) == 0;
    o_got = std::move(o_now);
    lse_got = std::move(lse_now);
  }
  double worst = 0;  // the largest error as a fraction of its row's allowance
  for (int r = 0; r < c.rows; ++r) {
    if (auto why = lab08::model::judge_row(c, r, &o_got[std::size_t(r) * c.head_dim], lse_got[r]); !why.empty())
      return why;
    for (int d = 0; d < c.head_dim && c.keys[r] > 0; ++d)
      worst = std::max(worst, std::abs(o_got[std::size_t(r) * c.head_dim + d] - c.o_ref[std::size_t(r) * c.head_dim + d]) /
                                  c.o_tol[r]);
  }
  if (!identical) return "a second launch gave different bits (a race on the shared weights? a missing __syncthreads?)";
  figures = fmt::format("{} rows, worst o error {:.2f} of its allowance", c.rows, worst);
  return {};
}

}  // namespace

int main(int argc, char** argv) {
  const lab::Options options = lab::parse(argc, argv, "L08", "the split-KV combine");
  lab::Verdict verdict("L08");

  fmt::print("your answers (combine.hpp):\n");
  const float two_halves[2] = {0.f, 0.f}, big[2] = {1000.f, 1000.f}, none[2] = {-INFINITY, -INFINITY};
  fmt::print("  merged_lse({{0, 0}}) = {} (log 2 = {:.6f}); merged_lse({{1000, 1000}}) = {}; "
             "merged_lse({{-inf, -inf}}) = {}\n",
             combine::merged_lse(two_halves, 2), std::log(2.0), combine::merged_lse(big, 2), combine::merged_lse(none, 2));
  fmt::print("  split_weight(0, log 2) = {}; split_weight(-inf, 5) = {}; split_weight(-inf, -inf) = {}\n",
             combine::split_weight(0.f, float(std::log(2.0))), combine::split_weight(-INFINITY, 5.f),
             combine::split_weight(-INFINITY, -INFINITY));

  // ---- The CPU combine ----
  fmt::print("\nthe CPU combine: answers 1 and 2 on hand-picked values, then on S = 1, 2, 7, 64 × D = 64, 128 "
             "(96 rows each) against the fp64 softmax over all keys\n");
  const auto finding = lab08::model::check(yours());
  if (finding.check) {
    fmt::print("model: FAIL, check {} ({}): {}\n", finding.check, lab08::model::check_name(finding.check), finding.what);
    verdict.fail(fmt::format("the model, check {} ({}): {}", finding.check, lab08::model::check_name(finding.check),
                             finding.what));
  } else {
    fmt::print("model: PASS (merged_lse, split_weight, the combine on 8 cases)\n");
  }
  if (options.cpu_only) return verdict.finish_cpu_only();

  // ---- The kernel (GPU) ----
  std::string why_not;
  auto session = lab::open_gpu(why_not);
  if (!session) return verdict.finish_without_gpu(why_not);
  try {
    fmt::print("\nthe kernel (your combine_row, one block per row): outputs poisoned with NaN, two launches "
               "compared bit for bit\n");
    for (const auto& c : lab08::model::grid(1000)) {
      std::string figures;
      const std::string why = run_case(c, figures);
      fmt::print("  {:<22} {}  {}\n", c.name(), why.empty() ? " ok " : "FAIL", why.empty() ? figures : why);
      if (!why.empty()) verdict.fail(fmt::format("{}: {}", c.name(), why));
    }
  } catch (const std::exception& e) {
    verdict.fail(std::string("the checker stopped: ") + e.what());
  }
  return verdict.finish();
}
