// A test of lab 06's protocol model (a CPU test, label cpu; not part of the lab): the reference
// protocol must pass, and each classic mistake — one per answer of ring.hpp — must be caught,
// with the right diagnosis. A model that passed everything would let any starter through.
#include <fmt/format.h>

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "labs/L06_mbarrier_ring/model.hpp"

namespace {

using lab06::Release;
using lab06::model::Problem;
using lab06::model::Protocol;

constexpr std::uint32_t box(int rows, int d) { return std::uint32_t(rows) * d * lab06::kElementBytes; }

Protocol reference() {
  return {[](int i, int s) { return i % s; }, [](int i, int s) { return std::uint32_t(i / s) & 1; },
          [](int i, int s) { return (std::uint32_t(i / s) & 1) ^ 1; },
          [](int rows, int d, int) { return 2 * box(rows, d); }, Release::kAfterOutput};
}

struct Case {
  std::string name;
  Protocol protocol;
  std::set<Problem> expected;  // empty: must pass
};

}  // namespace

int main() {
  std::vector<Case> cases;
  cases.push_back({"the reference protocol", reference(), {}});
  {
    Protocol p{[](int, int) { return 0; }, [](int, int) { return 0u; }, [](int, int) { return 0u; },
               [](int, int, int) { return 0u; }, Release::kAfterWait};
    cases.push_back({"the starter's placeholders (all 0, release after the wait)", p, {Problem::kDeadlock}});
  }
  auto mutate = [&](std::string name, auto change, std::set<Problem> expected) {
    Protocol p = reference();
    change(p);
    cases.push_back({std::move(name), p, std::move(expected)});
  };
  mutate("full waits for the flipped parity (passes on the first lap)", [](Protocol& p) {
    p.full_parity = [](int i, int s) { return (std::uint32_t(i / s) & 1) ^ 1; };
  }, {Problem::kEarlyRead, Problem::kOverrun});
  mutate("empty waits for the lap's parity, not flipped (the first lap waits forever)", [](Protocol& p) {
    p.empty_parity = [](int i, int s) { return std::uint32_t(i / s) & 1; };
  }, {Problem::kDeadlock});
  mutate("parities of the block index instead of the lap", [](Protocol& p) {
    p.full_parity = [](int i, int) { return std::uint32_t(i) & 1; };
    p.empty_parity = [](int i, int) { return (std::uint32_t(i) & 1) ^ 1; };
  }, {Problem::kDeadlock, Problem::kEarlyRead, Problem::kOverrun, Problem::kTooManyArrivals, Problem::kBytes});
  mutate("stage i & 1 (right for 2 stages only)", [](Protocol& p) {
    p.stage = [](int i, int) { return i & 1; };
  }, {Problem::kDeadlock, Problem::kEarlyRead, Problem::kOverrun, Problem::kTooManyArrivals, Problem::kBytes});
  mutate("stage out of range", [](Protocol& p) { p.stage = [](int i, int) { return i % 4; }; }, {Problem::kBadValue});
  mutate("a parity of 2", [](Protocol& p) { p.full_parity = [](int i, int s) { return std::uint32_t(i / s) & 2; }; },
         {Problem::kBadValue});
  mutate("expect_tx of the K tile only", [](Protocol& p) {
    p.expect_bytes = [](int rows, int d, int) { return box(rows, d); };
  }, {Problem::kBytes, Problem::kEarlyRead});
  mutate("expect_tx of the rows inside the tensor only (the ragged last block)", [](Protocol& p) {
    p.expect_bytes = [](int, int d, int rows_in) { return 2 * box(rows_in, d); };
  }, {Problem::kBytes, Problem::kEarlyRead});
  mutate("expect_tx of three tiles (too many)", [](Protocol& p) {
    p.expect_bytes = [](int rows, int d, int) { return 3 * box(rows, d); };
  }, {Problem::kDeadlock});
  mutate("expect_tx of 0", [](Protocol& p) { p.expect_bytes = [](int, int, int) { return 0u; }; },
         {Problem::kBytes, Problem::kEarlyRead});
  mutate("release right after the full wait", [](Protocol& p) { p.release = Release::kAfterWait; }, {Problem::kOverrun});
  mutate("release after S = Q K^T (V still to be read)", [](Protocol& p) { p.release = Release::kAfterScores; },
         {Problem::kOverrun});

  int failures = 0;
  for (const auto& c : cases) {
    const auto summary = lab06::model::check(c.protocol);
    const Problem got = summary.finding.problem;
    const bool ok = c.expected.empty() ? got == Problem::kNone : c.expected.count(got) > 0;
    fmt::print("{} {}: {}\n", ok ? "ok  " : "FAIL", c.name,
               got == Problem::kNone ? fmt::format("passes ({} rings, {} states, {} random schedules)", summary.configs,
                                                   summary.states, summary.walks)
                                     : std::string(lab06::model::problem_name(got)));
    if (got != Problem::kNone && (!ok || c.name.starts_with("the starter"))) fmt::print("{}", lab06::model::format(summary.finding, 12));
    failures += !ok;
  }
  fmt::print("{}\n", failures ? fmt::format("model selftest: {} case(s) FAILED", failures) : "model selftest: PASS");
  return failures ? 1 : 0;
}
