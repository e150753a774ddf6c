// FLOP and byte counts, and shape validation.
#include "common/problem.hpp"
#include "tests/catch.hpp"

using namespace ladder;

TEST_CASE("attention FLOPs are 4·B·H·N²·D, halved when causal", "[counts]") {
  AttentionShape s{.batch = 4, .heads = 8, .seqlen = 4096, .head_dim = 64, .causal = false};
  CHECK(flops(s) == 4.0 * 4 * 8 * 4096.0 * 4096.0 * 64);
  s.causal = true;
  CHECK(flops(s) == 2.0 * 4 * 8 * 4096.0 * 4096.0 * 64);
  CHECK(min_bytes(s) == 4.0 * 4 * 8 * 4096 * 64 * 2);  // Q, K, V, O in fp16
}

TEST_CASE("matrix product and reduction counts", "[counts]") {
  CHECK(flops(MatmulShape{.m = 64, .n = 64, .k = 64}) == 2.0 * 64 * 64 * 64);
  CHECK(min_bytes(MatmulShape{.m = 2, .n = 3, .k = 4}) == 4.0 * (8 + 12 + 6));
  CHECK(flops(ReductionShape{.count = 1000}) == 999);
  CHECK(min_bytes(ReductionShape{.count = 1000}) == 4004);
}

TEST_CASE("shape validation refuses what no step can run", "[validation]") {
  CHECK_FALSE(validate(AttentionShape{}).has_value());
  CHECK(validate(AttentionShape{.batch = 0}).has_value());
  CHECK(validate(AttentionShape{.heads = -1}).has_value());
  CHECK(validate(AttentionShape{.seqlen = 0}).has_value());
  CHECK(validate(AttentionShape{.head_dim = 60}).value().find("multiple of 8") != std::string::npos);
  CHECK(validate(MatmulShape{.m = 0}).has_value());
  CHECK(validate(ReductionShape{.count = 0}).has_value());
  CHECK_FALSE(validate(ReductionShape{.count = 1}).has_value());
}

TEST_CASE("ceil_div covers ragged tiles", "[counts]") {
  CHECK(ceil_div(1, 64) == 1);
  CHECK(ceil_div(64, 64) == 1);
  CHECK(ceil_div(65, 64) == 2);
  CHECK(ceil_div(std::int64_t(1) << 40, std::int64_t(3)) == 366503875926);
}
