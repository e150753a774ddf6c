// Timing a launch: warm-up, CUDA events around each repetition, L2 flushed between repetitions,
// median with the 20th and 80th percentiles as its spread.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "common/device_buffer.hpp"

namespace ladder {

struct TimingOptions {
  double warmup_ms = 25;   // run at least this long (and at least twice) before timing
  int min_reps = 5;
  int max_reps = 50;
  double target_ms = 100;  // per round: stop adding repetitions once this much kernel time is measured
  bool flush_l2 = true;
  // Hold the stream behind a LaunchGate while the launch is enqueued (common/launch_gate.hpp), so
  // the host's set-up work is not timed; false: the plain before/launch/after sequence.
  bool gate = true;
  // Rounds: every variant of a problem is timed once, then again, `rounds` times in all
  // (interleaved), so that a drift of the clocks over the run touches every variant alike. The
  // rounds alternate direction: ladder order, reverse order, ladder order... Under a steady drift
  // (clocks falling as the GPU heats) the variant timed first gains in the forward rounds and loses
  // in the reverse ones, so the rounds disagree and the verdict "faster", which needs the same
  // direction in every round (same_speed below), is not given to the drift.
  int rounds = 3;
};

struct Timing {
  std::vector<float> samples_ms;  // every repetition of every round
  double median_ms = 0, p20_ms = 0, p80_ms = 0, min_ms = 0;
  std::vector<double> round_medians_ms;  // one per round, in order
};

// Summary statistics of samples (the CPU tests use this directly).
Timing summarize(std::vector<float> samples_ms);
// The rounds of one variant pooled into one Timing (samples of all, a median per round).
Timing merge_rounds(const std::vector<Timing>& rounds);

// The smallest difference the ladder reports as a speed-up or a slow-down, a chosen resolution:
// on the H200 identical kernels timed in one round (2026-11-29, not interleaved) differed by up to
// 2.6%, which interleaving and the every-round rule absorb; under 1% no claim is made at all.
inline constexpr double kSpeedResolution = 0.01;

// Two timings are "the same" unless all of these hold: each median lies outside the other's
// p20–p80 spread; with several rounds, every round's medians point the same way (a ranks above b
// in each interleaved round); and the medians differ by at least kSpeedResolution. Anything less
// is noise, and the tables say "same" instead of a speed-up.
bool same_speed(const Timing& a, const Timing& b);

// Evicts the L2 by writing a buffer twice its size, so every repetition reads its inputs from
// device memory, as a kernel inside a real model would.
class L2Flusher {
 public:
  explicit L2Flusher(std::size_t l2_bytes);
  void flush(cudaStream_t stream);

 private:
  DeviceBuffer<std::uint8_t> scratch_;
};

Timing time_launch(const std::function<void(cudaStream_t)>& launch, cudaStream_t stream,
                   const TimingOptions& options, L2Flusher& flusher);

}  // namespace ladder
