// Part VI's problems on the CPU: the layouts and counts of GQA, decode, variable-length batches and
// paged caches; the fp64 reference of each equals the dense reference of the same arithmetic; and
// the pass rule fails the mistakes a serving kernel makes (a CPU model of a split-KV decode kernel,
// correct and with one planted bug at a time, goes through the runner's own check).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "common/cli.hpp"
#include "common/compare.hpp"
#include "common/problem.hpp"
#include "common/random.hpp"
#include "common/reference.hpp"
#include "common/registry.hpp"
#include "tests/catch.hpp"

using namespace ladder;

namespace {

std::vector<float> values(std::size_t count, std::uint64_t stream, DType dtype = DType::F16) {
  return random_tensor16(count, 20261201, stream, dtype).value;
}
std::vector<std::uint16_t> bits(std::size_t count, std::uint64_t stream, DType dtype = DType::F16) {
  return random_tensor16(count, 20261201, stream, dtype).bits;
}

std::vector<std::int64_t> all_rows(const AttentionShape& s) {
  std::vector<std::int64_t> rows(std::size_t(s.rows()));
  for (std::size_t r = 0; r < rows.size(); ++r) rows[r] = std::int64_t(r);
  return rows;
}

void require_same(const AttentionRows& a, const AttentionRows& b) {
  REQUIRE(a.o.size() == b.o.size());
  for (std::size_t i = 0; i < a.o.size(); ++i) REQUIRE(a.o[i] == Approx(b.o[i]).margin(1e-12));
  for (std::size_t i = 0; i < a.lse.size(); ++i) REQUIRE(a.lse[i] == Approx(b.lse[i]).margin(1e-12));
}

}  // namespace

TEST_CASE("serving shapes: lengths, offsets and counts", "[serving]") {
  AttentionShape dense{.batch = 2, .heads = 8, .seqlen = 5, .head_dim = 64};
  CHECK_FALSE(dense.gqa());
  CHECK_FALSE(dense.decode());
  CHECK(features_of(dense) == 0);
  CHECK(dense.to_string() == "B=2 H=8 N=5 D=64 non-causal");

  AttentionShape gqa = dense;
  gqa.kv_heads = 2;
  CHECK(gqa.group() == 4);
  CHECK(gqa.kv_rows() == 2 * 2 * 5);
  CHECK(features_of(gqa) == unsigned(Feature::Gqa));
  CHECK(min_bytes(gqa) == Approx(2.0 * (2 * 80 * 64 + 2 * 20 * 64)));
  CHECK(flops(gqa) == flops(dense));  // GQA saves bytes, not products

  // Decode: 3 queries against 10 keys, causal aligned to the end: query i sees 8 + i keys.
  AttentionShape dec{.batch = 1, .heads = 1, .seqlen = 3, .head_dim = 8, .causal = true, .kv_seqlen = 10};
  CHECK(dec.decode());
  CHECK(dec.last_key(0, 0) == 7);
  CHECK(dec.last_key(0, 2) == 9);
  CHECK(flops(dec) == Approx(4.0 * 8 * (8 + 9 + 10)));  // exact pairs, not half
  dec.causal = false;
  CHECK(flops(dec) == Approx(4.0 * 8 * 30));
  CHECK(dec.to_string() == "B=1 H=1 N=3 D=8 non-causal Nkv=10");

  // Varlen: [total, H, D] with cu_seqlens.
  AttentionShape var{.batch = 3, .heads = 2, .seqlen = 7, .head_dim = 8, .causal = true, .q_lens = {4, 1, 7}};
  CHECK(var.total_q() == 12);
  CHECK(var.cu_seqlens_q() == std::vector<int>{0, 4, 5, 12});
  CHECK(var.q_offset(2, 1, 3) == ((5 + 3) * 2 + 1) * 8);
  CHECK(var.lse_index(2, 1, 3) == 1 * 12 + 5 + 3);
  CHECK(flops(var) == Approx(4.0 * 2 * 8 * (16 + 1 + 49) / 2.0));
  const RowIndex index(var);
  for (std::int64_t r = 0; r < var.rows(); ++r) {
    const auto [b, h, i] = index.coord(r);
    CHECK(index.row(b, h, i) == r);
    CHECK(var.q_offset(b, h, i) == r * 8);
  }

  // Paged: each sequence owns ceil(kv_len / P) pages.
  AttentionShape paged{.batch = 2, .heads = 4, .seqlen = 1, .head_dim = 8, .kv_heads = 2,
                       .kv_seqlen = 33, .page_size = 16};
  CHECK(paged.pages_per_seq() == 3);
  CHECK(paged.num_pages() == 6);
  CHECK(paged.kv_elements() == 6 * 2 * 16 * 8);
  CHECK(features_of(paged) == (unsigned(Feature::Gqa) | unsigned(Feature::Decode) | unsigned(Feature::Paged)));
}

TEST_CASE("serving shapes are validated with a reason", "[serving]") {
  CHECK(validate(AttentionShape{.heads = 8, .kv_heads = 3}).value().find("divide") != std::string::npos);
  CHECK(validate(AttentionShape{.seqlen = 8, .causal = true, .kv_seqlen = 4}).value().find("no key") !=
        std::string::npos);
  CHECK(validate(AttentionShape{.batch = 2, .q_lens = {3}}));
  CHECK(validate(AttentionShape{.batch = 2, .q_lens = {3, 0}}));
  CHECK(validate(AttentionShape{.batch = 1, .q_lens = {3}, .kv_lens = {3, 4}}));
  CHECK(validate(AttentionShape{.page_size = 12}));
  CHECK_FALSE(validate(AttentionShape{.batch = 2, .seqlen = 9, .causal = true, .q_lens = {3, 9}}));
  CHECK_FALSE(validate(AttentionShape{.seqlen = 1, .causal = true, .kv_heads = 1, .kv_seqlen = 4097,
                                      .page_size = 64}));
}

TEST_CASE("a variant runs a Part VI property only if it declares it", "[serving]") {
  Variant plain = attention_variant("plain", "a Part IV kernel", [](const AttentionArgs&, cudaStream_t) {});
  Variant decode = attention_variant("decode", "a decode kernel", [](const AttentionArgs&, cudaStream_t) {})
                       .serves({Feature::Gqa, Feature::Decode});
  const AttentionShape dense{.seqlen = 128};
  const AttentionShape gqa_decode{.heads = 8, .seqlen = 1, .kv_heads = 2, .kv_seqlen = 4096};
  AttentionShape paged = gqa_decode;
  paged.page_size = 64;
  CHECK_FALSE(plain.constraints.refuse(dense, 90));
  CHECK(plain.constraints.refuse(gqa_decode, 90).value().find("GQA") != std::string::npos);
  CHECK_FALSE(decode.constraints.refuse(gqa_decode, 90));
  CHECK(decode.constraints.refuse(paged, 90).value().find("paged") != std::string::npos);
  CHECK(decode.constraints.describe().find("GQA, decode") != std::string::npos);
}

TEST_CASE("GQA's reference is the dense one with K/V heads repeated", "[serving][reference]") {
  const AttentionShape gqa{.batch = 2, .heads = 6, .seqlen = 33, .head_dim = 16, .causal = true, .kv_heads = 2};
  AttentionShape dense = gqa;
  dense.kv_heads = 0;
  const auto q = values(std::size_t(gqa.elements()), 1);
  const auto k = values(std::size_t(gqa.kv_rows() * 16), 2);
  const auto v = values(std::size_t(gqa.kv_rows() * 16), 3);
  std::vector<float> k_rep, v_rep;  // [B, H, N, D]: head h holds K/V head h / group
  for (int b = 0; b < 2; ++b)
    for (int h = 0; h < 6; ++h) {
      const auto from = std::ptrdiff_t(gqa.kv_offset(b, h / 3, 0));
      k_rep.insert(k_rep.end(), k.begin() + from, k.begin() + from + 33 * 16);
      v_rep.insert(v_rep.end(), v.begin() + from, v.begin() + from + 33 * 16);
    }
  for (Precision p : {Precision::Fp64, Precision::Low})
    require_same(attention_reference(gqa, q, k, v, all_rows(gqa), p),
                 attention_reference(dense, q, k_rep, v_rep, all_rows(dense), p));
}

TEST_CASE("decode's reference is the last rows of the square causal problem", "[serving][reference]") {
  // Queries at positions Nk - Nq .. Nk - 1 of an Nk-token causal problem see what decode sees.
  const int nq = 5, nk = 70, d = 16;
  const AttentionShape dec{.batch = 1, .heads = 2, .seqlen = nq, .head_dim = d, .causal = true, .kv_seqlen = nk};
  const AttentionShape square{.batch = 1, .heads = 2, .seqlen = nk, .head_dim = d, .causal = true};
  const auto q_full = values(std::size_t(square.elements()), 1);
  const auto k = values(std::size_t(square.elements()), 2);
  const auto v = values(std::size_t(square.elements()), 3);
  std::vector<float> q;
  std::vector<std::int64_t> tail;
  for (int h = 0; h < 2; ++h)
    for (int i = 0; i < nq; ++i) {
      const auto at = std::ptrdiff_t(square.q_offset(0, h, nk - nq + i));
      q.insert(q.end(), q_full.begin() + at, q_full.begin() + at + d);
      tail.push_back(std::int64_t(h) * nk + nk - nq + i);
    }
  require_same(attention_reference(dec, q, k, v, all_rows(dec), Precision::Fp64),
               attention_reference(square, q_full, k, v, tail, Precision::Fp64));
}

TEST_CASE("varlen's reference is each sequence's dense reference", "[serving][reference]") {
  const std::vector<int> lens = {9, 1, 40};
  const int h = 4, hkv = 2, d = 16;
  const AttentionShape var{.batch = 3, .heads = h, .seqlen = 40, .head_dim = d, .causal = true,
                           .kv_heads = hkv, .q_lens = lens};
  const auto q = values(std::size_t(var.elements()), 1);
  const auto k = values(std::size_t(var.kv_rows() * d), 2);
  const auto v = values(std::size_t(var.kv_rows() * d), 3);
  const auto whole = attention_reference(var, q, k, v, all_rows(var), Precision::Fp64);
  for (int b = 0; b < 3; ++b) {
    // Sequence b alone, transposed to [1, H, N, D].
    const AttentionShape one{.batch = 1, .heads = h, .seqlen = lens[std::size_t(b)], .head_dim = d,
                             .causal = true, .kv_heads = hkv};
    std::vector<float> q1, k1, v1;
    for (int hh = 0; hh < h; ++hh)
      for (int i = 0; i < one.seqlen; ++i) {
        const auto at = std::ptrdiff_t(var.q_offset(b, hh, i));
        q1.insert(q1.end(), q.begin() + at, q.begin() + at + d);
      }
    for (int hk = 0; hk < hkv; ++hk)
      for (int j = 0; j < one.seqlen; ++j) {
        const auto at = std::ptrdiff_t(var.kv_offset(b, hk, j));
        k1.insert(k1.end(), k.begin() + at, k.begin() + at + d);
        v1.insert(v1.end(), v.begin() + at, v.begin() + at + d);
      }
    const auto alone = attention_reference(one, q1, k1, v1, all_rows(one), Precision::Fp64);
    const RowIndex index(var);
    for (int hh = 0; hh < h; ++hh)
      for (int i = 0; i < one.seqlen; ++i) {
        const std::size_t r = std::size_t(index.row(b, hh, i)), r1 = std::size_t(hh * one.seqlen + i);
        REQUIRE(whole.lse[r] == Approx(alone.lse[r1]).margin(1e-12));
        CHECK(whole.lse_at[r] == var.lse_index(b, hh, i));
        for (int t = 0; t < d; ++t)
          REQUIRE(whole.o[r * d + std::size_t(t)] == Approx(alone.o[r1 * d + std::size_t(t)]).margin(1e-12));
      }
  }
  // Every (sequence, head, tile) and each sequence's first and last query are sampled.
  const AttentionShape big{.batch = 3, .heads = 2, .seqlen = 300, .head_dim = 8, .q_lens = {300, 1, 129}};
  const auto rows = select_attention_rows(big, 10, 3);
  const std::set<std::int64_t> chosen(rows.begin(), rows.end());
  const RowIndex bi(big);
  for (int b = 0; b < 3; ++b)
    for (int hh = 0; hh < 2; ++hh) {
      CHECK(chosen.count(bi.row(b, hh, 0)));
      CHECK(chosen.count(bi.row(b, hh, big.q_len(b) - 1)));
    }
}

TEST_CASE("the paged cache holds the logical keys where its block table says", "[serving][paged]") {
  const AttentionShape s{.batch = 3, .heads = 4, .seqlen = 1, .head_dim = 8, .kv_heads = 2,
                         .kv_seqlen = 37, .page_size = 16};
  const auto k = bits(std::size_t(s.kv_rows() * 8), 2), v = bits(std::size_t(s.kv_rows() * 8), 3);
  const RowIndex index(s);
  const PagedCache cache = page_cache(s, index, k, v, 5);
  REQUIRE(cache.k.size() == std::size_t(s.kv_elements()));
  std::set<int> used(cache.block_table.begin(), cache.block_table.end());
  CHECK(used.size() == std::size_t(s.num_pages()));  // a permutation of the pool's pages
  CHECK(*used.begin() == 0);
  bool shuffled = false;
  for (int b = 0; b < 3; ++b)
    for (int hk = 0; hk < 2; ++hk)
      for (int j = 0; j < 48; ++j) {
        const int page = cache.block_table[std::size_t(b * 3 + j / 16)];
        shuffled |= page != b * 3 + j / 16;
        const std::size_t at = ((std::size_t(page) * 2 + hk) * 16 + std::size_t(j % 16)) * 8;
        for (int t = 0; t < 8; ++t) {
          const std::uint16_t want =
              j < 37 ? k[std::size_t(index.key_offset(b, hk, j)) + std::size_t(t)] : to_bits(s.dtype, kPagePadValue);
          REQUIRE(cache.k[at + std::size_t(t)] == want);
        }
      }
  CHECK(shuffled);
}

// ---- The pass rule against a CPU model of a split-KV decode kernel -------------------------------
namespace {

enum class Bug {
  None,
  KvHeadModulo,      // Q head h reads K/V head h % Hkv instead of h / group
  CausalFromStart,   // the decode mask aligned to the start (j <= i) instead of the end
  EqualWeights,      // partial outputs averaged without their log-sum-exp weights
  PadKeysRead,       // the last page's rows past the sequence end not masked (paged)
  LastSplitDropped,  // the combine forgets the last split
};

// A split-KV decode kernel as a model: scores in fp32, each split of the keys an online softmax
// with P rounded to the element type, the partial outputs merged by their LSEs, O rounded.
std::vector<float> decode_model(const AttentionShape& s, const std::vector<float>& q, const PagedCache& paged,
                                int splits, Bug bug) {
  const RowIndex index(s);
  const int d = s.head_dim;
  std::vector<float> out(std::size_t(s.elements()), 0.f);
  for (std::int64_t row = 0; row < s.rows(); ++row) {
    const auto [b, h, i] = index.coord(row);
    const int hk = bug == Bug::KvHeadModulo ? h % s.hkv() : h / s.group();
    int n_keys = (bug == Bug::CausalFromStart && s.causal) ? std::min(i + 1, s.kv_len(b)) : s.last_key(b, i) + 1;
    if (bug == Bug::PadKeysRead) n_keys = ceil_div(s.kv_len(b), s.page_size) * s.page_size;
    std::vector<float> k_row(static_cast<std::size_t>(d)), v_row(static_cast<std::size_t>(d));
    auto key = [&](int j, bool value) -> float const* {
      const int page = paged.block_table[std::size_t(b * s.pages_per_seq() + j / s.page_size)];
      std::vector<float>& widened = value ? v_row : k_row;
      const std::size_t at = ((std::size_t(page) * s.hkv() + std::size_t(hk)) * s.page_size +
                              std::size_t(j % s.page_size)) * std::size_t(d);
      const auto& pool = value ? paged.v : paged.k;
      for (int t = 0; t < d; ++t) widened[std::size_t(t)] = from_bits(s.dtype, pool[at + std::size_t(t)]);
      return widened.data();
    };
    const int per_split = ceil_div(n_keys, splits);
    std::vector<float> m(std::size_t(splits), -INFINITY), l(std::size_t(splits), 0.f);
    std::vector<float> acc(std::size_t(splits) * std::size_t(d), 0.f);
    for (int sp = 0; sp < splits; ++sp)
      for (int j = sp * per_split; j < std::min(n_keys, (sp + 1) * per_split); ++j) {
        const float* kr = key(j, false);
        float score = 0.f;
        for (int t = 0; t < d; ++t) score += q[std::size_t(row * d + t)] * kr[t];
        score *= s.softmax_scale();
        const float m_new = std::max(m[std::size_t(sp)], score);
        const float rescale = std::exp(m[std::size_t(sp)] - m_new);
        const float p = std::exp(score - m_new);
        l[std::size_t(sp)] = l[std::size_t(sp)] * rescale + p;
        const float* vr = key(j, true);
        for (int t = 0; t < d; ++t) {
          float& a = acc[std::size_t(sp * d + t)];
          a = a * rescale + round_to(s.dtype, p) * vr[t];
        }
        m[std::size_t(sp)] = m_new;
      }
    // The combine: O = Σ_s exp(lse_s − lse) · O_s / l_s, lse = log Σ_s exp(lse_s).
    const int used = bug == Bug::LastSplitDropped && splits > 1 ? splits - 1 : splits;
    float lse_max = -INFINITY;
    for (int sp = 0; sp < used; ++sp)
      if (l[std::size_t(sp)] > 0) lse_max = std::max(lse_max, m[std::size_t(sp)] + std::log(l[std::size_t(sp)]));
    float total = 0.f;
    std::vector<float> o(std::size_t(d), 0.f);
    for (int sp = 0; sp < used; ++sp) {
      if (l[std::size_t(sp)] == 0) continue;
      const float lse_s = m[std::size_t(sp)] + std::log(l[std::size_t(sp)]);
      const float w = bug == Bug::EqualWeights ? 1.f : std::exp(lse_s - lse_max);
      total += w;
      for (int t = 0; t < d; ++t) o[std::size_t(t)] += w * acc[std::size_t(sp * d + t)] / l[std::size_t(sp)];
    }
    for (int t = 0; t < d; ++t) out[std::size_t(row * d + t)] = round_to(s.dtype, o[std::size_t(t)] / total);
  }
  return out;
}

bool model_passes(const AttentionShape& s, int splits, Bug bug) {
  const auto q16 = random_tensor16(std::size_t(s.elements()), 11, 1, s.dtype);
  const auto k16 = random_tensor16(std::size_t(s.kv_rows() * s.head_dim), 11, 2, s.dtype);
  const auto v16 = random_tensor16(std::size_t(s.kv_rows() * s.head_dim), 11, 3, s.dtype);
  const PagedCache paged = page_cache(s, RowIndex(s), k16.bits, v16.bits, 3);
  const auto rows = select_attention_rows(s, 1 << 20, 1);
  const auto ref64 = attention_reference(s, q16.value, k16.value, v16.value, rows, Precision::Fp64);
  const auto reflow = attention_reference(s, q16.value, k16.value, v16.value, rows, Precision::Low);
  const auto out = decode_model(s, q16.value, paged, splits, bug);
  const ErrorStats e = check_attention_output(out, s.head_dim, rows, ref64.o, reflow.o, s.dtype);
  INFO(e.verdict());
  return e.pass;
}

}  // namespace

TEST_CASE("the pass rule passes a correct split-KV decode and fails each planted bug", "[serving][pass-rule]") {
  for (DType dtype : {DType::F16, DType::BF16})
    for (bool causal : {false, true}) {
      // GQA group 4, 7 queries, a cache of 1000 keys in scattered pages of 64 rows (the last page
      // part-filled), 4 splits.
      const AttentionShape s{.batch = 2, .heads = 8, .seqlen = 7, .head_dim = 64, .causal = causal,
                             .dtype = dtype, .kv_heads = 2, .kv_seqlen = 1000, .page_size = 64};
      INFO(s.to_string());
      CHECK(model_passes(s, 4, Bug::None));
      CHECK(model_passes(s, 1, Bug::None));
      CHECK_FALSE(model_passes(s, 4, Bug::KvHeadModulo));
      CHECK_FALSE(model_passes(s, 4, Bug::EqualWeights));
      CHECK_FALSE(model_passes(s, 4, Bug::PadKeysRead));
      CHECK_FALSE(model_passes(s, 4, Bug::LastSplitDropped));
      if (causal) CHECK_FALSE(model_passes(s, 4, Bug::CausalFromStart));
    }
}

TEST_CASE("--varlen, --kv-heads, --kv-n and --page-size", "[serving][cli]") {
  CHECK(parse_varlen("1,17,4097") == std::vector<int>{1, 17, 4097});
  const auto drawn = parse_varlen("random:50:8192:3");
  REQUIRE(drawn);
  CHECK(drawn->size() == 50);
  CHECK(*std::max_element(drawn->begin(), drawn->end()) <= 8192);
  CHECK(*std::min_element(drawn->begin(), drawn->end()) >= 1);
  CHECK(parse_varlen("random:50:8192:3") == drawn);  // seeded
  CHECK(parse_varlen("random:50:8192:4") != drawn);
  for (const char* bad : {"", "0", "1,,2", "1,-2", "random:0:5", "random:5", "random:5:0", "x"})
    CHECK_FALSE(parse_varlen(bad));

  std::vector<const char*> args = {"ladder", "--heads", "32", "--kv-heads", "8", "--n", "1",
                                   "--kv-n", "4096,32768", "--page-size", "64", "--d", "128"};
  const auto parsed = parse_cli(int(args.size()), args.data(), -1);
  REQUIRE(parsed.options);
  const auto shapes = attention_shapes(*parsed.options);
  REQUIRE(shapes.size() == 2);
  CHECK(shapes[1].kv_len(0) == 32768);
  CHECK(shapes[1].group() == 4);
  CHECK(shapes[1].page_size == 64);

  std::vector<const char*> var = {"ladder", "--varlen", "5,300,17", "--mask", "causal"};
  const auto pv = parse_cli(int(var.size()), var.data(), -1);
  REQUIRE(pv.options);
  const auto vs = attention_shapes(*pv.options);
  REQUIRE(vs.size() == 1);
  CHECK(vs[0].batch == 3);
  CHECK(vs[0].seqlen == 300);
  CHECK(vs[0].total_q() == 322);

  std::vector<const char*> both = {"ladder", "--varlen", "5,300,17", "--varlen", "dense", "--n", "64",
                                   "--kv-heads", "0,2", "--heads", "4"};
  const auto pboth = parse_cli(int(both.size()), both.data(), -1);
  REQUIRE(pboth.options);
  const auto bs = attention_shapes(*pboth.options);
  REQUIRE(bs.size() == 4);  // (varlen, dense) × (Hkv = H, Hkv = 2), in that order
  CHECK(bs[0].varlen());
  CHECK_FALSE(bs[0].gqa());
  CHECK(bs[1].group() == 2);
  CHECK_FALSE(bs[2].varlen());
  CHECK(bs[2].seqlen == 64);
  CHECK(bs[3].gqa());

  std::vector<const char*> bad = {"ladder", "--varlen", "3,0"};
  const auto pb = parse_cli(int(bad.size()), bad.data(), -1);
  CHECK_FALSE(pb.options);
  CHECK(pb.exit_code == 2);
}
