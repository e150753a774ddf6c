// Argument validation and step selection. No CUDA here: these run on CI.
#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "common/cli.hpp"
#include "tests/catch.hpp"

using namespace ladder;

namespace {
ParseOutcome parse(std::vector<const char*> args, int only_step = -1) {
  args.insert(args.begin(), "ladder");
  return parse_cli(int(args.size()), args.data(), only_step);
}
}  // namespace

TEST_CASE("sizes must be positive whole numbers", "[cli]") {
  for (const char* bad : {"0", "-3", "1.5", "abc"}) {
    const auto o = parse({"--n", bad});
    CHECK_FALSE(o.options);
    CHECK(o.exit_code == 2);
    CHECK(o.message.find("positive") != std::string::npos);
  }
  CHECK_FALSE(parse({"--gemm", "1,2"}).options);
  CHECK_FALSE(parse({"--count", "0"}).options);
  CHECK_FALSE(parse({"--mask", "diagonal"}).options);
  CHECK_FALSE(parse({"--min-reps", "9", "--max-reps", "3"}).options);
}

TEST_CASE("--head-magnitudes with a variable-length batch is a usage error", "[cli]") {
  const auto o = parse({"--head-magnitudes", "--varlen", "17,300"});
  CHECK_FALSE(o.options);
  CHECK(o.exit_code == 2);
  CHECK(o.message.find("--head-magnitudes") != std::string::npos);
  CHECK(parse({"--head-magnitudes", "--varlen", "dense"}).options);
  CHECK(parse({"--head-magnitudes"}).options);
}

TEST_CASE("--help is not an error", "[cli]") {
  const auto o = parse({"--help"});
  CHECK_FALSE(o.options);
  CHECK(o.exit_code == 0);
  CHECK(o.message.find("--seqlen") != std::string::npos);
}

TEST_CASE("attention shapes: lists, masks and a fixed token count", "[cli]") {
  auto o = parse({"--n", "1024,4096", "--d", "64,128", "--mask", "both", "--tokens", "16384"});
  REQUIRE(o.options);
  const auto shapes = attention_shapes(*o.options);
  REQUIRE(shapes.size() == 8);
  CHECK(shapes[0].batch == 16);
  CHECK(shapes[1].batch == 4);
  CHECK_FALSE(shapes[0].causal);
  CHECK(shapes[2].causal);
  CHECK(shapes[4].head_dim == 128);
  CHECK_FALSE(parse({"--n", "1000", "--tokens", "16384"}).options);  // 16384 % 1000 != 0
}

TEST_CASE("--dtype: element types, outermost in the run order", "[cli][bf16]") {
  auto o = parse({"--dtype", "fp16,bf16", "--n", "1024,2048"});
  REQUIRE(o.options);
  const auto shapes = attention_shapes(*o.options);
  REQUIRE(shapes.size() == 4);
  CHECK(shapes[0].dtype == DType::F16);
  CHECK(shapes[1].dtype == DType::F16);
  CHECK(shapes[2].dtype == DType::BF16);
  CHECK(shapes[2].to_string() == "B=4 H=8 N=1024 D=64 non-causal bf16");
  CHECK(shapes[0].to_string() == "B=4 H=8 N=1024 D=64 non-causal");  // fp16 reads as it always has
  CHECK(attention_shapes(*parse({}).options).at(0).dtype == DType::F16);
  const auto bad = parse({"--dtype", "fp32"});
  CHECK_FALSE(bad.options);
  CHECK(bad.exit_code == 2);
}

TEST_CASE("a variant runs fp16 unless it declares bf16, and reads its tensors as declared",
          "[registry][bf16]") {
  auto launch = [](const AttentionArgs&, cudaStream_t) {};
  const Variant fp16_only = attention_variant("a", "fp16 only", launch);
  Variant both = attention_variant("b", "both", launch);
  both.for_dtypes({DType::F16, DType::BF16});
  AttentionShape bf16{.batch = 1, .heads = 1, .seqlen = 17, .head_dim = 64, .dtype = DType::BF16};
  const auto why = fp16_only.constraints.refuse(bf16, 90);
  REQUIRE(why);
  CHECK(*why == "runs fp16 only (asked for bf16)");
  CHECK_FALSE(both.constraints.refuse(bf16, 90));
  CHECK(both.constraints.describe().find("fp16 and bf16") != std::string::npos);

  AttentionArgs args{};
  args.shape = bf16;
  CHECK_NOTHROW(args.as<__nv_bfloat16>());
  CHECK_THROWS_AS(args.as<__half>(), std::logic_error);
  args.shape.dtype = DType::F16;
  CHECK_NOTHROW(args.as<__half>());
  CHECK_THROWS_AS(args.as<__nv_bfloat16>(), std::logic_error);
}

TEST_CASE("timing is gated unless --no-gate", "[cli][timing]") {
  CHECK(parse({}).options->run.timing.gate);
  CHECK_FALSE(parse({"--no-gate"}).options->run.timing.gate);
}

TEST_CASE("--causal and --large-logits", "[cli]") {
  auto o = parse({"--causal", "--large-logits"});
  REQUIRE(o.options);
  CHECK(attention_shapes(*o.options).at(0).causal);
  CHECK(o.options->run.q_scale == 5.0f);
  CHECK(o.options->run.k_scale == 3.0f);
  CHECK_FALSE(o.options->run.head_magnitudes);
  auto h = parse({"--head-magnitudes"});
  REQUIRE(h.options);
  CHECK(h.options->run.head_magnitudes);  // the GPU tests' per-head inputs, from the command line
}

TEST_CASE("step selection", "[cli][registry]") {
  const Registry& registry = Registry::instance();
  REQUIRE(!registry.steps().empty());
  auto o = parse({});
  REQUIRE(o.options);
  const auto all = select_variants(registry, *o.options, -1);
  // Everything, but a peer step only with a lesson of its track (step 98 before the backward's),
  // and no test-only variant (tests/cpu/test_declarations.cpp).
  std::set<std::string> lesson_tracks;
  for (const auto& s : registry.steps())
    if (!s.peers_only()) lesson_tracks.insert(s.track);
  std::size_t total = 0;
  for (const auto& s : registry.steps())
    if (!s.peers_only() || lesson_tracks.count(s.track))
      total += std::size_t(std::count_if(s.variants.begin(), s.variants.end(),
                                         [](const Variant& v) { return v.test_only.empty(); }));
  CHECK(all.size() == total);
  for (std::size_t i = 1; i < all.size(); ++i) CHECK(all[i - 1].step->number <= all[i].step->number);

  o = parse({"--steps", "89"});
  REQUIRE(o.options);
  CHECK_THROWS_AS(select_variants(registry, *o.options, -1), UsageError);
  o = parse({"--steps", "x-y"});
  CHECK_THROWS_AS(select_variants(registry, *o.options, -1), UsageError);
  o = parse({"--track", "sorting"});
  CHECK_THROWS_AS(select_variants(registry, *o.options, -1), UsageError);
  o = parse({"--variant", "no_such_variant"});
  CHECK_THROWS_AS(select_variants(registry, *o.options, -1), UsageError);

  // A --variant naming a peer row keeps the peers to the rows named (the round's fp8 stage names
  // 99/cudnn and 99/cudnn_fp8 beside 45/fp8); with no peer named, every peer row of the track runs.
  // (99/cudnn_fp8 is registered where cuDNN was found at configure time: CI builds without it.)
  bool have_cudnn_fp8 = false;
  for (const auto& s : registry.steps())
    for (const auto& v : s.variants) have_cudnn_fp8 = have_cudnn_fp8 || (s.number == 99 && v.name == "cudnn_fp8");
  if (have_cudnn_fp8) {
    o = parse({"--steps", "33,45,99", "--variant", "45/fp8", "--variant", "99/cudnn_fp8"});
    REQUIRE(o.options);
    std::set<std::string> picked;
    for (const auto& ref : select_variants(registry, *o.options, -1))
      picked.insert(std::to_string(ref.step->number) + "/" + ref.variant().name);
    CHECK(picked == std::set<std::string>{"45/fp8", "99/cudnn_fp8"});
    o = parse({"--steps", "45,99", "--variant", "45/fp8"});
    std::size_t peers = 0;
    for (const auto& ref : select_variants(registry, *o.options, -1)) peers += ref.step->peers_only();
    CHECK(peers > 1);  // 99/cudnn, 99/cudnn_lse, 99/cudnn_fp8, ...
  }

  o = parse({"--steps", "4-99"});  // a range selects the registered steps inside it
  for (const auto& ref : select_variants(registry, *o.options, -1)) CHECK(ref.step->number >= 4);
  o = parse({"--steps", "80-89"});
  CHECK_THROWS_AS(select_variants(registry, *o.options, -1), UsageError);  // matches nothing

  o = parse({"--variant", "00/naive", "--no-peers"});
  const auto one = select_variants(registry, *o.options, -1);
  REQUIRE(one.size() == 1);
  CHECK(one[0].id() == "00/naive");
}

TEST_CASE("library rows come with every run of their track", "[cli][registry]") {
  const Registry& registry = Registry::instance();
  const Step* peers = nullptr;
  for (const auto& s : registry.steps())
    if (s.peers_only()) peers = &s;
  if (!peers) return;  // built without any peer step
  auto count_peers = [](const std::vector<VariantRef>& refs) {
    return std::count_if(refs.begin(), refs.end(), [](const VariantRef& r) { return r.step->peers_only(); });
  };
  auto o = parse({"--variant", "00/naive"});
  auto refs = select_variants(registry, *o.options, -1);
  CHECK(refs.front().id() == "00/naive");
  CHECK(count_peers(refs) == std::ptrdiff_t(peers->variants.size()));
  CHECK(std::size_t(count_peers(refs)) + 1 == refs.size());
  o = parse({"--steps", "1"});  // the matmul track: no attention peers
  CHECK(count_peers(select_variants(registry, *o.options, -1)) == 0);
  const std::string number = std::to_string(peers->number);
  o = parse({"--steps", number.c_str()});  // asked for by number: the peers alone
  CHECK(std::size_t(count_peers(select_variants(registry, *o.options, -1))) == peers->variants.size());
}

TEST_CASE("a variant left out as the same kernel as another launches exactly that kernel",
          "[registry]") {
  for (const auto& step : Registry::instance().steps())
    for (const auto& v : step.variants)
      for (const auto& [d, id] : v.constraints.same_kernel_at) {
        INFO(variant_id(step, v) << " at D=" << d << " names " << id);
        const Step* other_step = Registry::instance().find(std::stoi(id.substr(0, id.find('/'))));
        REQUIRE(other_step);
        const Variant* other = nullptr;
        for (const auto& w : other_step->variants)
          if (w.name == id.substr(id.find('/') + 1)) other = &w;
        REQUIRE(other);
        REQUIRE(v.kernels);
        REQUIRE(other->kernels);
        const auto mine = v.kernels(d), theirs = other->kernels(d);
        REQUIRE(mine.size() == theirs.size());
        for (std::size_t i = 0; i < mine.size(); ++i) CHECK(mine[i].func == theirs[i].func);
      }
}

TEST_CASE("a variant left out on some problems shares a kernel with the variant it names",
          "[registry]") {
  // same_kernel_when may depend on the mask, which the kernel lists do not: the check is that
  // the named variant's kernels include at least one of this variant's, so the claim "the same
  // kernel" points at code that is really shared. Within a step that is one function; a later
  // step that names an earlier one (21's schedulers without a mask name 20/persistent) launches
  // its own instantiation of the same kernel, compiled from the same lines (the step diff shows
  // them), which the harness cannot compare by address: there the kernel must agree in name,
  // element type, threads and shared memory.
  for (const auto& step : Registry::instance().steps())
    for (const auto& v : step.variants) {
      if (!v.constraints.same_kernel_when) continue;
      for (int d : {64, 128})
        for (bool causal : {false, true}) {
          const AttentionShape shape{.batch = 1, .heads = 1, .seqlen = 1000, .head_dim = d, .causal = causal};
          const auto id = v.constraints.same_kernel_when(shape);
          if (!id) continue;
          INFO(variant_id(step, v) << " on " << shape.to_string() << " names " << *id);
          const Step* other_step = Registry::instance().find(std::stoi(id->substr(0, id->find('/'))));
          REQUIRE(other_step);
          const Variant* other = nullptr;
          for (const auto& w : other_step->variants)
            if (w.name == id->substr(id->find('/') + 1)) other = &w;
          REQUIRE(other);
          REQUIRE(v.kernels);
          REQUIRE(other->kernels);
          const bool same_step = other_step == &step;
          bool shared = false;
          for (const auto& mine : v.kernels(d))
            for (const auto& theirs : other->kernels(d))
              shared = shared || (same_step ? mine.func == theirs.func
                                            : mine.name == theirs.name && mine.dtype == theirs.dtype &&
                                                  mine.threads == theirs.threads &&
                                                  mine.dynamic_smem == theirs.dynamic_smem);
          CHECK(shared);
        }
    }
}

TEST_CASE("--list names every step and variant without touching CUDA", "[cli][registry]") {
  const std::string text = list_steps(Registry::instance(), -1);
  for (const auto& step : Registry::instance().steps())
    for (const auto& v : step.variants) CHECK(text.find(variant_id(step, v)) != std::string::npos);
}

TEST_CASE("every registered step is well formed", "[registry]") {
  for (const auto& step : Registry::instance().steps()) {
    INFO("step " << step.number);
    CHECK(!step.name.empty());
    CHECK(!step.title.empty());
    CHECK(!step.track.empty());
    CHECK(step.main_variant >= 0);
    CHECK(step.main_variant < int(step.variants.size()));
    for (std::size_t i = 0; i < step.variants.size(); ++i) {
      const auto& v = step.variants[i];
      INFO("variant " << v.name);
      CHECK(!v.description.empty());
      CHECK(v.launch.index() == std::size_t(step.kind));  // the launch signature matches the kind
      if (!v.peer) CHECK(bool(v.kernels));               // lessons report their resources
      // The baseline must be a registered variant of the same kind (or none for a track's start).
      const std::string base = baseline_id(step, i);
      if (base.empty()) continue;
      const int base_step = std::stoi(base.substr(0, 2));
      const Step* b = Registry::instance().find(base_step);
      REQUIRE(b);
      CHECK(b->kind == step.kind);
      bool found = false;
      for (const auto& bv : b->variants) found = found || variant_id(*b, bv) == base;
      CHECK(found);
    }
  }
}
