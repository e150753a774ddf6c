// Every reduction variant: random data against the references, and small integers, whose sum is
// exact in fp32 in any order, so a dropped or doubled element shows as a wrong answer.
#include <cmath>

#include "common/device_buffer.hpp"
#include "common/random.hpp"
#include "common/runner.hpp"
#include "tests/catch.hpp"
#include "tests/gpu/gpu_support.hpp"

using namespace ladder;

TEST_CASE("reduction: random data, ragged sizes", "[gpu][reduction]") {
  const auto variants = testing::variants_of(Kind::Reduction);
  if (variants.empty()) return;
  for (std::int64_t n : {1ll, 17ll, 1000ll, 1023ll, (1ll << 20) + 3, (1ll << 24) + 1, 1ll << 26}) {
    const auto run = run_reduction(testing::session(), ReductionShape{n}, variants, testing::check_options());
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

TEST_CASE("reduction: exact on small integers", "[gpu][reduction]") {
  const auto variants = testing::variants_of(Kind::Reduction);
  if (variants.empty()) return;
  Session& session = testing::session();
  for (std::int64_t n : {1ll, 33ll, 4097ll, (1ll << 20) + 7}) {
    const auto x = random_small_integers(std::size_t(n), 99);
    double exact = 0;
    for (float v : x) exact += v;
    DeviceBuffer<float> dx(x.size()), out(1);
    dx.upload(x);
    for (const auto& ref : variants) {
      const Variant& v = ref.variant();
      const ReductionShape shape{n};
      DeviceBuffer<std::uint8_t> workspace(v.workspace_bytes(shape));
      out.fill_bytes(0xFF, session.stream.get());  // the poison, in the launch's stream order
      std::get<ReductionLaunch>(v.launch)(ReductionArgs{shape, dx.get(), out.get(), workspace.get()},
                                          session.stream.get());
      session.stream.synchronize();
      INFO(ref.id() << " n=" << n);
      CHECK(double(out.download()[0]) == exact);
    }
  }
}
