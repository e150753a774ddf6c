// The exit codes of every executable, one meaning each, so scripts and CI can tell a failed check
// from a machine without a GPU or a typo in the command line.
#pragma once

namespace ladder::exit_code {

inline constexpr int kOk = 0;
inline constexpr int kChecksFailed = 1;  // a variant failed its checks (error, NaN, rerun differs)
inline constexpr int kUsage = 2;         // bad command line or a problem no step can run
inline constexpr int kNoGpu = 3;         // no CUDA GPU and no NVIDIA driver: nothing can run here
inline constexpr int kIo = 4;            // an output file or folder cannot be written
inline constexpr int kCudaError = 5;     // CUDA failed (driver too old, kernel fault, ...)
inline constexpr int kNothingRan = 6;    // every selected variant was skipped on this GPU
inline constexpr int kHostMemory = 7;    // the problem's host-side buffers do not fit in RAM

}  // namespace ladder::exit_code
