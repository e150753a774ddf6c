// The peers' CPU-side logic: the cuDNN graph cache and its keys, the "not built" row, the peer
// step's registration, the cuDNN FP8 row's scales and verdict, and the GEMM ceiling's check. No CUDA call here: these run on CI, in a build
// with cuDNN and in one without.
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <set>
#include <stdexcept>
#include <string>
#include <variant>
#include <vector>

#include "common/compare.hpp"
#include "common/dtype.hpp"
#include "common/peers/cudnn_attention.hpp"
#include "common/peers/cudnn_attention_backward.hpp"
#include "common/peers/cudnn_fp8.hpp"
#include "common/peers/gemm_ceiling.hpp"
#include "common/registry.hpp"
#include "common/report.hpp"
#include "tests/catch.hpp"

using namespace ladder;
using namespace ladder::peers;

namespace {
bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }
}  // namespace

TEST_CASE("a cuDNN graph key holds everything the graph bakes in", "[peers]") {
  const AttentionShape base{4, 8, 4096, 64, false};
  const float scale = base.softmax_scale();
  const CudnnGraphKey key = cudnn_graph_key(base, scale, false, 0);
  CHECK(key == cudnn_graph_key(base, scale, false, 0));

  // Every field that changes the graph changes the key.
  std::vector<CudnnGraphKey> others;
  for (auto change : {+[](AttentionShape& s) { s.batch = 2; }, +[](AttentionShape& s) { s.heads = 16; },
                      +[](AttentionShape& s) { s.seqlen = 4095; }, +[](AttentionShape& s) { s.head_dim = 128; },
                      +[](AttentionShape& s) { s.causal = true; },
                      +[](AttentionShape& s) { s.dtype = DType::BF16; }}) {
    AttentionShape s = base;
    change(s);
    others.push_back(cudnn_graph_key(s, scale, false, 0));
  }
  others.push_back(cudnn_graph_key(base, scale, true, 0));           // also writes the stats
  others.push_back(cudnn_graph_key(base, scale, false, 1));          // another device's handle
  others.push_back(cudnn_graph_key(base, scale * 0.5f, false, 0));   // another softmax scale
  std::set<CudnnGraphKey> distinct(others.begin(), others.end());
  distinct.insert(key);
  CHECK(distinct.size() == others.size() + 1);

  const std::string text = to_string(cudnn_graph_key({4, 8, 4096, 64, true}, scale, true, 1));
  CHECK(contains(text, "B=4 H=8 N=4096 D=64 causal fp16"));
  CHECK(contains(text, "stats"));
  CHECK(contains(text, "device 1"));
  CHECK_FALSE(contains(text, "Hkv"));  // a dense problem names none of Part VI's properties
  CHECK_FALSE(contains(text, "Nkv"));
  CHECK_FALSE(contains(text, "varlen"));
  CHECK_FALSE(contains(text, "page"));
}

TEST_CASE("a cuDNN graph key tells Part VI's problems apart", "[peers]") {
  const AttentionShape dense{4, 8, 4096, 64, true};
  const float scale = dense.softmax_scale();
  auto key_of = [&](const AttentionShape& s) { return cudnn_graph_key(s, scale, false, 0); };

  // The properties are resolved: spelling out the dense defaults is the same problem, the same plan.
  AttentionShape spelled = dense;
  spelled.kv_heads = 8;
  spelled.kv_seqlen = 4096;
  CHECK(key_of(spelled) == key_of(dense));
  AttentionShape varlen_spelled;  // kv_lens left empty means "the same as q_lens"
  varlen_spelled.batch = 3;
  varlen_spelled.heads = 8;
  varlen_spelled.seqlen = 17;
  varlen_spelled.causal = true;
  varlen_spelled.q_lens = {1, 17, 5};
  AttentionShape varlen_explicit = varlen_spelled;
  varlen_explicit.kv_lens = {1, 17, 5};
  CHECK(key_of(varlen_spelled) == key_of(varlen_explicit));

  // Each property, and each length, changes the key: a GQA problem never reuses a dense plan.
  std::vector<AttentionShape> shapes;
  auto with = [&](auto change) {
    AttentionShape s = dense;
    change(s);
    shapes.push_back(s);
  };
  with([](AttentionShape& s) { s.kv_heads = 2; });                  // GQA
  with([](AttentionShape& s) { s.kv_heads = 1; });                  // MQA
  with([](AttentionShape& s) { s.seqlen = 1; s.kv_seqlen = 4096; });  // decode
  with([](AttentionShape& s) { s.seqlen = 1; s.kv_seqlen = 4097; });
  with([](AttentionShape& s) { s.page_size = 64; });                // paged
  with([](AttentionShape& s) { s.page_size = 16; });
  with([](AttentionShape& s) { s.batch = 3; s.seqlen = 17; s.q_lens = {1, 17, 5}; });  // varlen
  with([](AttentionShape& s) { s.batch = 3; s.seqlen = 17; s.q_lens = {1, 17, 6}; });
  with([](AttentionShape& s) { s.batch = 3; s.seqlen = 17; s.q_lens = {1, 17, 5}; s.kv_lens = {9, 17, 5}; });
  with([](AttentionShape& s) {
    s.batch = 3; s.seqlen = 17; s.q_lens = {1, 17, 5}; s.kv_lens = {9, 17, 5}; s.page_size = 16;
  });
  std::set<CudnnGraphKey> distinct;
  distinct.insert(key_of(dense));
  for (const AttentionShape& s : shapes) distinct.insert(key_of(s));
  CHECK(distinct.size() == shapes.size() + 1);

  // The key's name says which properties are on.
  AttentionShape all = dense;
  all.batch = 3;
  all.seqlen = 17;
  all.kv_heads = 2;
  all.q_lens = {1, 17, 1};
  all.kv_lens = {9, 17, 14};
  all.page_size = 16;
  const std::string text = to_string(cudnn_graph_key(all, scale, true, 0));
  CHECK(contains(text, "B=3 H=8 N=17 D=64 causal fp16"));
  CHECK(contains(text, " Hkv=2"));
  CHECK(contains(text, " varlen(3 seqs, 19 q, 40 k)"));
  CHECK(contains(text, " page=16"));
  CHECK_FALSE(contains(text, "Nkv"));  // a varlen batch's keys are in its lengths
  AttentionShape decode = dense;
  decode.seqlen = 7;
  decode.kv_seqlen = 4097;
  CHECK(contains(to_string(key_of(decode)), "B=4 H=8 N=7 D=64 causal fp16 Nkv=4097,"));
}

TEST_CASE("the build-once cache builds each key once and remembers refusals", "[peers]") {
  BuildOnceCache<int, std::string> cache;
  int calls = 0;
  auto build = [&](const char* text) {
    return [&calls, text] {
      ++calls;
      return std::make_unique<std::string>(text);
    };
  };
  std::string& first = cache.get(1, build("one"));
  std::string& again = cache.get(1, build("never built"));
  CHECK(&first == &again);  // the same object: its workspace and plans are reused
  CHECK(again == "one");
  CHECK(cache.get(2, build("two")) == "two");
  CHECK(calls == 2);
  CHECK(cache.builds() == 2);
  CHECK(cache.size() == 2);

  // A build that throws is not retried: the same exception, of the same type, comes back at once.
  int refusals = 0;
  auto refuse = [&] () -> std::unique_ptr<std::string> {
    ++refusals;
    throw LibraryRefusal("cuDNN frontend: check_support failed for B=1 H=1 N=17 D=64");
  };
  for (int i = 0; i < 3; ++i) {
    try {
      cache.get(3, refuse);
      FAIL("a refused build must throw");
    } catch (const LibraryRefusal& e) {
      CHECK(contains(e.what(), "check_support failed"));
    }
  }
  CHECK(refusals == 1);
  CHECK(cache.builds() == 3);
  // A harness that knows nothing of LibraryRefusal sees a std::runtime_error (a failed row).
  CHECK_THROWS_AS(cache.get(3, refuse), std::runtime_error);
  // Any other failure keeps its own type.
  CHECK_THROWS_AS(cache.get(5, []() -> std::unique_ptr<std::string> { throw std::invalid_argument("bug"); }),
                  std::invalid_argument);

  // A build that returns nothing is a bug, reported as such.
  CHECK_THROWS_AS(cache.get(4, [] { return std::unique_ptr<std::string>(); }), std::logic_error);

  cache.clear();
  CHECK(cache.size() == 0);
  CHECK(cache.get(1, build("rebuilt")) == "rebuilt");
}

TEST_CASE("the row that stands in for a missing cuDNN says how to enable it", "[peers]") {
  const std::string m = cudnn_not_built_message("the cuDNN frontend headers were not found");
  CHECK(m.rfind("cudnn: not built — the cuDNN frontend headers were not found", 0) == 0);
  CHECK(contains(m, "scripts/install-deps.sh"));
  CHECK(contains(m, "CUDNN_ROOT"));
  CHECK(contains(m, "CUDNN_FRONTEND_INCLUDE_DIR"));

  const CudnnBuildInfo info = cudnn_build_info();
  if (info.built) {
    CHECK(info.missing.empty());
    CHECK(info.headers.rfind("9.", 0) == 0);
    CHECK_FALSE(info.frontend.empty());
  } else {
    CHECK_FALSE(info.missing.empty());
    CHECK_FALSE(cudnn_runtime_version());
  }
}

TEST_CASE("the peer step is registered as step 99 of the attention track", "[peers][registry]") {
  const Step* step = Registry::instance().find(99);
  REQUIRE(step);
  CHECK(step->name == "peers");
  CHECK(step->track == "attention");
  CHECK(step->kind == Kind::Attention);
  CHECK(step->peers_only());
  REQUIRE(!step->variants.empty());
  CHECK(step->variants.at(step->main_variant).name == "cudnn");

  const AttentionShape d64{1, 2, 113, 64, true}, d96{1, 2, 113, 96, false};
  // Part VI's problems, one property each and all at once: cuDNN's graph takes every one of them.
  std::vector<AttentionShape> part6;
  auto with = [&](auto change) {
    AttentionShape s{2, 8, 7, 128, true, DType::BF16};
    change(s);
    REQUIRE_FALSE(validate(s));
    part6.push_back(s);
  };
  with([](AttentionShape& s) { s.kv_heads = 2; });
  with([](AttentionShape& s) { s.seqlen = 1; s.kv_seqlen = 4097; });
  with([](AttentionShape& s) { s.q_lens = {7, 1}; s.kv_lens = {17, 1}; });
  with([](AttentionShape& s) { s.kv_seqlen = 128; s.page_size = 16; });
  with([](AttentionShape& s) { s.kv_heads = 1; s.q_lens = {7, 1}; s.kv_lens = {4097, 129}; s.page_size = 256; });
  const unsigned all_features = unsigned(Feature::Gqa) | unsigned(Feature::Decode) |
                                unsigned(Feature::Varlen) | unsigned(Feature::Paged);
  // The fp16/bf16 rows; the fp8 row (99/cudnn_fp8, the last) has its own test below.
  REQUIRE(step->variants.back().name == "cudnn_fp8");
  const std::vector<Variant> rows16(step->variants.begin(), step->variants.end() - 1);
  for (const Variant& v : rows16) CHECK(v.constraints.features == all_features);
  if (cudnn_build_info().built) {
    REQUIRE(rows16.size() == 2);
    for (const Variant& v : rows16) {
      CHECK(v.peer);
      for (const AttentionShape& s : part6) {
        CAPTURE(s.to_string());
        CHECK_FALSE(v.constraints.refuse(s, 90));
      }
      CHECK_FALSE(v.constraints.refuse(d64, 90));                  // an H200 runs it
      CHECK_FALSE(v.constraints.refuse(AttentionShape{1, 1, 1, 128, false}, 80));
      CHECK(v.constraints.refuse(d64, 75));                        // Turing: no fused fp16 SDPA
      CHECK(v.constraints.refuse(d96, 90));                        // the ladder's head dims only
    }
    CHECK_FALSE(step->variants[0].writes_lse);
    CHECK(step->variants[1].name == "cudnn_lse");
    CHECK(step->variants[1].writes_lse);
  } else {
    REQUIRE(rows16.size() == 1);
    const auto why = step->variants[0].constraints.refuse(d64, 90);
    REQUIRE(why);
    CHECK(why->rfind("cudnn: not built — ", 0) == 0);
    CHECK(contains(*why, cudnn_build_info().missing));
    for (const AttentionShape& s : part6) {  // the reason, not "does not handle GQA"
      const auto part6_why = step->variants[0].constraints.refuse(s, 90);
      REQUIRE(part6_why);
      CHECK(part6_why->rfind("cudnn: not built — ", 0) == 0);
    }
  }
}

TEST_CASE("the cuDNN FP8 row's scales are powers of two that keep S and O inside e4m3", "[peers][fp8]") {
  const float dq = 0x1p-3f, dk = 0x1p-5f, dv = 0x1p-4f;
  const CudnnFp8Scales s = cudnn_fp8_scales(dq, dk, dv);
  CHECK(s.descale_q == dq);  // Q, K, V: the harness's descales, as they are
  CHECK(s.descale_k == dk);
  CHECK(s.descale_v == dv);
  // S (cuDNN's softmax output, FlashAttention's P) lies in [0, 1]: times 2^8 it stays below 448,
  // with 3 fraction bits down to 2^-14, as the harness's low-precision reference rounds P.
  CHECK(s.scale_s == 256.0f);
  CHECK(s.scale_s == kE4M3PScale);
  CHECK(s.scale_s < kE4M3Max);
  CHECK(s.descale_s * s.scale_s == 1.0f);
  // O: |O| <= max |V| <= 448 · descale_v, and S8's roundings may lift the sum of its weights above
  // 1; scale_o = 1 / (2 · descale_v) leaves a factor 2 for them under e4m3's 448.
  CHECK(s.scale_o == 8.0f);
  CHECK(s.o_descale() == 2 * dv);
  CHECK(kE4M3Max * dv * 1.5f * s.scale_o < kE4M3Max);
  // The harness's own quantization of a V: its largest value lands at most at 224 in cuDNN's O.
  const QuantizedTensor v = quantize_e4m3(std::vector<float>{0.25f, -1000.0f, 3.0f, 1e-3f});
  const CudnnFp8Scales sv = cudnn_fp8_scales(1.0f, 1.0f, v.descale);
  for (float x : v.value) CHECK(std::abs(x) * sv.scale_o <= kE4M3Max / 2);

  // The widening is exact: each byte's value times a power of two, a bf16 exactly; NaN stays NaN
  // (0xFF is the row's poison of cuDNN's O: an unwritten byte reaches the check as NaN).
  int finite = 0;
  for (int code = 0; code < 256; ++code) {
    CAPTURE(code);
    const auto byte = std::uint8_t(code);
    const float x = cudnn_fp8_o_value(byte, s);
    if (std::isnan(from_e4m3(byte))) {
      CHECK(std::isnan(x));
      continue;
    }
    ++finite;
    CHECK(x == from_e4m3(byte) * 2 * dv);
    CHECK(from_bits(DType::BF16, to_bits(DType::BF16, x)) == x);
  }
  CHECK(finite == 254);
  CHECK(std::isnan(cudnn_fp8_o_value(0xFF, s)));

  // A descale that is not a positive power of two would make every product round: refused.
  for (float bad : {0.3f, 0.0f, -0.5f, std::numeric_limits<float>::infinity(),
                    std::numeric_limits<float>::quiet_NaN()}) {
    CAPTURE(bad);
    CHECK_THROWS_AS(cudnn_fp8_scales(bad, 1.0f, 1.0f), std::invalid_argument);
    CHECK_THROWS_AS(cudnn_fp8_scales(1.0f, bad, 1.0f), std::invalid_argument);
    CHECK_THROWS_AS(cudnn_fp8_scales(1.0f, 1.0f, bad), std::invalid_argument);
  }
  CHECK_NOTHROW(cudnn_fp8_scales(0x1p-126f, 0x1p20f, 0x1p-20f));
}

TEST_CASE("the cuDNN FP8 row is step 99's for fp8 problems only, dense and GQA", "[peers][registry][fp8]") {
  const Step* step = Registry::instance().find(99);
  REQUIRE(step);
  CHECK(step->variants.at(step->main_variant).name == "cudnn");  // the step's row stays the 16-bit one
  const Variant* fp8 = Registry::instance().find_variant("99/cudnn_fp8");
  REQUIRE(fp8);
  CHECK(fp8->peer);
  CHECK_FALSE(fp8->writes_lse);
  CHECK(fp8->constraints.dtypes == std::vector<DType>{DType::E4M3});
  CHECK(fp8->constraints.features == unsigned(Feature::Gqa));

  std::vector<AttentionShape> served;
  for (int d : {64, 128})
    for (bool causal : {false, true})
      for (int kv_heads : {0, 2}) {  // dense, and GQA of 4 query heads a K/V head
        AttentionShape s{2, 8, 257, d, causal, DType::E4M3};
        s.kv_heads = kv_heads;
        REQUIRE_FALSE(validate(s));
        served.push_back(s);
      }
  const AttentionShape fp16{2, 8, 257, 128, true}, bf16{2, 8, 257, 128, true, DType::BF16};
  const AttentionShape d96{2, 8, 257, 96, true, DType::E4M3};
  REQUIRE_FALSE(validate(d96));

  if (cudnn_build_info().built) {
    for (const AttentionShape& s : served) {
      CAPTURE(s.to_string());
      CHECK_FALSE(fp8->constraints.refuse(s, 90));
      CHECK(fp8->constraints.refuse(s, 89));  // cuDNN's FP8 SDPA needs Hopper
    }
    CHECK(fp8->constraints.refuse(fp16, 90));  // 99/cudnn's problems, not this row's
    CHECK(fp8->constraints.refuse(bf16, 90));
    CHECK(fp8->constraints.refuse(d96, 90));   // the ladder's head dimensions only
    // Its e4m3 O is past the bf16 pass rule: declared, so its error shows as a multiple of the
    // tolerance; its widening to bf16 is the harness's untimed hook, not part of the launch.
    CHECK(fp8->approximate == kCudnnFp8Approximate);
    CHECK(contains(fp8->description, "after the timed launch"));
    CHECK(fp8->after_launch_untimed);
  } else {
    for (const AttentionShape& s : served) {
      CAPTURE(s.to_string());
      const auto why = fp8->constraints.refuse(s, 90);
      REQUIRE(why);
      CHECK(why->rfind("cudnn: not built — ", 0) == 0);
      CHECK(contains(*why, cudnn_build_info().missing));
    }
  }
}

TEST_CASE("the cuDNN FP8 row's verdict is its error as a multiple of the tolerance, never a hidden one",
          "[peers][fp8][report]") {
  Row row;
  row.approximate = kCudnnFp8Approximate;
  ErrorStats e;
  e.checked = e.total = 1024;
  e.tolerance = 1e-2;
  e.max_abs = e.worst_error = 3e-2;  // three times the tolerance: e4m3's O, as expected
  row.error = e;
  CHECK(row.status_text() == "approx");
  const std::string said = e.approx_verdict(row.approximate);
  CHECK(contains(said, "e4m3"));
  CHECK(contains(said, "3.0× the tolerance"));
  CHECK_FALSE(contains(said, "FAIL"));
  e.max_abs = e.worst_error = (kApproximateSlack + 1) * e.tolerance;  // past the slack: a bug
  row.error = e;
  CHECK(row.status_text() == "FAIL");
  e.max_abs = e.worst_error = 1e-2;
  e.nonfinite = 1;  // a byte cuDNN did not write (the row's poison) is never excused
  row.error = e;
  CHECK(row.status_text() == "FAIL");
}

TEST_CASE("a cuDNN backward graph key holds everything the graph bakes in", "[peers][backward]") {
  const AttentionShape base{4, 8, 4096, 64, false};
  const float scale = base.softmax_scale();
  const CudnnBackwardKey key = cudnn_backward_key(base, scale, 0);
  CHECK(key == cudnn_backward_key(base, scale, 0));

  std::vector<CudnnBackwardKey> others;
  for (auto change : {+[](AttentionShape& s) { s.batch = 2; }, +[](AttentionShape& s) { s.heads = 16; },
                      +[](AttentionShape& s) { s.seqlen = 4095; }, +[](AttentionShape& s) { s.head_dim = 128; },
                      +[](AttentionShape& s) { s.causal = true; },
                      +[](AttentionShape& s) { s.dtype = DType::BF16; }}) {
    AttentionShape s = base;
    change(s);
    others.push_back(cudnn_backward_key(s, scale, 0));
  }
  others.push_back(cudnn_backward_key(base, scale, 1));         // another device's handle
  others.push_back(cudnn_backward_key(base, scale * 0.5f, 0));  // another softmax scale
  std::set<CudnnBackwardKey> distinct(others.begin(), others.end());
  distinct.insert(key);
  CHECK(distinct.size() == others.size() + 1);

  const std::string text = to_string(cudnn_backward_key({4, 8, 4096, 64, true}, scale, 1));
  CHECK(contains(text, "backward B=4 H=8 N=4096 D=64 causal fp16"));
  CHECK(contains(text, "device 1"));
}

TEST_CASE("the backward peer step is registered as step 98 of the backward track", "[peers][registry][backward]") {
  const Step* step = Registry::instance().find(98);
  REQUIRE(step);
  CHECK(step->name == "backward_peers");
  CHECK(step->track == "backward");
  CHECK(step->kind == Kind::Backward);
  CHECK(step->peers_only());
  REQUIRE(step->variants.size() == 1);
  const Variant& v = step->variants[0];
  CHECK(v.name == "cudnn");
  CHECK(v.peer);
  CHECK(std::holds_alternative<BackwardLaunch>(v.launch));

  const AttentionShape d64{1, 2, 113, 64, true}, d96{1, 2, 113, 96, false};
  AttentionShape bf16 = d64;
  bf16.dtype = DType::BF16;
  if (cudnn_build_info().built) {
    CHECK_FALSE(v.deterministic);                                   // cuDNN's default algorithm
    CHECK_FALSE(v.constraints.refuse(d64, 90));                     // an H200 runs it
    CHECK_FALSE(v.constraints.refuse(bf16, 90));
    CHECK_FALSE(v.constraints.refuse(AttentionShape{1, 1, 1, 128, false}, 80));
    CHECK(v.constraints.refuse(d64, 75));
    CHECK(v.constraints.refuse(d96, 90));                           // the ladder's head dims only
  } else {
    const auto why = v.constraints.refuse(d64, 90);
    REQUIRE(why);
    CHECK(why->rfind("cudnn: not built — ", 0) == 0);
    CHECK(contains(*why, cudnn_build_info().missing));
  }
}

TEST_CASE("GEMM ceiling: the checked entries cover the matrix and repeat", "[peers][gemm]") {
  const auto points = gemm_check_points(8192, 8192, 64, 7);
  REQUIRE(points.size() == 64);
  CHECK(points.front() == std::pair{0, 0});
  CHECK(points[1] == std::pair{8191, 8191});
  for (const auto& [r, c] : points) {
    CHECK(r >= 0);
    CHECK(r < 8192);
    CHECK(c >= 0);
    CHECK(c < 8192);
  }
  CHECK(points == gemm_check_points(8192, 8192, 64, 7));
  CHECK(std::set(points.begin(), points.end()).size() > 60);
  CHECK(gemm_check_points(3, 5, 1, 7).size() == 1);
  CHECK(gemm_check_points(0, 5, 4, 7).empty());
}

TEST_CASE("GEMM ceiling: an entry passes as an fp16 rounding of the exact product, and only then",
          "[peers][gemm]") {
  // A [2, K] and B [K, 3] with values that are exact in fp16.
  const int m = 2, k = 512, n = 3;
  std::vector<float> a(std::size_t(m) * k), b(std::size_t(k) * n);
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = float(int(i % 7) - 3) * 0.25f;
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = float(int(i % 5) - 2) * 0.5f + 0.125f;
  for (int row = 0; row < m; ++row)
    for (int col = 0; col < n; ++col) {
      double exact = 0;
      for (int t = 0; t < k; ++t) exact += double(a[std::size_t(row) * k + t]) * b[std::size_t(t) * n + col];
      const float rounded = __half2float(__float2half_rn(float(exact)));
      double rel = -1;
      CHECK(gemm_entry_ok(a, b, k, n, row, col, rounded, &rel));
      CHECK(rel >= 0);
      CHECK(rel <= std::ldexp(1.0, -11));
      // Off by far more than a rounding: a wrong layout, a skipped block, a zero output.
      CHECK_FALSE(gemm_entry_ok(a, b, k, n, row, col, float(exact) * 1.02f + 1.0f));
      CHECK_FALSE(gemm_entry_ok(a, b, k, n, row, col, NAN));
    }
  CHECK_FALSE(gemm_entry_ok(a, b, k, n, 0, 0, 0.0f));  // this entry's exact value is far from 0
}

TEST_CASE("GEMM ceiling: rate and percentage", "[peers][gemm]") {
  GemmCeiling g;
  CHECK(g.tflops() == 0);        // no timing yet
  CHECK(g.percent_of(100) == 0);
  g.flops = 2.0 * 8192.0 * 8192.0 * 8192.0;
  g.timing = summarize({1.5f, 1.4f, 1.6f});
  CHECK(g.tflops() == Approx(g.flops / 1.5e-3 / 1e12));
  CHECK(g.percent_of(g.tflops() / 2) == Approx(50.0));
}
