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

// How the L2 is emptied before each timed repetition, so that the repetition reads its inputs from
// device memory, as a kernel inside a real model would.
//   read   a kernel reads a buffer twice the L2's size: the L2 is left holding clean lines of it,
//          and whatever was dirty before (the last repetition's outputs) is written back during
//          the flush, not during the timed kernel. The default.
//   write  the buffer is written instead (cudaMemsetAsync), the method of every round before
//          2026-12-02: the L2 is left full of dirty lines (60 MB on the H200), which the timed
//          kernel writes back to device memory as its reads evict them. A kernel that reads far
//          more than that barely notices; a decode that reads 150 MB in 40 µs pays for 60 MB of
//          writes it never made (docs/42_parallel_merge.md measures both).
//   none   no flush (--no-flush).
enum class L2Flush { read, write, none };
const char* to_string(L2Flush f);

struct TimingOptions {
  double warmup_ms = 25;   // run at least this long (and at least twice) before timing
  int min_reps = 5;
  int max_reps = 50;
  double target_ms = 100;  // per round: stop adding repetitions once this much kernel time is measured
  L2Flush flush = L2Flush::read;
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

// Evicts the L2 the way `how` says (L2Flush above) with a buffer twice its size, written once when
// the flusher is made so that a read flush reads initialized memory.
class L2Flusher {
 public:
  explicit L2Flusher(std::size_t l2_bytes);
  void flush(cudaStream_t stream, L2Flush how);

 private:
  DeviceBuffer<std::uint8_t> scratch_;
  DeviceBuffer<unsigned> sink_;
};

// common/l2_flush.cu: reads `bytes` (a multiple of 16) at `buffer` on `stream`; `sink` is written
// only for a value the reads never produce, so that the loads cannot be dropped.
void launch_read_flush(const void* buffer, std::size_t bytes, unsigned* sink, cudaStream_t stream);

Timing time_launch(const std::function<void(cudaStream_t)>& launch, cudaStream_t stream,
                   const TimingOptions& options, L2Flusher& flusher);

}  // namespace ladder
