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
  double target_ms = 250;  // stop adding repetitions once this much kernel time is measured
  bool flush_l2 = true;
};

struct Timing {
  std::vector<float> samples_ms;
  double median_ms = 0, p20_ms = 0, p80_ms = 0, min_ms = 0;
};

// Summary statistics of samples (the CPU tests use this directly).
Timing summarize(std::vector<float> samples_ms);

// Two timings are "the same" when either median lies inside the other's p20–p80 spread: a
// difference that small is noise, and the tables say "same" instead of a speed-up.
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
