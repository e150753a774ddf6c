// Shared by the GPU tests: the session (created once in main), and which step to test.
#pragma once

#include <cstdlib>
#include <string>
#include <vector>

#include "common/registry.hpp"
#include "common/runner.hpp"

namespace ladder::testing {

Session& session();

// Variants of the registered steps of `kind`, restricted to the step named by LADDER_TEST_STEP
// (ctest runs one step per test entry) when it is set.
inline std::vector<VariantRef> variants_of(Kind kind) {
  const char* only = std::getenv("LADDER_TEST_STEP");
  std::vector<VariantRef> out;
  for (const auto& step : Registry::instance().steps()) {
    if (step.kind != kind) continue;
    if (only && *only && step.number != std::atoi(only)) continue;
    for (std::size_t i = 0; i < step.variants.size(); ++i) out.push_back({&step, i});
  }
  return out;
}

// Check-only options: no timing, every row against the reference where affordable.
inline RunOptions check_options() {
  RunOptions o;
  o.time = false;
  o.check = true;
  o.max_reference_rows = 1 << 20;
  return o;
}

}  // namespace ladder::testing
