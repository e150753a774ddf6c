// Every backward variant (Part V) against the fp64 reference on a grid of ragged shapes, every
// gradient; and the fp64 forward on the GPU that the backward's reference starts from.
#include <algorithm>
#include <cmath>
#include <span>
#include <vector>

#include "common/compare.hpp"
#include "common/device_buffer.hpp"
#include "common/random.hpp"
#include "common/reference.hpp"
#include "common/reference_gpu.hpp"
#include "common/runner.hpp"
#include "tests/catch.hpp"
#include "tests/gpu/gpu_support.hpp"

using namespace ladder;

namespace {

// As for the forward: a row that ran passes every gradient's check; a skip is allowed only where
// the variant's declared constraints rule the problem out.
// peer_slack: how far past its tolerance a library row may be (1: not at all). Our rule is
// stricter than cuDNN's own numerics in one place, measured in round 2 of Part V: with large
// logits (Q×5, K×3) cuDNN's dK errs by 3-4x the tolerance our kernels meet (they round P and dS
// as the reference does). A peer is not a lesson; the slack keeps its wiring checked (a wrong
// layout or mask errs by orders of magnitude) and the excess is printed.
void check_backward_run(const ProblemRun& run, std::span<const VariantRef> variants,
                        const AttentionShape& shape, double peer_slack = 1.0) {
  REQUIRE(run.rows.size() == variants.size());
  for (std::size_t i = 0; i < run.rows.size(); ++i) {
    const Row& r = run.rows[i];
    INFO(r.id << " on " << run.shape << ": " << r.note);
    if (r.status == Row::Status::Skipped) {
      if (!r.duplicate_of.empty() || r.peer) continue;
      CHECK(variants[i].variant().constraints.refuse(shape, testing::session().gpu.sm));
      continue;
    }
    REQUIRE(r.status == Row::Status::Ok);
    REQUIRE(r.gradient_errors.size() == 3);
    for (const auto& [name, e] : r.gradient_errors) {
      INFO(name << ": " << e.verdict() << " (rel L2 " << e.rel_l2 << ")");
      CHECK(e.checked > 0);
      CHECK(e.nonfinite == 0);
      if (r.peer && !e.pass) {
        WARN(r.id << " " << name << " on " << run.shape << ": " << e.worst_error / e.tolerance
                  << "x its tolerance (a library's numerics; allowed up to " << peer_slack << "x)");
        CHECK(e.worst_error <= peer_slack * e.tolerance);
      } else {
        CHECK(e.pass);
      }
    }
    REQUIRE(r.rerun_identical);
    if (r.deterministic) CHECK(*r.rerun_identical);
  }
}

std::vector<VariantRef> of_dtype(DType dtype) {
  std::vector<VariantRef> out;
  for (const auto& ref : testing::variants_of(Kind::Backward)) {
    const auto& types = ref.variant().constraints.dtypes;
    if (std::find(types.begin(), types.end(), dtype) != types.end()) out.push_back(ref);
  }
  return out;
}

// The full grid's query lengths (LADDER_TEST_GRID=full); the quick grid's are
// testing::kQuickSeqlens, whose 600 also wraps the backward's rings (5 key blocks of 128, 10
// query blocks of 64; tests/gpu/gpu_support.hpp).
constexpr int kSeqlens[] = {1, 17, 64, 113, 128, 129, 1000, 2048};
constexpr int kHeadDims[] = {64, 128};

}  // namespace

TEST_CASE("the fp64 forward on the GPU equals the CPU's on every row", "[gpu][backward]") {
  if (testing::variants_of(Kind::Backward).empty()) return;  // checked under the backward steps' entries
  for (DType dtype : {DType::F16, DType::BF16})
    for (int d : kHeadDims)
      for (bool causal : {false, true}) {
        const AttentionShape s{.batch = 2, .heads = 3, .seqlen = 333, .head_dim = d, .causal = causal,
                               .dtype = dtype};
        const std::size_t elements = std::size_t(s.elements()), rows = std::size_t(s.rows());
        const Tensor16 q = random_tensor16(elements, 3, 1, dtype), k = random_tensor16(elements, 3, 2, dtype),
                       v = random_tensor16(elements, 3, 3, dtype), d_o = random_tensor16(elements, 3, 4, dtype);
        DeviceBuffer<std::uint16_t> dq(elements), dk(elements), dv(elements), ddo(elements), o(elements);
        DeviceBuffer<float> lse(rows);
        DeviceBuffer<double> lse64(rows), delta64(rows);
        dq.upload(q.bits);
        dk.upload(k.bits);
        dv.upload(v.bits);
        ddo.upload(d_o.bits);
        forward_for_backward_gpu(s, dq.get(), dk.get(), dv.get(), ddo.get(),
                                 {o.get(), lse.get(), lse64.get(), delta64.get()}, nullptr);
        CUDA_CHECK(cudaDeviceSynchronize());
        const ForwardForBackward cpu = forward_for_backward_fp64(s, q.value, k.value, v.value, d_o.value);
        const auto o_bits = o.download();
        const auto gpu_lse = lse64.download(), gpu_delta = delta64.download();
        const auto gpu_lse32 = lse.download();
        INFO(s.to_string());
        double worst_o = 0;
        for (std::size_t i = 0; i < elements; ++i) {
          // The same O in double to ~1e-15, so its rounding matches except at an exact tie.
          // One ulp of the value's binade (subnormals included: attention_abs_term floors at 2^-24).
          const double ulp = attention_abs_term(std::fabs(cpu.o[i]), dtype);
          worst_o = std::max(worst_o, std::fabs(double(from_bits(dtype, o_bits[i])) - cpu.o[i]) / ulp);
        }
        CHECK(worst_o <= 1.0);
        for (std::size_t r = 0; r < rows; ++r) {
          CHECK(std::fabs(gpu_lse[r] - cpu.stats.lse[r]) <= 1e-9 * std::max(1.0, std::fabs(cpu.stats.lse[r])));
          CHECK(std::fabs(gpu_delta[r] - cpu.stats.delta[r]) <= 1e-9 * (1 + std::fabs(cpu.stats.delta[r])));
          CHECK(gpu_lse32[r] == float(gpu_lse[r]));
        }
      }
}

TEST_CASE("backward: ragged grid, causal and not, fp16 and bf16", "[gpu][backward]") {
  for (DType dtype : {DType::F16, DType::BF16}) {
    const auto variants = of_dtype(dtype);
    if (variants.empty()) continue;
    for (const auto [heads, n] : testing::ragged_grid(kSeqlens, variants))
      for (int d : kHeadDims)
        for (bool causal : {false, true}) {
          const AttentionShape shape{.batch = 1, .heads = heads, .seqlen = n, .head_dim = d,
                                     .causal = causal, .dtype = dtype};
          check_backward_run(run_backward(testing::session(), shape, variants, testing::check_options()),
                             variants, shape);
          REQUIRE_FALSE(testing::session().context_lost);
        }
  }
}

TEST_CASE("backward: large logits (Q×5, K×3) and a second seed", "[gpu][backward]") {
  for (DType dtype : {DType::F16, DType::BF16}) {
    const auto variants = of_dtype(dtype);
    if (variants.empty()) continue;
    RunOptions options = testing::check_options();
    options.q_scale = 5.0f;
    options.k_scale = 3.0f;
    // The quick grid's at one batch: a gradient's reference row costs four dot products a key, and
    // these were half of a backward entry's time (the second seed's problem has B = 3).
    const int batch = testing::full_grid() ? 2 : 1;
    for (int d : kHeadDims)
      for (bool causal : {false, true}) {
        const AttentionShape shape{.batch = batch, .heads = 3, .seqlen = testing::long_seqlen(), .head_dim = d,
                                   .causal = causal, .dtype = dtype};
        check_backward_run(run_backward(testing::session(), shape, variants, options), variants, shape,
                           /*peer_slack=*/8.0);
      }
    options = testing::check_options();
    options.seed = 7;
    const AttentionShape shape{.batch = 3, .heads = 2, .seqlen = 333, .head_dim = 128, .causal = true,
                               .dtype = dtype};
    check_backward_run(run_backward(testing::session(), shape, variants, options), variants, shape);
  }
}
