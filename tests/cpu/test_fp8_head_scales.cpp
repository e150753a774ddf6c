// Part VIII's per-head fp8 descales (AttentionShape::head_scales, FlashAttention-3's descales of
// shape (batch, heads)) on the CPU: quantization by groups, the shapes that may and may not have
// them, the feature a variant declares to run them (and the cuDNN FP8 row's refusal), the launch
// arguments' defaults, the command line's --fp8-scales, and the names --save and --json give them.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/cli.hpp"
#include "common/dtype.hpp"
#include "common/problem.hpp"
#include "common/random.hpp"
#include "common/registry.hpp"
#include "common/run_shared.hpp"
#include "tests/catch.hpp"

using namespace ladder;

namespace {

constexpr char kHeadScalesRefusal[] = "does not handle per-head fp8 descales";

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

ParseOutcome parse(std::vector<const char*> args) {
  args.insert(args.begin(), "ladder");
  return parse_cli(int(args.size()), args.data(), -1);
}

// A dense fp8 problem with per-head descales: B=2, H=4 (Hkv=2 with gqa), N=113, D=64.
AttentionShape per_head(bool gqa = false) {
  return AttentionShape{.batch = 2, .heads = 4, .seqlen = 113, .head_dim = 64, .causal = true,
                        .dtype = DType::E4M3, .kv_heads = gqa ? 2 : 0, .head_scales = true};
}

}  // namespace

TEST_CASE("e4m3 quantization by groups: each group's descale is its own amax's, values exact",
          "[fp8][head_scales]") {
  // Four groups of very different magnitudes, and a fifth of zeros: one descale a group, each the
  // per-tensor rule (e4m3_descale) of that group's amax alone.
  constexpr std::size_t kGroupSize = 512;
  const std::vector<float> magnitudes = {1.0f, 1e-3f, 37.0f, 5e3f, 0.0f};
  std::vector<float> x;
  for (std::size_t g = 0; g < magnitudes.size(); ++g) {
    const std::vector<float> chunk = random_normal(kGroupSize, 11 + g, 1, magnitudes[g]);
    x.insert(x.end(), chunk.begin(), chunk.end());
  }
  const QuantizedTensor t = quantize_e4m3(x, magnitudes.size());
  REQUIRE(t.bits.size() == x.size());
  REQUIRE(t.value.size() == x.size());
  REQUIRE(t.descales.size() == magnitudes.size());
  CHECK(t.group_size() == kGroupSize);
  CHECK(t.descale == 1.0f);  // by groups there is no per-tensor descale: 1, neutral where multiplied
  for (std::size_t g = 0; g < magnitudes.size(); ++g) {
    INFO("group " << g << " (N(0,1) · " << magnitudes[g] << ")");
    const std::span<const float> chunk = std::span<const float>(x).subspan(g * kGroupSize, kGroupSize);
    float amax = 0;
    for (float v : chunk) amax = std::max(amax, std::fabs(v));
    const float descale = t.descales[g];
    CHECK(descale == e4m3_descale(amax));
    int exponent = 0;
    CHECK(std::frexp(descale, &exponent) == 0.5f);  // a power of two
    // The same bytes as quantizing the group alone, per tensor.
    const QuantizedTensor alone = quantize_e4m3(chunk);
    CHECK(alone.descale == descale);
    for (std::size_t i = 0; i < kGroupSize; ++i) {
      const std::size_t at = g * kGroupSize + i;
      REQUIRE(t.bits[at] == alone.bits[i]);
      REQUIRE(t.value[at] == from_e4m3(t.bits[at]) * descale);  // exactly
      REQUIRE(t.bits[at] != kE4M3NaN);
    }
  }
  // The group of zeros (N(0,1) · 0: some of them -0) gets 1, and bytes of ±0.
  CHECK(t.descales.back() == 1.0f);
  CHECK(std::all_of(t.bits.end() - kGroupSize, t.bits.end(),
                    [](std::uint8_t b) { return (b & 0x7F) == 0; }));

  // One group is the per-tensor quantization, its descale also the list's one element.
  const QuantizedTensor whole = quantize_e4m3(x);
  REQUIRE(whole.descales.size() == 1);
  CHECK(whole.descales[0] == whole.descale);
  float amax = 0;
  for (float v : x) amax = std::max(amax, std::fabs(v));
  CHECK(whole.descale == e4m3_descale(amax));
  CHECK(quantize_e4m3(x, 1).bits == whole.bits);

  // A count of groups that does not divide the size, or none, is refused.
  const std::vector<float> eight(8, 1.0f);
  CHECK_THROWS_AS(quantize_e4m3(eight, 3), std::invalid_argument);
  CHECK_THROWS_AS(quantize_e4m3(eight, 0), std::invalid_argument);
  CHECK_THROWS_AS(quantize_e4m3(eight, 16), std::invalid_argument);
  CHECK_NOTHROW(quantize_e4m3(eight, 8));  // a group an element
  try {
    quantize_e4m3(eight, 3);
  } catch (const std::invalid_argument& e) {
    CHECK(contains(e.what(), "8 elements do not split into 3 equal groups"));
  }
}

TEST_CASE("per-head descales are fp8's: refused on fp16 and bf16, printed where on",
          "[fp8][head_scales][validate]") {
  for (bool gqa : {false, true}) {
    const AttentionShape s = per_head(gqa);
    INFO(s.to_string());
    CHECK_FALSE(validate(s));
    CHECK(contains(s.to_string(), " fp8 per-head scales"));
  }
  CHECK(per_head().to_string() == "B=2 H=4 N=113 D=64 causal fp8 fp8 per-head scales");
  AttentionShape tensor = per_head();
  tensor.head_scales = false;
  CHECK(tensor.to_string() == "B=2 H=4 N=113 D=64 causal fp8");  // per tensor reads as before
  for (DType t : {DType::F16, DType::BF16}) {
    AttentionShape s = per_head();
    s.dtype = t;
    INFO(dtype_name(t));
    const auto why = validate(s);
    REQUIRE(why);
    CHECK(contains(*why, "per-head descales are fp8's"));
    CHECK(contains(*why, "--fp8-scales"));
    s.head_scales = false;
    CHECK_FALSE(validate(s));
  }
  // The fp8 layouts' refusals still come first (no varlen fp8, per head or not).
  AttentionShape varlen = per_head();
  varlen.batch = 2;
  varlen.q_lens = {1, 113};
  REQUIRE(validate(varlen));
  CHECK(contains(*validate(varlen), "variable-length"));
}

TEST_CASE("per-head descales are a feature: variants that do not serve it refuse it, 99/cudnn_fp8 "
          "among them", "[fp8][head_scales][registry][peers]") {
  CHECK(features_of(per_head()) == unsigned(Feature::HeadScales));
  CHECK(features_of(per_head(true)) == (unsigned(Feature::HeadScales) | unsigned(Feature::Gqa)));
  AttentionShape tensor = per_head();
  tensor.head_scales = false;
  CHECK(features_of(tensor) == 0);
  CHECK(std::string(feature_name(Feature::HeadScales)) == "per-head fp8 descales");
  CHECK(unsigned(Feature::HeadScales) == 16);

  auto launch = [](const AttentionArgs&, cudaStream_t) {};
  Variant tensor_only = attention_variant("t", "fp8 per tensor", launch);
  tensor_only.needs_sm(90).for_dtypes({DType::E4M3}).serves({Feature::Gqa});
  Variant heads = attention_variant("h", "fp8 per head", launch);
  heads.needs_sm(90).for_dtypes({DType::E4M3}).serves({Feature::Gqa, Feature::HeadScales});
  for (bool gqa : {false, true}) {
    const AttentionShape s = per_head(gqa);
    INFO(s.to_string());
    const auto why = tensor_only.constraints.refuse(s, 90);
    REQUIRE(why);
    CHECK(*why == kHeadScalesRefusal);
    CHECK_FALSE(heads.constraints.refuse(s, 90));
    CHECK_FALSE(tensor_only.constraints.refuse(AttentionShape{s.batch, s.heads, s.seqlen, s.head_dim, s.causal,
                                                              DType::E4M3, s.kv_heads}, 90));
  }
  CHECK(contains(heads.constraints.describe(), "fp8 per-head scales"));
  CHECK_FALSE(contains(tensor_only.constraints.describe(), "per-head"));

  // cuDNN's sdpa_fp8 takes scalar descales: its row refuses a per-head problem for that reason,
  // built with cuDNN or not (the feature check comes before the "not built" reason).
  const Variant* fp8 = Registry::instance().find_variant("99/cudnn_fp8");
  REQUIRE(fp8);
  CHECK_FALSE(fp8->constraints.features & unsigned(Feature::HeadScales));
  for (bool gqa : {false, true}) {
    const auto why = fp8->constraints.refuse(per_head(gqa), 90);
    REQUIRE(why);
    CHECK(*why == kHeadScalesRefusal);
  }
  // So does every registered variant that does not declare it, for that reason once the shape's
  // other properties are its own.
  int refusing = 0;
  for (const Step& step : Registry::instance().steps())
    for (const Variant& v : step.variants) {
      const auto& types = v.constraints.dtypes;
      if (step.kind != Kind::Attention || std::find(types.begin(), types.end(), DType::E4M3) == types.end() ||
          (v.constraints.features & unsigned(Feature::HeadScales)))
        continue;
      INFO(variant_id(step, v));
      const auto why = v.constraints.refuse(per_head(), 90);
      REQUIRE(why);
      CHECK(*why == kHeadScalesRefusal);
      ++refusing;
    }
  CHECK(refusing >= 1);  // 99/cudnn_fp8 at least
}

TEST_CASE("the launch arguments' per-head descales are null unless the runner sets them",
          "[fp8][head_scales]") {
  const AttentionArgs args{};
  CHECK(args.q_head_descale == nullptr);
  CHECK(args.k_head_descale == nullptr);
  CHECK(args.v_head_descale == nullptr);
  CHECK(args.q_descale == 1.f);  // and the scalars, which a per-head problem keeps at 1
  CHECK(args.k_descale == 1.f);
  CHECK(args.v_descale == 1.f);
}

TEST_CASE("--fp8-scales tensor|head: per-head problems for the fp8 types only", "[fp8][head_scales][cli]") {
  const auto o = parse({"--dtype", "bf16,fp8", "--fp8-scales", "tensor,head", "--n", "113"});
  REQUIRE(o.options);
  const auto shapes = attention_shapes(*o.options);
  REQUIRE(shapes.size() == 3);  // bf16 has no scales: one problem, then fp8 per tensor and per head
  CHECK(shapes[0].dtype == DType::BF16);
  CHECK_FALSE(shapes[0].head_scales);
  CHECK(shapes[1].dtype == DType::E4M3);
  CHECK_FALSE(shapes[1].head_scales);
  CHECK(shapes[2].dtype == DType::E4M3);
  CHECK(shapes[2].head_scales);
  for (const auto& s : shapes) CHECK_FALSE(validate(s));

  // Per tensor is the default; per head alone; a per-tensor problem and its per-head twin are
  // neighbours in the run order (--fp8-scales is the innermost axis).
  for (const AttentionShape& s : attention_shapes(*parse({"--dtype", "fp8", "--mask", "both"}).options))
    CHECK_FALSE(s.head_scales);
  const auto heads = attention_shapes(*parse({"--dtype", "fp8", "--fp8-scales", "head"}).options);
  REQUIRE(heads.size() == 1);
  CHECK(heads[0].head_scales);
  const auto twins = attention_shapes(*parse({"--dtype", "fp8", "--fp8-scales", "tensor,head",
                                              "--n", "64,128", "--kv-heads", "0,2"}).options);
  REQUIRE(twins.size() == 8);
  for (std::size_t i = 0; i < twins.size(); i += 2) {
    CHECK_FALSE(twins[i].head_scales);
    CHECK(twins[i + 1].head_scales);
    CHECK(twins[i + 1].seqlen == twins[i].seqlen);
    CHECK(twins[i + 1].kv_heads == twins[i].kv_heads);
  }

  // A bad value is a usage error; so are per-head scales without an fp8 type to give them to.
  const auto bad = parse({"--dtype", "fp8", "--fp8-scales", "channel"});
  CHECK_FALSE(bad.options);
  CHECK(bad.exit_code == 2);
  CHECK(contains(bad.message, "--fp8-scales"));
  const auto no_fp8 = parse({"--dtype", "bf16", "--fp8-scales", "head"});
  CHECK_FALSE(no_fp8.options);
  CHECK(no_fp8.exit_code == 2);
  CHECK(contains(no_fp8.message, "needs an fp8 type"));
  CHECK(parse({"--dtype", "bf16", "--fp8-scales", "tensor"}).options);  // the default, said aloud
  const auto help = parse({"--help"});
  CHECK(contains(help.message, "--fp8-scales"));
}

TEST_CASE("a per-head problem's --save folder and --json shape say so; per tensor's read as before",
          "[fp8][head_scales][report]") {
  const RunOptions options;
  AttentionShape s = per_head(true);
  CHECK(run_detail::attention_save_name("attention", s) == "attention_B2_H4_N113_D64_causal_fp8_Hkv2_headscales");
  CHECK(run_detail::attention_shape_json(s, options).value("head_scales", false));
  s.head_scales = false;
  CHECK(run_detail::attention_save_name("attention", s) == "attention_B2_H4_N113_D64_causal_fp8_Hkv2");
  CHECK_FALSE(run_detail::attention_shape_json(s, options).contains("head_scales"));
}
