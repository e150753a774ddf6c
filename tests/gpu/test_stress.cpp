// Step 25's ring under late consumers (docs/25_hopper_backward.md, "What racecheck
// reports"). 25/late_consumers is head_by_head with every consumer warp waiting a clock spin
// before it reads a stage's lse and D, while the producer fills the other stage: had a stage been
// released before those reads, the producer would now overwrite them, and the gradients would
// change. On the same inputs, over a ragged grid, the stress variant's dK and dV must be bit for
// bit those of the three measured variants (each key block's dK and dV are summed by one
// warpgroup in one order), and its dQ must pass the pass rule and differ from theirs only by the
// float atomics' order (dQ is added into an fp32 accumulator by every key block, in no fixed
// order, so reruns already differ in the last bits).
//
// The outputs come from the runner's own --save files (run_backward with RunOptions::save_dir):
// the same launches, checks and inputs as every other backward test, nothing re-implemented.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "common/dtype.hpp"
#include "common/runner.hpp"
#include "tests/catch.hpp"
#include "tests/gpu/gpu_support.hpp"

using namespace ladder;

namespace {

constexpr const char* kStress = "25/late_consumers";
constexpr const char* kMeasured[] = {"25/one_consumer", "25/two_consumers", "25/head_by_head"};
constexpr int kSeqlens[] = {333, 700, 1000};  // ragged: the ring wraps, the last blocks are partial
constexpr int kHeadDims[] = {64, 128};
constexpr int kHeadCounts[] = {1, 3};  // B·H, with B = 1
// Rows checked against the fp64 reference per problem: the pass rule is the harness's; what this
// test adds is the comparison of whole tensors below, which needs no reference.
constexpr std::int64_t kReferenceRows = 512;
// dQ: the same partial products added in another order differ by a few fp32 roundings of the
// partial sums. In the element type that is at most a rounding flip (1 ulp); 4 ulps leaves room.
// Where a value is near zero its ulp is far below fp32's noise on the partial sums, hence the
// floor, relative to the tensor's largest value: 2^-16, 256 fp32 ulps of it.
constexpr double kDqUlps = 4;
constexpr double kDqNoiseFloor = 1.0 / 65536;

// A scratch folder for the runner's .npy files, removed with everything in it.
struct ScratchDir {
  std::filesystem::path path;
  ScratchDir() {
    path = std::filesystem::temp_directory_path() / ("ladder_stress_" + std::to_string(std::random_device{}()));
    std::filesystem::create_directories(path);
  }
  ~ScratchDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
};

// The data bytes of a .npy file (format 1.0, as common/npy.cpp writes it): the header skipped.
std::vector<char> npy_payload(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  INFO(file.string());
  REQUIRE(in.good());
  const std::vector<char> bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  constexpr std::size_t kPrelude = 10;  // magic (6), version (2), header length (2, little-endian)
  REQUIRE(bytes.size() >= kPrelude);
  REQUIRE(std::string(bytes.data() + 1, 5) == "NUMPY");
  const std::size_t header = kPrelude + std::size_t(std::uint8_t(bytes[8])) + (std::size_t(std::uint8_t(bytes[9])) << 8);
  REQUIRE(bytes.size() >= header);
  return {bytes.begin() + std::ptrdiff_t(header), bytes.end()};
}

// The runner saves fp16 as "<f2" (the bits) and bf16 widened to "<f4" (exact): values as floats.
std::vector<float> npy_values(const std::vector<char>& payload, DType dtype) {
  std::vector<float> out;
  if (dtype == DType::F16) {
    std::vector<std::uint16_t> bits(payload.size() / 2);
    std::memcpy(bits.data(), payload.data(), bits.size() * 2);
    for (auto b : bits) out.push_back(from_bits(dtype, b));
  } else {
    out.resize(payload.size() / 4);
    std::memcpy(out.data(), payload.data(), out.size() * 4);
  }
  return out;
}

// How many bytes of two saved tensors differ, and where the first does (the size where none).
std::pair<std::size_t, std::size_t> byte_differences(const std::vector<char>& a, const std::vector<char>& b) {
  std::size_t differing = 0, first = a.size();
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i]) {
      first = std::min(first, i);
      ++differing;
    }
  return {differing, first};
}

// One unit in the last place of |x| in the element type (subnormals included).
double element_ulp(double x, DType dtype) {
  const int fraction = fraction_bits(dtype);
  const int min_exponent = dtype == DType::F16 ? -14 : -126;  // of the smallest normal
  int exponent = 0;
  std::frexp(std::fabs(x), &exponent);  // |x| = m · 2^exponent, m in [0.5, 1)
  return std::ldexp(1.0, std::max(exponent - 1, min_exponent) - fraction);
}

std::string dir_of(const AttentionShape& s) {  // the runner's folder name for a backward problem
  return "backward_B" + std::to_string(s.batch) + "_H" + std::to_string(s.heads) + "_N" + std::to_string(s.seqlen) +
         "_D" + std::to_string(s.head_dim) + (s.causal ? "_causal" : "_full") + (s.dtype == DType::BF16 ? "_bf16" : "");
}
std::string file_of(const std::string& id) {  // "25/late_consumers" -> "25_late_consumers"
  std::string s = id;
  std::replace(s.begin(), s.end(), '/', '_');
  return s;
}

}  // namespace

TEST_CASE("step 25: late consumers change no gradient (dK, dV bit for bit; dQ within the atomics' noise)",
          "[gpu][backward][stress]") {
  std::vector<VariantRef> variants;
  for (const auto& ref : testing::variants_of(Kind::Backward))
    if (ref.id() == kStress || std::find(std::begin(kMeasured), std::end(kMeasured), ref.id()) != std::end(kMeasured))
      variants.push_back(ref);
  if (variants.empty()) return;  // another step's ctest entry (LADDER_TEST_STEP)
  REQUIRE(variants.size() == std::size(kMeasured) + 1);
  const auto stress_at = std::find_if(variants.begin(), variants.end(), [](const VariantRef& r) { return r.id() == kStress; });
  REQUIRE(stress_at != variants.end());
  REQUIRE_FALSE(stress_at->variant().test_only.empty());
  if (const auto why = stress_at->variant().constraints.refuse(AttentionShape{.seqlen = 333, .head_dim = 64},
                                                              testing::session().gpu.sm)) {
    WARN("step 25 does not run on this GPU: " << *why);
    return;
  }

  const ScratchDir scratch;
  RunOptions options = testing::check_options();
  options.max_reference_rows = kReferenceRows;
  options.save_dir = scratch.path.string();
  int compared = 0;
  double worst_dq_ulps = 0;
  for (DType dtype : {DType::F16, DType::BF16})
    for (int heads : kHeadCounts)
      for (int d : kHeadDims)
        for (bool causal : {false, true})
          for (int n : kSeqlens) {
            const AttentionShape shape{.batch = 1, .heads = heads, .seqlen = n, .head_dim = d, .causal = causal,
                                       .dtype = dtype};
            INFO(shape.to_string());
            const ProblemRun run = run_backward(testing::session(), shape, variants, options);
            REQUIRE_FALSE(testing::session().context_lost);
            REQUIRE(run.rows.size() == variants.size());
            double rerun_noise = 0;  // the measured variants' own rerun differences (dQ's atomics)
            for (const Row& r : run.rows) {
              INFO(r.id << ": " << r.note);
              REQUIRE(r.status == Row::Status::Ok);
              REQUIRE(r.gradient_errors.size() == 3);
              for (const auto& [name, e] : r.gradient_errors) {
                INFO(name << ": " << e.verdict());
                CHECK(e.pass);  // dQ "within the pass rule" is this, for every variant
              }
              if (r.rerun_max_abs) rerun_noise = std::max(rerun_noise, *r.rerun_max_abs);
            }

            const auto dir = scratch.path / dir_of(shape);
            auto payload = [&](const char* gradient, const std::string& id) {
              return npy_payload(dir / (std::string(gradient) + "_" + file_of(id) + ".npy"));
            };
            const auto stress_dk = payload("dk", kStress), stress_dv = payload("dv", kStress);
            const auto stress_dq = npy_values(payload("dq", kStress), dtype);
            REQUIRE(stress_dq.size() == std::size_t(shape.elements()));
            for (const char* id : kMeasured) {
              INFO(kStress << " against " << id
                   << (std::string(id) == "25/one_consumer"
                           ? " (64 keys per CTA: another tile, whose per-key sums still run in the same order)"
                           : " (the same tile, without the delay)"));
              // dK and dV: one warpgroup sums each key's over the query blocks in one order.
              for (const auto& [gradient, mine] : {std::pair{"dk", &stress_dk}, std::pair{"dv", &stress_dv}}) {
                const auto theirs = payload(gradient, id);
                REQUIRE(theirs.size() == mine->size());
                const auto [differing, first] = byte_differences(theirs, *mine);
                INFO(gradient << ": " << differing << " of " << theirs.size() << " bytes differ, the first at " << first);
                CHECK(differing == 0);
              }
              // dQ: summed across key blocks in another order (one_consumer: over other blocks too).
              const auto dq = npy_values(payload("dq", id), dtype);
              REQUIRE(dq.size() == stress_dq.size());
              double largest = 0, max_diff = 0, worst = 0;
              for (float x : dq) largest = std::max(largest, double(std::fabs(x)));
              std::size_t outside = 0;
              for (std::size_t i = 0; i < dq.size(); ++i) {
                const double a = dq[i], b = stress_dq[i], diff = std::fabs(a - b);
                const double ulp = element_ulp(std::max(std::fabs(a), std::fabs(b)), dtype);
                max_diff = std::max(max_diff, diff);
                worst = std::max(worst, diff / ulp);
                outside += diff > kDqUlps * ulp + kDqNoiseFloor * largest;
              }
              worst_dq_ulps = std::max(worst_dq_ulps, worst);
              INFO("dQ: max |stress - " << id << "| = " << max_diff << " (" << worst << " ulps at worst); the "
                   << "measured variants' own rerun noise here: " << rerun_noise);
              CHECK(outside == 0);
              ++compared;
            }
          }
  CHECK(compared == int(std::size(kMeasured)) * 2 * 2 * 2 * 2 * int(std::size(kSeqlens)));
  WARN("late consumers: dK and dV compared bit for bit with 3 variants on " << compared / 3
       << " problems; dQ within " << worst_dq_ulps << " ulps of the element type at worst");
}
