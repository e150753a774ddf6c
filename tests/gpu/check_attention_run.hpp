// The verdict every attention row of a GPU test must meet (test_attention.cpp, test_serving.cpp).
#pragma once

#include <cmath>
#include <span>

#include "common/runner.hpp"
#include "tests/catch.hpp"
#include "tests/gpu/gpu_support.hpp"

namespace ladder::testing {

// A row that ran must pass everything. A row may be skipped only when the variant's declared
// constraints rule the problem out on this GPU: a variant that starts refusing shapes it claims
// to support (too much shared memory, say) fails here instead of passing silently.
inline void check_attention_run(const ProblemRun& run, std::span<const VariantRef> variants,
                                const AttentionShape& shape) {
  REQUIRE(run.rows.size() == variants.size());
  for (std::size_t i = 0; i < run.rows.size(); ++i) {
    const Row& r = run.rows[i];
    INFO(r.id << " on " << run.shape << ": " << r.note);
    if (r.status == Row::Status::Skipped) {
      if (!r.duplicate_of.empty()) continue;  // the other variant's row checks this kernel
      if (r.peer) continue;  // a library may decline a problem (LibraryRefusal), in its own words
      CHECK(variants[i].variant().constraints.refuse(shape, session().gpu.sm));
      continue;
    }
    REQUIRE(r.status == Row::Status::Ok);
    REQUIRE(r.error);
    INFO(r.error->verdict() << " (rel L2 " << r.error->rel_l2 << ")");
    CHECK(r.error->nonfinite == 0);
    if (!r.approximate.empty()) {
      // An experiment that trades accuracy on purpose: its pass-rule verdict is the measurement,
      // but it must stay within kApproximateSlack of the tolerance (Variant::approximate).
      CHECK(r.status_text() != "FAIL");
    } else {
      CHECK(r.error->pass);
      if (r.lse_error) {
        INFO("log-sum-exp: " << r.lse_error->verdict());
        CHECK(r.lse_error->pass);
      }
    }
    // fp8: the error against the unquantized inputs is reported for every row that was checked
    // (a measurement, not a verdict: only that it is there and finite is the runner's to keep).
    if (shape.dtype == DType::E4M3) {
      REQUIRE(r.error_vs_unquantized);
      CHECK(std::isfinite(*r.error_vs_unquantized));
    } else {
      CHECK_FALSE(r.error_vs_unquantized);
    }
    REQUIRE(r.rerun_identical);
    if (r.deterministic) CHECK(*r.rerun_identical);  // no atomics, no races: same bits every time
  }
}

}  // namespace ladder::testing
