// Every matrix-product variant against the fp64 reference on ragged shapes.
#include "common/runner.hpp"
#include "tests/catch.hpp"
#include "tests/gpu/gpu_support.hpp"

using namespace ladder;

TEST_CASE("matmul: ragged shapes", "[gpu][matmul]") {
  const auto variants = testing::variants_of(Kind::Matmul);
  if (variants.empty()) return;
  const MatmulShape shapes[] = {{1, 1, 1},       {17, 33, 5},     {64, 64, 64},
                                {113, 127, 129}, {1000, 1023, 300}, {2048, 2048, 2048}};
  for (const auto& shape : shapes) {
    RunOptions options = testing::check_options();
    options.max_reference_rows = 256;
    const auto run = run_matmul(testing::session(), shape, variants, options);
    for (const Row& r : run.rows) {
      INFO(r.id << " on " << run.shape << ": " << r.note);
      REQUIRE(r.status == Row::Status::Ok);
      INFO(r.error->verdict());
      CHECK(r.error->pass);
      REQUIRE(r.rerun_identical);
      if (r.deterministic) CHECK(*r.rerun_identical);
    }
  }
}
