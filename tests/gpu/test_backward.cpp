// Every backward variant (Part V) against the fp64 reference on a grid of ragged shapes, every
// gradient; the variants that serve GQA or varlen (Part VI) on grids of those; and the fp64
// forward on the GPU that the backward's reference starts from, in every layout.
#include <algorithm>
#include <cmath>
#include <random>
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

std::vector<VariantRef> of_dtype(DType dtype, unsigned features = 0) {
  std::vector<VariantRef> out;
  for (const auto& ref : testing::variants_of(Kind::Backward)) {
    const auto& c = ref.variant().constraints;
    if (std::find(c.dtypes.begin(), c.dtypes.end(), dtype) != c.dtypes.end() && (c.features & features) == features)
      out.push_back(ref);
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
  std::vector<AttentionShape> shapes;
  for (int d : kHeadDims)
    for (bool causal : {false, true}) {
      shapes.push_back({.batch = 2, .heads = 3, .seqlen = 333, .head_dim = d, .causal = causal});
      shapes.push_back({.batch = 2, .heads = 4, .seqlen = 129, .head_dim = d, .causal = causal, .kv_heads = 2});
      shapes.push_back({.batch = 4, .heads = 4, .seqlen = 300, .head_dim = d, .causal = causal, .kv_heads = 1,
                        .q_lens = {17, 1, 300, 128}});
    }
  for (DType dtype : {DType::F16, DType::BF16})
    for (AttentionShape s : shapes) {
      s.dtype = dtype;
      const std::size_t elements = std::size_t(s.elements()), rows = std::size_t(s.rows());
      const std::size_t kv = std::size_t(s.kv_rows()) * s.head_dim;
      const Tensor16 q = random_tensor16(elements, 3, 1, dtype), k = random_tensor16(kv, 3, 2, dtype),
                     v = random_tensor16(kv, 3, 3, dtype), d_o = random_tensor16(elements, 3, 4, dtype);
      DeviceBuffer<std::uint16_t> dq(elements), dk(kv), dv(kv), ddo(elements), o(elements);
      DeviceBuffer<float> lse(rows);
      DeviceBuffer<double> lse64(rows), delta64(rows);
      const RowIndex index(s);
      DeviceBuffer<int> cu_q(index.cu_q.size()), cu_k(index.cu_k.size());
      cu_q.upload(index.cu_q);
      cu_k.upload(index.cu_k);
      dq.upload(q.bits);
      dk.upload(k.bits);
      dv.upload(v.bits);
      ddo.upload(d_o.bits);
      forward_for_backward_gpu(s, dq.get(), dk.get(), dv.get(), ddo.get(),
                               {o.get(), lse.get(), lse64.get(), delta64.get()}, nullptr,
                               s.varlen() ? cu_q.get() : nullptr, s.varlen() ? cu_k.get() : nullptr);
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
        // The fp32 LSE where a forward stores it (varlen: [H, total_q]).
        const auto [b, h, i] = index.coord(std::int64_t(r));
        CHECK(gpu_lse32[std::size_t(index.lse_index(b, h, i))] == float(gpu_lse[r]));
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

namespace {

constexpr unsigned kGqa = unsigned(Feature::Gqa), kVarlen = unsigned(Feature::Varlen);

// The GQA and varlen grids' checks: sampled rows (every (sequence, head, tile) and each sequence's
// first and last row, then random ones; every element for the poison) rather than all of them: at
// H = 8 a dK/dV row sums over a group of up to 8 heads' queries, and all rows of the quick grid
// would be several times the dense grid's reference work.
RunOptions serving_check_options() {
  RunOptions o = testing::check_options();
  o.max_reference_rows = testing::full_grid() ? 1 << 14 : 1024;
  return o;
}

}  // namespace

TEST_CASE("backward GQA: groups of 1, 4 and 8 on a ragged grid, causal and not, fp16 and bf16",
          "[gpu][backward][gqa]") {
  // H = 8 with Hkv = 8, 2, 1. Quick grid: ragged 113 (two sequences: the batch stride of K/V is
  // Hkv's), 384 (a whole number of every tile) and 600 (the rings wrap), one sequence each; the
  // full grid adds 1, 17, 129 and 1000, two sequences each. A library peer gets each group once.
  struct Point {
    int kv_heads, head_dim, seqlen;
  };
  for (DType dtype : {DType::F16, DType::BF16}) {
    const auto variants = of_dtype(dtype, kGqa);
    if (variants.empty()) continue;
    std::vector<Point> points;
    if (!testing::full_grid() && testing::only_peers(variants)) {
      points = {{8, 64, 113}, {2, 128, 384}, {1, 128, 600}};
    } else {
      const std::vector<int> lengths = testing::full_grid() ? std::vector<int>{1, 17, 113, 129, 384, 600, 1000}
                                                            : std::vector<int>{113, 384, 600};
      for (int kv_heads : {8, 2, 1})
        for (int d : kHeadDims)
          for (int n : lengths) points.push_back({kv_heads, d, n});
    }
    for (const auto& [kv_heads, d, n] : points)
      for (bool causal : {false, true}) {
        const int batch = testing::full_grid() || n == 113 ? 2 : 1;
        const AttentionShape shape{.batch = batch, .heads = 8, .seqlen = n, .head_dim = d, .causal = causal,
                                   .dtype = dtype, .kv_heads = kv_heads};
        check_backward_run(run_backward(testing::session(), shape, variants, serving_check_options()),
                           variants, shape);
        REQUIRE_FALSE(testing::session().context_lost);
      }
  }
}

TEST_CASE("backward varlen: a packed batch of ragged lengths, with and without GQA",
          "[gpu][backward][varlen]") {
  // Every tile edge: 1, one short of a 128-row tile, a tile, one past, and 1000 (the rings wrap);
  // shuffled, seeded. The full grid adds one sequence of 16384 (at D = 128: its CPU reference is
  // the grid's most expensive). H = 4 with Hkv = 2 (GQA and varlen together) and Hkv = 4.
  std::vector<int> lens = {1, 17, 127, 128, 129, 1000};
  std::shuffle(lens.begin(), lens.end(), std::mt19937_64(20261215));
  for (DType dtype : {DType::F16, DType::BF16})
    for (int kv_heads : {2, 4})
      for (int d : kHeadDims)
        for (bool causal : {false, true})
          for (bool long_one : {false, true}) {
            if (long_one && !(testing::full_grid() && d == 128)) continue;
            AttentionShape shape{.batch = int(lens.size()), .heads = 4, .seqlen = 1000, .head_dim = d,
                                 .causal = causal, .dtype = dtype, .kv_heads = kv_heads, .q_lens = lens};
            if (long_one) {
              shape.q_lens.insert(shape.q_lens.begin() + 2, 16384);
              shape.batch += 1;
              shape.seqlen = 16384;
            }
            const auto variants = of_dtype(dtype, kVarlen | (shape.gqa() ? kGqa : 0u));
            if (variants.empty()) continue;
            check_backward_run(run_backward(testing::session(), shape, variants, serving_check_options()),
                               variants, shape);
            REQUIRE_FALSE(testing::session().context_lost);
          }
}

TEST_CASE("backward: decode shapes and paged caches are refused with the reason", "[gpu][backward]") {
  const auto variants = testing::variants_of(Kind::Backward);
  if (variants.empty()) return;
  const AttentionShape decode{.batch = 1, .heads = 2, .seqlen = 4, .head_dim = 64, .kv_seqlen = 256};
  const AttentionShape paged{.batch = 1, .heads = 2, .seqlen = 64, .head_dim = 64, .page_size = 64};
  for (const AttentionShape& shape : {decode, paged}) {
    INFO(shape.to_string());
    CHECK_THROWS_AS(run_backward(testing::session(), shape, variants, testing::check_options()), UsageError);
  }
}
