#include "common/timing.hpp"

#include "common/launch_gate.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <stdexcept>

namespace ladder {

namespace {
double percentile(const std::vector<float>& sorted, double p) {
  if (sorted.empty()) return 0;
  const double pos = p * double(sorted.size() - 1);
  const std::size_t lo = std::size_t(std::floor(pos));
  const std::size_t hi = std::min(sorted.size() - 1, lo + 1);
  return sorted[lo] + (pos - double(lo)) * (sorted[hi] - sorted[lo]);
}
}  // namespace

Timing summarize(std::vector<float> samples) {
  Timing t;
  t.samples_ms = samples;
  std::sort(samples.begin(), samples.end());
  t.median_ms = percentile(samples, 0.5);
  t.p20_ms = percentile(samples, 0.2);
  t.p80_ms = percentile(samples, 0.8);
  t.min_ms = samples.empty() ? 0 : samples.front();
  return t;
}

Timing merge_rounds(const std::vector<Timing>& rounds) {
  std::vector<float> all;
  for (const auto& r : rounds) all.insert(all.end(), r.samples_ms.begin(), r.samples_ms.end());
  Timing t = summarize(std::move(all));
  for (const auto& r : rounds) t.round_medians_ms.push_back(r.median_ms);
  return t;
}

bool same_speed(const Timing& a, const Timing& b) {
  const bool a_in_b = a.median_ms >= b.p20_ms && a.median_ms <= b.p80_ms;
  const bool b_in_a = b.median_ms >= a.p20_ms && b.median_ms <= a.p80_ms;
  if (a_in_b || b_in_a) return true;
  if (!(a.median_ms > 0 && b.median_ms > 0)) return true;
  if (std::fabs(a.median_ms / b.median_ms - 1.0) < kSpeedResolution) return true;
  const auto& ra = a.round_medians_ms;
  const auto& rb = b.round_medians_ms;
  if (ra.size() >= 2 && ra.size() == rb.size()) {
    const bool a_slower = a.median_ms > b.median_ms;
    for (std::size_t i = 0; i < ra.size(); ++i)
      if ((ra[i] > rb[i]) != a_slower) return true;  // one round disagrees: noise
  }
  return false;
}

const char* to_string(L2Flush f) {
  switch (f) {
    case L2Flush::read: return "read";
    case L2Flush::write: return "write";
    case L2Flush::none: return "none";
  }
  return "?";
}

L2Flusher::L2Flusher(std::size_t l2_bytes)
    : scratch_((std::max<std::size_t>(2 * l2_bytes, 16) + 15) / 16 * 16), sink_(1) {
  scratch_.zero();
  sink_.zero();
}

void L2Flusher::flush(cudaStream_t stream, L2Flush how) {
  switch (how) {
    case L2Flush::read: launch_read_flush(scratch_.get(), scratch_.bytes(), sink_.get(), stream); break;
    case L2Flush::write: scratch_.fill_bytes(0x5A, stream); break;
    case L2Flush::none: break;
  }
}

Timing time_launch(const std::function<void(cudaStream_t)>& launch, cudaStream_t stream,
                   const TimingOptions& options, L2Flusher& flusher) {
  // Warm-up: module loading, first-touch of pages, library handles, clocks ramping up.
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0;; ++i) {
    launch(stream);
    CUDA_CHECK(cudaStreamSynchronize(stream));
    const double elapsed =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (i >= 1 && elapsed >= options.warmup_ms) break;
  }

  CudaEvent before, after;
  std::vector<float> samples;
  double measured = 0;
  static LaunchGate gate;  // one per process: pinned host flags, created on first use
  int attempts = 0;
  while (int(samples.size()) < options.max_reps &&
         (int(samples.size()) < options.min_reps || measured < options.target_ms)) {
    if (++attempts > 4 * options.max_reps)
      throw std::runtime_error(
          "timing: the launch gate timed out on most repetitions (the host took over a second to "
          "enqueue one launch); rerun with --no-gate to time without it");
    flusher.flush(stream, options.flush);
    if (options.gate) gate.close(stream);
    before.record(stream);
    launch(stream);
    after.record(stream);
    if (options.gate) gate.open();
    CUDA_CHECK(cudaEventSynchronize(after.get()));
    if (options.gate && gate.timed_out()) continue;  // the host's time was measured too
    const float ms = after.ms_since(before);
    samples.push_back(ms);
    measured += ms;
  }
  return summarize(std::move(samples));
}

}  // namespace ladder
