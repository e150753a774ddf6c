// Step 25's test-only variants (never rungs of the ladder; Variant::test_only): each is the
// measured tile with one change, a type of its own so the measured kernels compile as without it.
// The kernel asks T::kLateConsumers and T::kReleaseByWarp (false in the measured Tile).
#pragma once

#include <type_traits>

namespace step25 {

// 25/late_consumers, a test and not a rung: every consumer warp waits kLateCycles before it reads
// a stage's lse and D, while the producer fills the other stage. A release placed before those
// reads would let the producer overwrite them in that time; the gradients must not change
// (tests/gpu/test_stress.cpp). A type of its own, so the measured kernels are untouched.
template <class Base>
struct LateConsumers : Base {
  static constexpr bool kLateConsumers = true;
  static constexpr long long kLateCycles = 20000;  // ~10 us: several bulk copies' latency
  __device__ __forceinline__ static void be_late() {
    for (const long long start = clock64(); clock64() - start < kLateCycles;) {
    }
  }
};

// 25/warp_release, a test and not a rung: the release this step had first. Each warp's lane 0
// arrives on the empty barrier after a __syncwarp, for the warp's 32 reads of lse and D. It ran
// right, but the PTX memory model does not order the other lanes' reads before lane 0's release
// (bar.warp.sync is not one of its synchronizing operations), and racecheck flags exactly that
// (chapter 25, "What racecheck reports"). Kept to measure the release of every thread against.
template <class Base>
struct WarpRelease : Base {
  static constexpr bool kReleaseByWarp = true;
};

// Which test-only change a variant's tile carries.
enum class Probe { kNone, kLateConsumers, kWarpRelease };
constexpr const char* probe_name(Probe p) {
  return p == Probe::kLateConsumers ? ",late consumers" : p == Probe::kWarpRelease ? ",warp release" : "";
}
// The tile a variant runs: the measured one, or a test-only variant's change of it.
template <Probe kProbe, class Measured>
using WithProbe = std::conditional_t<kProbe == Probe::kLateConsumers, LateConsumers<Measured>,
                                     std::conditional_t<kProbe == Probe::kWarpRelease, WarpRelease<Measured>, Measured>>;

}  // namespace step25
