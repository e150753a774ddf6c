// Holding a stream at a gate while the host prepares a launch, so that the timed interval is the
// GPU's time only.
//
// A timed repetition is: flush the L2, record `before`, launch, record `after`. The launch
// function does host work first — our Hopper steps encode four tensor maps, cuDNN's execute()
// walks its plan and variant pack — and if that takes longer than the flush has left to run, the
// GPU sits idle after `before` and the idle time is counted as the kernel's. PyTorch's numbers
// (scripts/peers.py replays CUDA graphs) have no such gap, so the two sides would be measured
// differently. The gate closes the gap: a one-thread kernel spins on a flag in pinned host memory,
// `before`, the launch and `after` queue up behind it, and the host opens the gate once everything
// is enqueued; the GPU then runs them back to back. (nvbench measures the same way.)
//
// The spin gives up after kTimeoutNs even if the host never opens it, so no path can hang the
// GPU; a repetition whose gate timed out says so (timed_out()) and is not kept.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace ladder {

class LaunchGate {
 public:
  static constexpr std::uint64_t kTimeoutNs = 1'000'000'000;  // 1 s

  LaunchGate();
  ~LaunchGate();
  LaunchGate(const LaunchGate&) = delete;
  LaunchGate& operator=(const LaunchGate&) = delete;

  // Enqueue the gate on `stream`: everything enqueued after it waits until open().
  void close(cudaStream_t stream);
  // Let the stream run.
  void open();
  // After the stream has run past the gate: whether the gate gave up waiting before open(), in
  // which case the repetition measured the host's time too and must be discarded.
  bool timed_out() const { return *timed_out_ != 0; }

 private:
  volatile std::uint32_t* flag_ = nullptr;  // pinned, mapped: 0 closed, 1 open
  volatile std::uint32_t* timed_out_ = nullptr;  // pinned, mapped: set by the kernel on time-out
};

}  // namespace ladder
