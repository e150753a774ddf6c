// Part VIII's fp8 (e4m3) element type on the CPU: the conversions over every code and against
// cuda_fp8.h's, the per-tensor quantization, the names, the shapes fp8 may and may not take, the
// low-precision reference of the FP8 forward, and the pass rule on planted FP8 kernels' outputs.
#include <cuda_fp8.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/compare.hpp"
#include "common/dtype.hpp"
#include "common/problem.hpp"
#include "common/cli.hpp"
#include "common/random.hpp"
#include "common/reference.hpp"
#include "common/registry.hpp"
#include "tests/catch.hpp"

using namespace ladder;

namespace {

constexpr int kCodes = 256;
constexpr std::uint8_t kMaxCode = 0x7E;                      // +448
constexpr float kSmallestSubnormal = 0x1p-9f, kSmallestNormal = 0x1p-6f;

bool is_nan_code(int c) { return (c & 0x7F) == 0x7F; }

// cuda_fp8.h's host conversion (cvt.rn.satfinite.e4m3x2.f32 on the device), the one to agree with.
std::uint8_t cuda_e4m3(float x) { return __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3); }

}  // namespace

TEST_CASE("e4m3: every code decodes as the format says, and every finite code round-trips",
          "[fp8]") {
  CHECK(from_e4m3(0x00) == 0.0f);
  CHECK(std::signbit(from_e4m3(0x80)));  // -0
  CHECK(from_e4m3(0x01) == kSmallestSubnormal);
  CHECK(from_e4m3(0x07) == 7 * kSmallestSubnormal);  // the largest subnormal
  CHECK(from_e4m3(0x08) == kSmallestNormal);
  CHECK(from_e4m3(0x38) == 1.0f);   // exponent field 7 = the bias
  CHECK(from_e4m3(0x39) == 1.125f);  // 3 fraction bits: steps of 1/8 in [1, 2)
  CHECK(from_e4m3(kMaxCode) == kE4M3Max);
  CHECK(from_e4m3(0xFE) == -kE4M3Max);
  int nans = 0;
  for (int c = 0; c < kCodes; ++c) {
    const auto code = std::uint8_t(c);
    INFO("code 0x" << std::hex << c);
    const float v = from_e4m3(code);
    if (is_nan_code(c)) {
      CHECK(std::isnan(v));
      ++nans;
      continue;
    }
    REQUIRE(std::isfinite(v));
    CHECK(to_e4m3(v) == code);                       // exact values convert to themselves
    CHECK(from_e4m3(std::uint8_t(c ^ 0x80)) == -v);  // the sign bit is the sign
    __nv_fp8_e4m3 theirs;
    theirs.__x = code;
    const float cuda = float(theirs);  // cuda_fp8.h's decoding
    CHECK((cuda == v && std::signbit(cuda) == std::signbit(v)));
    // The positive codes 0x00..0x7E are in increasing order, without gaps or repeats.
    if (c > 0 && c <= kMaxCode) CHECK(from_e4m3(std::uint8_t(c - 1)) < v);
  }
  CHECK(nans == 2);  // 0x7F and 0xFF only: no infinities
}

TEST_CASE("e4m3: halfway between neighbours rounds to the even code, and off-centre to the nearer",
          "[fp8]") {
  for (int c = 0; c < kMaxCode; ++c) {
    const float lo = from_e4m3(std::uint8_t(c)), hi = from_e4m3(std::uint8_t(c + 1));
    const float mid = (lo + hi) / 2;  // exact: neighbours differ by one power of two
    INFO("between 0x" << std::hex << c << " and 0x" << c + 1);
    const std::uint8_t even = std::uint8_t(c % 2 == 0 ? c : c + 1);
    CHECK(to_e4m3(mid) == even);
    CHECK(to_e4m3(-mid) == (even | 0x80));
    CHECK(to_e4m3(std::nextafter(mid, 0.0f)) == c);
    CHECK(to_e4m3(std::nextafter(mid, kE4M3Max)) == c + 1);
  }
  // Subnormals: 2^-10 is halfway between 0 and 2^-9 (to 0, even), 3·2^-10 between codes 1 and 2.
  CHECK(to_e4m3(0x1p-10f) == 0x00);
  CHECK(to_e4m3(3 * 0x1p-10f) == 0x02);
  CHECK(to_e4m3(0x1p-11f) == 0x00);
  CHECK(to_e4m3(-0x1p-11f) == 0x80);  // the sign survives a flush to zero
  CHECK(to_e4m3(std::numeric_limits<float>::denorm_min()) == 0x00);
  CHECK(to_e4m3(-kSmallestSubnormal) == 0x81);
}

TEST_CASE("e4m3: saturates at ±448, and NaN is 0x7F", "[fp8]") {
  const float inf = std::numeric_limits<float>::infinity();
  for (float x : {448.0f, 460.0f, 464.0f /* the tie with 480 */, 479.0f, 480.0f, 1e6f, 3e38f, inf}) {
    INFO(x);
    CHECK(to_e4m3(x) == kMaxCode);
    CHECK(to_e4m3(-x) == 0xFE);
  }
  CHECK(to_e4m3(std::numeric_limits<float>::quiet_NaN()) == kE4M3NaN);
  CHECK(to_e4m3(-std::numeric_limits<float>::quiet_NaN()) == kE4M3NaN);
  CHECK(round_to(DType::E4M3, 1000.0f) == kE4M3Max);
  CHECK(round_to(DType::E4M3, 1.0625f) == 1.0f);  // the tie between 1 and 1.125: even
}

TEST_CASE("e4m3: to_e4m3 agrees with cuda_fp8.h's conversion on every code's neighbourhood and "
          "on random floats of every size", "[fp8]") {
  std::vector<float> xs;
  for (int c = 0; c < kCodes; ++c) {
    if (is_nan_code(c)) continue;
    const float v = from_e4m3(std::uint8_t(c));
    const float inf = std::numeric_limits<float>::infinity();
    for (float x : {v, std::nextafter(v, -inf), std::nextafter(v, inf)}) xs.push_back(x);
    if (c != kMaxCode && c != 0xFE) {
      const float next = from_e4m3(std::uint8_t(c + 1));
      xs.push_back((v + next) / 2);
    }
  }
  std::mt19937 rng(8);
  std::uniform_real_distribution<float> mantissa(-2.0f, 2.0f);
  std::uniform_int_distribution<int> exponent(-24, 12);
  for (int i = 0; i < 200000; ++i) xs.push_back(std::ldexp(mantissa(rng), exponent(rng)));
  int mismatches = 0;
  for (float x : xs)
    if (to_e4m3(x) != cuda_e4m3(x) && ++mismatches <= 5)
      FAIL_CHECK("x = " << x << ": ours " << int(to_e4m3(x)) << ", cuda_fp8.h's " << int(cuda_e4m3(x)));
  CHECK(mismatches == 0);
}

TEST_CASE("e4m3 quantization: a power-of-two descale, the smallest that fits amax in 448, and "
          "values that are exactly the bytes times it", "[fp8]") {
  CHECK(e4m3_descale(0.0f) == 1.0f);
  CHECK(e4m3_descale(448.0f) == 1.0f);
  CHECK(e4m3_descale(449.0f) == 2.0f);
  CHECK(e4m3_descale(224.0f) == 0.5f);
  CHECK(e4m3_descale(224.5f) == 1.0f);
  CHECK(e4m3_descale(1.0f) == 0x1p-8f);  // 1 / 2^-8 = 256 <= 448 < 512
  CHECK_THROWS_AS(e4m3_descale(std::numeric_limits<float>::infinity()), std::invalid_argument);

  for (const float scale : {1.0f, 1e-3f, 37.0f, 5e3f}) {
    INFO("N(0,1) · " << scale);
    const std::vector<float> x = random_normal(4096, 11, 1, scale);
    const QuantizedTensor t = quantize_e4m3(x);
    REQUIRE(t.bits.size() == x.size());
    REQUIRE(t.value.size() == x.size());
    int e = 0;
    CHECK(std::frexp(t.descale, &e) == 0.5f);  // a power of two
    float amax = 0;
    for (float v : x) amax = std::max(amax, std::fabs(v));
    CHECK(amax / t.descale <= kE4M3Max);
    CHECK(amax / t.descale > kE4M3Max / 2);  // and the smallest such: half of it would not fit
    for (std::size_t i = 0; i < x.size(); ++i) {
      INFO("x = " << x[i] << ", byte " << int(t.bits[i]) << ", descale " << t.descale);
      REQUIRE(t.value[i] == from_e4m3(t.bits[i]) * t.descale);
      // Half an e4m3 ulp of x / descale (2^-4 relative above 2^-6; 2^-10 absolute below), times it.
      const double bound = std::max(0x1p-4 * std::fabs(double(x[i])), 0x1p-10 * double(t.descale));
      REQUIRE(std::fabs(double(x[i]) - double(t.value[i])) <= bound);
      REQUIRE(t.bits[i] != kE4M3NaN);
    }
  }
  const QuantizedTensor zeros = quantize_e4m3(std::vector<float>(8, 0.0f));
  CHECK(zeros.descale == 1.0f);
  CHECK(std::all_of(zeros.bits.begin(), zeros.bits.end(), [](std::uint8_t b) { return b == 0; }));
}

TEST_CASE("fp8's names, sizes and output type; the 16-bit conversions refuse it", "[fp8]") {
  for (const char* name : {"fp8", "e4m3", "fp8_e4m3"}) CHECK(parse_dtype(name) == DType::E4M3);
  CHECK_FALSE(parse_dtype("fp8_e5m2"));
  CHECK_FALSE(parse_dtype("FP8"));
  for (DType t : {DType::F16, DType::BF16, DType::E4M3}) CHECK(parse_dtype(dtype_name(t)) == t);
  CHECK(std::string(dtype_name(DType::E4M3)) == "fp8");
  CHECK(fraction_bits(DType::E4M3) == 3);
  CHECK(element_bytes(DType::E4M3) == 1);
  CHECK(element_bytes(DType::BF16) == 2);
  CHECK(element_bytes(DType::F16) == 2);
  CHECK(output_dtype(DType::E4M3) == DType::BF16);
  CHECK(output_dtype(DType::F16) == DType::F16);
  CHECK(output_dtype(DType::BF16) == DType::BF16);
  CHECK_THROWS_AS(to_bits(DType::E4M3, 1.0f), std::invalid_argument);
  CHECK_THROWS_AS(from_bits(DType::E4M3, 0x38), std::invalid_argument);
  // The pass rule's absolute term of an fp8 problem is its bf16 output's.
  CHECK(attention_abs_term(1.0, DType::E4M3) == attention_abs_term(1.0, DType::BF16));
  CHECK(attention_abs_term(0.1, DType::E4M3) == std::ldexp(1.0, -11));
}

TEST_CASE("fp8 shapes: dense and GQA, causal or not; varlen, paged, decode and the backward refused",
          "[fp8][validate]") {
  const AttentionShape dense{.batch = 2, .heads = 8, .seqlen = 113, .head_dim = 64, .causal = true,
                             .dtype = DType::E4M3};
  CHECK_FALSE(validate(dense));
  CHECK(dense.to_string() == "B=2 H=8 N=113 D=64 causal fp8");
  AttentionShape gqa = dense;
  gqa.kv_heads = 2;
  CHECK_FALSE(validate(gqa));

  auto refused = [](AttentionShape s, const std::string& words) {
    INFO(s.to_string());
    const auto why = validate(s);
    REQUIRE(why);
    CHECK(why->find("fp8") != std::string::npos);
    CHECK(why->find(words) != std::string::npos);
    s.dtype = DType::BF16;  // the same layout in bf16 is a valid problem: fp8 is what is refused
    CHECK_FALSE(validate(s));
  };
  AttentionShape varlen = dense;
  varlen.batch = 3;
  varlen.q_lens = {1, 17, 113};
  refused(varlen, "variable-length");
  AttentionShape paged = dense;
  paged.page_size = 64;
  refused(paged, "paged");
  AttentionShape decode = dense;
  decode.seqlen = 4;
  decode.kv_seqlen = 1000;
  refused(decode, "decode");
  AttentionShape d24 = dense;
  d24.head_dim = 24;  // 24 bytes a row in fp8, 48 in bf16
  refused(d24, "multiple of 16");

  const auto backward = validate_backward(dense);
  REQUIRE(backward);
  CHECK(backward->find("FP8 is forward-only in this course (Part VIII)") != std::string::npos);
  AttentionShape bf16 = dense;
  bf16.dtype = DType::BF16;
  CHECK_FALSE(validate_backward(bf16));
}

TEST_CASE("fp8's fewest bytes: Q, K, V at one byte an element, O at two", "[fp8][counts]") {
  AttentionShape s{.batch = 2, .heads = 8, .seqlen = 1024, .head_dim = 128, .causal = false,
                   .dtype = DType::E4M3, .kv_heads = 2};
  const double q = 2.0 * 8 * 1024 * 128, kv = 2.0 * 2 * 1024 * 128;
  CHECK(min_bytes(s) == q * 1 + 2 * kv * 1 + q * 2);
  s.dtype = DType::BF16;
  CHECK(min_bytes(s) == (2 * q + 2 * kv) * 2);
}

namespace {

// A tiny fp8 problem: N(0,1) inputs quantized per tensor, as the runner quantizes its bf16 draws.
struct Fp8Problem {
  AttentionShape s;
  QuantizedTensor q, k, v;
  std::vector<std::int64_t> rows;
};
Fp8Problem fp8_problem(int seqlen, bool causal, float q_scale = 1.0f) {
  Fp8Problem p;
  p.s = {.batch = 1, .heads = 2, .seqlen = seqlen, .head_dim = 16, .causal = causal,
         .dtype = DType::E4M3, .kv_heads = 1};
  const auto kv = std::size_t(p.s.kv_rows() * p.s.head_dim);
  p.q = quantize_e4m3(random_normal(std::size_t(p.s.elements()), 3, 1, q_scale));
  p.k = quantize_e4m3(random_normal(kv, 3, 2));
  p.v = quantize_e4m3(random_normal(kv, 3, 3));
  p.rows = select_rows(p.s.rows(), p.s.seqlen, 1 << 20, 1);
  return p;
}

// What an FP8 kernel of the brief computes for one row, written out again: fp32 scores of the
// dequantized inputs; key blocks of `key_block` keys from the last to the first, each raising the
// running max m and rescaling O and l by exp(m_old − m_new); fp32 P = exp(s − m), P·2^8 rounded
// to e4m3 for P·V, l from fp32 P; bf16 O. Another `offset` plants a bug: 1 rounds P to e4m3
// without FlashAttention-3's offset, 2^9 lets the largest P saturate at 448. A key_block of the
// whole row rounds P against the final max instead.
std::vector<double> fp8_forward_by_hand(const Fp8Problem& p, float offset = kE4M3PScale,
                                        int key_block = kE4M3KeyBlock, std::int64_t flip_row = -1) {
  const int d = p.s.head_dim, n = p.s.seqlen;
  std::vector<double> out;
  for (std::int64_t row : p.rows) {
    const int i = int(row % n);  // one sequence, one K/V head: key j of that head is row j of K, V
    const int keys = p.s.causal ? i + 1 : n;
    std::vector<float> s(static_cast<std::size_t>(keys));
    for (int j = 0; j < keys; ++j) {
      float acc = 0.f;
      for (int t = 0; t < d; ++t) acc += p.q.value[std::size_t(row * d + t)] * p.k.value[std::size_t(j * d + t)];
      s[std::size_t(j)] = acc * p.s.softmax_scale();
    }
    // flip_row: in that row the key of the largest weight p̂_j · max |v_j| (against the final max)
    // gets the e4m3 code above its rounding, as a kernel whose P differs in the last bits might.
    int flip_key = -1;
    if (row == flip_row) {
      const float m_final = *std::max_element(s.begin(), s.end());
      double best = -1;
      for (int j = 0; j < keys; ++j) {
        double v_max = 0;
        for (int t = 0; t < d; ++t) v_max = std::max(v_max, double(std::fabs(p.v.value[std::size_t(j * d + t)])));
        const double w = std::exp(double(s[std::size_t(j)] - m_final)) * v_max;
        if (w > best) best = w, flip_key = j;
      }
    }
    const int blocks = (keys + key_block - 1) / key_block;
    float m = -INFINITY, l = 0.f;
    std::vector<float> o(std::size_t(d), 0.f);
    for (int b = blocks - 1; b >= 0; --b) {
      const int first = b * key_block, last = std::min(keys, first + key_block);
      const float m_old = m;
      for (int j = first; j < last; ++j) m = std::max(m, s[std::size_t(j)]);
      const float rescale = b == blocks - 1 ? 0.f : std::exp(m_old - m);
      l *= rescale;
      for (float& x : o) x *= rescale;
      for (int j = first; j < last; ++j) {
        const float prob = std::exp(s[std::size_t(j)] - m);
        l += prob;
        std::uint8_t code = to_e4m3(prob * offset);
        if (j == flip_key && code < 0x7E) ++code;  // the next code up (P ≥ 0: the codes ascend)
        const float rounded = from_e4m3(code) / offset;
        for (int t = 0; t < d; ++t) o[std::size_t(t)] += rounded * p.v.value[std::size_t(j * d + t)];
      }
    }
    for (int t = 0; t < d; ++t) out.push_back(round_to(DType::BF16, o[std::size_t(t)] / l));
  }
  return out;
}

}  // namespace

TEST_CASE("the fp8 low-precision reference is the FP8 forward: P·2^8 in e4m3 against the running "
          "max, block by block, bf16 O", "[fp8][reference]") {
  for (int n : {40, 300})  // one key block, and three (the last one ragged)
    for (bool causal : {false, true}) {
      const Fp8Problem p = fp8_problem(n, causal);
      INFO(p.s.to_string());
      const auto low = attention_reference(p.s, p.q.value, p.k.value, p.v.value, p.rows, Precision::Low);
      const auto exact = attention_reference(p.s, p.q.value, p.k.value, p.v.value, p.rows, Precision::Fp64);
      const std::vector<double> hand = fp8_forward_by_hand(p);
      REQUIRE(low.o.size() == hand.size());
      for (std::size_t i = 0; i < hand.size(); ++i) {
        INFO("element " << i);
        REQUIRE(low.o[i] == hand[i]);
      }
      // And it is not another type's reference: without the offset, or with bf16 P, O differs.
      const std::vector<double> no_offset = fp8_forward_by_hand(p, 1.0f);
      CHECK(std::mismatch(no_offset.begin(), no_offset.end(), hand.begin()).first != no_offset.end());
      // Past one block the max P is rounded against matters: against the final max (one block of
      // the whole row) some of O's values come out otherwise.
      if (n > kE4M3KeyBlock) {
        const std::vector<double> final_max = fp8_forward_by_hand(p, kE4M3PScale, n);
        CHECK(std::mismatch(final_max.begin(), final_max.end(), hand.begin()).first != final_max.end());
        // A variant with 192-key blocks (step 47) gets the reference of its own blocks, which is
        // not the 128-key one.
        const auto low192 = attention_reference(p.s, p.q.value, p.k.value, p.v.value, p.rows, Precision::Low, 192);
        const std::vector<double> hand192 = fp8_forward_by_hand(p, kE4M3PScale, 192);
        REQUIRE(low192.o.size() == hand192.size());
        for (std::size_t i = 0; i < hand192.size(); ++i) REQUIRE(low192.o[i] == hand192[i]);
        CHECK(low192.o != low.o);
      }
      AttentionShape bf16 = p.s;
      bf16.dtype = DType::BF16;
      const auto low_bf16 = attention_reference(bf16, p.q.value, p.k.value, p.v.value, p.rows, Precision::Low);
      CHECK(low_bf16.o != low.o);
      // e4m3's P costs more than bf16's: the fp8 low reference errs more against the same fp64.
      double err8 = 0, err16 = 0;
      for (std::size_t i = 0; i < low.o.size(); ++i) {
        err8 = std::max(err8, std::fabs(low.o[i] - exact.o[i]));
        err16 = std::max(err16, std::fabs(low_bf16.o[i] - exact.o[i]));
      }
      CHECK(err8 > err16);
    }
}

TEST_CASE("the pass rule on fp8: the FP8 forward passes, one rounding flip too; one whose P "
          "saturates, or that drops a descale, fails", "[fp8][compare]") {
  int flips_only_the_floor_passes = 0;  // the flipped row fails the rule without its floor
  for (float q_scale : {1.0f, 4.0f})  // N(0,1) logits, and larger ones (a peakier softmax)
    for (bool causal : {false, true})
      for (int n : {64, 300}) {
        const Fp8Problem p = fp8_problem(n, causal, q_scale);
        INFO(p.s.to_string() << ", Q x " << q_scale);
        const auto exact = attention_reference(p.s, p.q.value, p.k.value, p.v.value, p.rows, Precision::Fp64);
        const auto low = attention_reference(p.s, p.q.value, p.k.value, p.v.value, p.rows, Precision::Low);
        // The outputs as a kernel's whole O: every row was selected, so row r is at r·D.
        auto check = [&](const std::vector<double>& o) {
          const std::vector<float> out(o.begin(), o.end());
          return check_attention_output(out, p.s.head_dim, p.rows, exact.o, low.o, p.s.dtype, exact.floor);
        };
        REQUIRE(exact.floor.size() == p.rows.size());
        CHECK(check(fp8_forward_by_hand(p)).pass);
        // One rounding flip, in the middle row, on the key that weighs most: the allowance
        // (AttentionRows::floor) passes it, and the aggregate rule does not notice one row.
        const std::int64_t middle = p.rows[p.rows.size() / 2];
        const std::vector<double> flipped = fp8_forward_by_hand(p, kE4M3PScale, kE4M3KeyBlock, middle);
        INFO(check(flipped).verdict());
        CHECK(check(flipped).pass);
        const std::vector<float> flipped_out(flipped.begin(), flipped.end());
        if (!check_attention_output(flipped_out, p.s.head_dim, p.rows, exact.o, low.o, p.s.dtype).pass)
          ++flips_only_the_floor_passes;
        // An offset of 2^9 instead of 2^8: P·512 saturates at 448 for every P above 7/8, the row
        // max's own P = 1 among them, so each row's largest weight is cut by an eighth.
        const ErrorStats saturated = check(fp8_forward_by_hand(p, 2 * kE4M3PScale));
        INFO(saturated.verdict());
        CHECK_FALSE(saturated.pass);
        // Q's and K's descales left out of the scores (their e4m3 values used as they are): the
        // softmax runs at the wrong temperature.
        Fp8Problem raw_qk = p;
        for (std::size_t i = 0; i < raw_qk.q.value.size(); ++i) raw_qk.q.value[i] = from_e4m3(raw_qk.q.bits[i]);
        for (std::size_t i = 0; i < raw_qk.k.value.size(); ++i) raw_qk.k.value[i] = from_e4m3(raw_qk.k.bits[i]);
        CHECK_FALSE(check(fp8_forward_by_hand(raw_qk)).pass);
        // V's descale forgotten (O scaled by 1 / v_descale): the values' size is wrong.
        Fp8Problem raw_v = p;
        for (std::size_t i = 0; i < raw_v.v.value.size(); ++i) raw_v.v.value[i] = from_e4m3(raw_v.v.bits[i]);
        CHECK_FALSE(check(fp8_forward_by_hand(raw_v)).pass);
      }
  // The allowance is not idle: somewhere in the grid a single flip is more than the row rule
  // alone allows (the peaky Q × 4 rows, where O is a few weights).
  CHECK(flips_only_the_floor_passes > 0);
}

TEST_CASE("relative RMS error over the checked rows", "[fp8][compare]") {
  const std::vector<std::int64_t> rows = {0, 2};
  const std::vector<float> out = {1, 2, /* row 1, unchecked: */ 100, 100, 3, 5};
  const std::vector<double> ref = {1, 2, 3, 4};
  CHECK(relative_rms_error(out, 2, rows, ref) == Approx(std::sqrt(1.0 / 30.0)).epsilon(1e-12));
  CHECK(relative_rms_error(std::vector<float>{1, 2, 100, 100, 3, 4}, 2, rows, ref) == 0.0);
  std::vector<float> nan_out = out;
  nan_out[4] = std::numeric_limits<float>::quiet_NaN();
  CHECK(std::isnan(relative_rms_error(nan_out, 2, rows, ref)));
  CHECK(std::isnan(relative_rms_error(out, 2, {}, {})));
}

TEST_CASE("fp8 in the registry: refused unless declared, listed where declared, read as_fp8()",
          "[fp8][registry]") {
  auto launch = [](const AttentionArgs&, cudaStream_t) {};
  const Variant fp16_only = attention_variant("a", "fp16 only", launch);
  Variant fp8 = attention_variant("fp8", "FP8 forward", launch);
  fp8.needs_sm(90).for_dtypes({DType::E4M3}).serves({Feature::Gqa});
  const AttentionShape shape{.batch = 1, .heads = 4, .seqlen = 17, .head_dim = 64,
                             .dtype = DType::E4M3, .kv_heads = 2};
  const auto why = fp16_only.constraints.refuse(AttentionShape{.batch = 1, .heads = 1, .seqlen = 17,
                                                               .head_dim = 64, .dtype = DType::E4M3}, 90);
  REQUIRE(why);
  CHECK(*why == "runs fp16 only (asked for fp8)");
  CHECK_FALSE(fp8.constraints.refuse(shape, 90));
  AttentionShape f16 = shape;
  f16.dtype = DType::F16;
  CHECK(fp8.constraints.refuse(f16, 90));
  CHECK(fp8.constraints.describe().find("fp8") != std::string::npos);
  Registry registry;
  registry.add(attention_step(45, "fp8_forward", "FP8 forward").add(fp8));
  CHECK(list_steps(registry, -1).find("fp8") != std::string::npos);

  // Every registered attention variant that does not declare fp8, the library peers included,
  // refuses an fp8 problem it would run in its own type, and for that reason: none of them reads
  // one byte an element.
  int checked = 0;
  for (const Step& step : Registry::instance().steps())
    for (const Variant& v : step.variants) {
      const auto& types = v.constraints.dtypes;
      if (step.kind != Kind::Attention || std::find(types.begin(), types.end(), DType::E4M3) != types.end())
        continue;
      INFO(variant_id(step, v));
      AttentionShape dense{.batch = 1, .heads = 4, .seqlen = 17, .head_dim = 64, .dtype = types.front()};
      if (v.constraints.refuse(dense, 90)) continue;  // refused for another reason: not this check's
      dense.dtype = DType::E4M3;
      const auto refusal = v.constraints.refuse(dense, 90);
      REQUIRE(refusal);
      CHECK(refusal->find("(asked for fp8)") != std::string::npos);
      ++checked;
    }
  CHECK(checked >= 20);

  // The tensors: e4m3 bytes in and bf16 out for fp8, and neither 16-bit reading of them.
  std::uint8_t q[4], k[4], v[4];
  __nv_bfloat16 o[4];
  AttentionArgs args{};
  args.shape = shape;
  args.q = reinterpret_cast<const __half*>(q);
  args.k = reinterpret_cast<const __half*>(k);
  args.v = reinterpret_cast<const __half*>(v);
  args.o = reinterpret_cast<__half*>(o);
  CHECK(args.q_descale == 1.f);  // the runner sets them for fp8; 1 is the 16-bit types' value
  const Fp8Tensors t = args.as_fp8();
  CHECK(t.q == q);
  CHECK(t.k == k);
  CHECK(t.v == v);
  CHECK(t.o == o);
  CHECK_THROWS_AS(args.as<__half>(), std::logic_error);
  CHECK_THROWS_AS(args.as<__nv_bfloat16>(), std::logic_error);
  args.shape.dtype = DType::BF16;
  CHECK_THROWS_AS(args.as_fp8(), std::logic_error);
  CHECK_NOTHROW(args.as<__nv_bfloat16>());
}

TEST_CASE("--dtype fp8 (or e4m3) asks for fp8 problems", "[fp8][cli]") {
  auto parse = [](std::vector<const char*> args) {
    args.insert(args.begin(), "ladder");
    return parse_cli(int(args.size()), args.data(), -1);
  };
  for (const char* name : {"fp8", "e4m3"}) {
    const auto o = parse({"--dtype", name, "--mask", "both"});
    REQUIRE(o.options);
    const auto shapes = attention_shapes(*o.options);
    REQUIRE(shapes.size() == 2);
    CHECK(shapes[0].dtype == DType::E4M3);
    CHECK(shapes[1].causal);
  }
  const auto both = parse({"--dtype", "bf16,fp8"});
  REQUIRE(both.options);
  CHECK(attention_shapes(*both.options).at(1).dtype == DType::E4M3);
  const auto bad = parse({"--dtype", "fp8_e5m2"});
  CHECK_FALSE(bad.options);
  CHECK(bad.exit_code == 2);
}
