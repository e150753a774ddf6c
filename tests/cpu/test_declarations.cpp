// What each variant declares about the problems it launches for, checked against what its
// registration says in other words (kernel names, grid comments), so that a declaration that is
// missing or wrong fails here, on CI, without a GPU. Two defects of issue 13:
//   - a problem's resource table listed kernels the problem never launched (every causal kernel on
//     non-causal problems, with 0 blocks/SM);
//   - B·H > 65535 was refused for every variant, though only the grids that put B·H on grid.y or
//     grid.z have that limit.
#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "common/cli.hpp"
#include "common/peers/cudnn_attention.hpp"
#include "common/registry.hpp"
#include "tests/catch.hpp"

using namespace ladder;

namespace {

constexpr int kHopper = 90;  // every variant's compute capability is met: only the shape decides

// "fa_v2_1_kernel<D=64,Bc=32,causal>", "wgmma_kernel<D=64,128x128> causal": the steps name the
// causal instantiation of a kernel templated on the mask after the mask.
bool names_causal(const std::string& name) {
  return name.find("causal") != std::string::npos && name.find("non-causal") == std::string::npos;
}
// The name with the mask left out: a causal kernel and its non-causal twin have the same one.
std::string without_causal(std::string name) {
  for (const char* token : {" causal", ",causal", "causal"})
    if (auto at = name.find(token); at != std::string::npos) return name.erase(at, std::string(token).size());
  return name;
}


std::vector<DType> dtypes_of(const Variant& v) { return v.constraints.dtypes; }
std::vector<int> head_dims_of(const Variant& v) {
  return v.constraints.head_dims.empty() ? std::vector<int>{64, 128} : v.constraints.head_dims;
}

}  // namespace

TEST_CASE("a problem's resource table lists only the kernels it launches", "[registry][resources]") {
  int checked = 0;
  for (const auto& step : Registry::instance().steps()) {
    if (step.kind != Kind::Attention) continue;
    for (const auto& v : step.variants) {
      if (!v.kernels) continue;
      for (int d : head_dims_of(v)) {
        for (DType dtype : dtypes_of(v))
          for (bool causal : {false, true}) {
            const AttentionShape shape{.batch = 2, .heads = 3, .seqlen = 1000, .head_dim = d,
                                       .causal = causal, .dtype = dtype};
            // Not refuse(): the Hopper steps refuse every problem where there is no GPU (CI), and
            // their tables are the ones to check. The declared D and dtypes are what a problem asks.
            INFO(variant_id(step, v) << " on " << shape.to_string());
            const auto all = v.kernels(d);
            // A variant with no kernel at this D (22/three_consumers at D = 128) refuses it through
            // its own refuse_if, with the reason; there is no table to check.
            if (all.empty()) continue;
            const auto listed = v.launched_kernels(shape);
            // A problem the variant runs launches something: declaring the wrong mask (or dtype)
            // on every kernel would empty the table.
            CHECK_FALSE(listed.empty());
            for (const auto& k : listed) {
              INFO("listed: " << k.name);
              CHECK(k.dtype == dtype);
              if (!causal) CHECK_FALSE(names_causal(k.name));
              // On a causal problem, a kernel whose causal twin exists is the non-causal one.
              if (causal && !names_causal(k.name))
                for (const auto& other : all)
                  CHECK_FALSE((names_causal(other.name) && without_causal(other.name) == k.name));
            }
            ++checked;
          }
      }
    }
  }
  CHECK(checked > 100);  // the steps' tables were really looked at
}

TEST_CASE("launched_kernels keeps a kernel by its declared mask and element type", "[registry][resources]") {
  static const int a = 0, b = 0, c = 0;  // stand-ins for three __global__ functions
  Variant v = attention_variant("x", "x", [](const AttentionArgs&, cudaStream_t) {});
  v.with_kernels({KernelInfo{"both", &a, 128, 0},
                  KernelInfo{"full", &b, 128, 0}.when_causal(false),
                  KernelInfo{"masked causal", &c, 128, 0}.when_causal(true),
                  KernelInfo{"bf16", &a, 128, 0, DType::BF16}});
  auto names = [&](bool causal, DType dtype) {
    std::vector<std::string> out;
    for (const auto& k : v.launched_kernels({.causal = causal, .dtype = dtype})) out.push_back(k.name);
    return out;
  };
  CHECK(names(false, DType::F16) == std::vector<std::string>{"both", "full"});
  CHECK(names(true, DType::F16) == std::vector<std::string>{"both", "masked causal"});
  CHECK(names(true, DType::BF16) == std::vector<std::string>{"bf16"});
  Variant none = attention_variant("y", "y", [](const AttentionArgs&, cudaStream_t) {});
  CHECK(none.launched_kernels({}).empty());
}

TEST_CASE("B·H above grid.y's 65535 is refused only by the variants whose grid has that limit",
          "[registry][batch_heads]") {
  const AttentionShape wide{.batch = 1, .heads = 70000, .seqlen = 64, .head_dim = 64};
  CHECK_FALSE(validate(wide));  // the harness itself no longer refuses it
  CHECK(validate(AttentionShape{.batch = 65536, .heads = 32768, .seqlen = 1, .head_dim = 8}));  // > 2^31 - 1

  // Which steps put B·H on grid.y or grid.z (read from their launch functions): 00 (z), 04-15 (y;
  // 06 puts it on x only in the causal heavy-first order). Step 03 and 16-19 put it on grid.x; the
  // persistent steps (20 and up) walk a tile list; cuDNN (99) decides for itself. Step 30 is step
  // 05's kernel (y).
  auto expected_limit = [](int step) { return step == 0 || (step >= 4 && step <= 15) || step == 30; };
  const bool cudnn_built = peers::cudnn_build_info().built;
  int refused = 0, accepted = 0;
  for (const auto& step : Registry::instance().steps()) {
    if (step.kind != Kind::Attention) continue;
    if (step.number == 99 && !cudnn_built) continue;  // its one row refuses everything: "not built"
    for (const auto& v : step.variants) {
      const int d = head_dims_of(v).front();
      for (bool causal : {false, true}) {
        AttentionShape shape = wide;
        shape.head_dim = d;
        shape.causal = causal;
        shape.dtype = dtypes_of(v).front();
        AttentionShape narrow = shape;
        narrow.heads = int(kMaxGridYZ);  // the most grid.y takes
        INFO(variant_id(step, v) << " on " << shape.to_string());
        // The narrow problem may be refused for another reason (the Hopper steps ask the GPU,
        // and there is none on CI), never for B·H; only B·H differs in the wide one.
        const auto why_narrow = v.constraints.refuse(narrow, kHopper);
        CHECK((!why_narrow || why_narrow->find("grid.y") == std::string::npos));
        const auto why = v.constraints.refuse(shape, kHopper);
        if (expected_limit(step.number)) {
          CHECK(v.constraints.max_batch_heads == kMaxGridYZ);
          REQUIRE(why);
          CHECK(why->find("grid.y or grid.z") != std::string::npos);
          CHECK(why->find("70000") != std::string::npos);
          ++refused;
        } else {
          CHECK(v.constraints.max_batch_heads == 0);
          CHECK(why == why_narrow);  // B·H = 70000 changes nothing
          ++accepted;
        }
      }
    }
  }
  CHECK(refused > 0);
  CHECK(accepted > 0);
}

// A test-only variant (Variant::test_only: step 25's late_consumers and warp_release) is a
// test of its step, not a rung: the ladder's default selection, its timing and --list's rows of
// rungs leave it out, it runs when named, nothing is compared against it, and it launches kernels
// of its own (a stress test that launched the measured kernel would test nothing).
TEST_CASE("a test-only variant stays out of the ladder unless named", "[registry][cli]") {
  const Registry& registry = Registry::instance();
  const Variant* late = registry.find_variant("25/late_consumers");
  REQUIRE(late);
  CHECK_FALSE(late->test_only.empty());

  const auto all = select_variants(registry, CliOptions{}, -1);
  int test_only_steps = 0;
  for (const auto& step : registry.steps()) {
    bool has_test_only = false;
    for (std::size_t i = 0; i < step.variants.size(); ++i) {
      const Variant& v = step.variants[i];
      const std::string id = variant_id(step, v);
      INFO(id);
      const bool selected = std::any_of(all.begin(), all.end(), [&](const VariantRef& r) { return r.id() == id; });
      if (v.test_only.empty()) {
        // Nothing a rung or a table depends on is a test: not its baseline, not the step's main.
        const std::string base = baseline_id(step, i);
        if (const Variant* b = base.empty() ? nullptr : registry.find_variant(base)) CHECK(b->test_only.empty());
        continue;
      }
      has_test_only = true;
      CHECK_FALSE(selected);
      CHECK(int(i) != step.main_variant);
      CliOptions named;
      named.variants = {id};
      const auto one = select_variants(registry, named, -1);
      CHECK(std::count_if(one.begin(), one.end(), [&](const VariantRef& r) { return r.id() == id; }) == 1);
      CliOptions its_step;  // the step's own executable, no --variant: the rungs only
      for (const auto& r : select_variants(registry, its_step, step.number)) CHECK(r.id() != id);
      // At every head dimension it launches a kernel the step's main variant does not (function
      // addresses; helper kernels, a preprocess say, may be shared).
      REQUIRE(v.kernels);
      const Variant& main = step.variants[std::size_t(step.main_variant)];
      REQUIRE(main.kernels);
      for (int d : head_dims_of(v)) {
        INFO("D=" << d);
        const auto theirs = main.kernels(d);
        bool own = false;
        for (const auto& k : v.kernels(d))
          own = own || std::none_of(theirs.begin(), theirs.end(), [&](const KernelInfo& m) { return m.func == k.func; });
        CHECK(own);
      }
    }
    test_only_steps += has_test_only;
  }
  CHECK(test_only_steps > 0);

  // --list: the test-only line is apart from the rungs' rows (which scripts read by their first
  // field) and says how to run it.
  const std::string text = list_steps(registry, 25);
  const auto at = text.find("25/late_consumers");
  REQUIRE(at != std::string::npos);
  const auto line_start = text.rfind('\n', at) + 1;
  const std::string line = text.substr(line_start, text.find('\n', at) - line_start);
  CHECK(line.find("(test only)") != std::string::npos);
  CHECK(line.find("--variant 25/late_consumers") != std::string::npos);
  CHECK(line.find("(test only)") < line.find("25/late_consumers"));
}
