// Error handling for every CUDA call the project makes.
//
// A failed call throws ladder::CudaError whose message names the call, the file and line, the
// CUDA error, and what the user can try. The harness catches it at the top of main, prints it and
// exits non-zero; nothing is allowed to continue after a failed CUDA call.
#pragma once

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace ladder {

class CudaError : public std::runtime_error {
 public:
  CudaError(cudaError_t code, const std::string& what) : std::runtime_error(what), code_(code) {}
  cudaError_t code() const { return code_; }

 private:
  cudaError_t code_;
};

// A hint for the errors a learner is most likely to meet.
std::string cuda_error_hint(cudaError_t code);

[[noreturn]] void throw_cuda_error(cudaError_t code, const char* call, const char* file, int line);

inline void check_cuda(cudaError_t code, const char* call, const char* file, int line) {
  if (code != cudaSuccess) throw_cuda_error(code, call, file, line);
}

// The launch check for a kernel name that is not a literal (a shared launch helper's): the
// message is built only on failure, so a launch inside a timed region allocates nothing.
inline void check_launch(const char* kernel_name, const char* file, int line) {
  if (const cudaError_t code = cudaGetLastError(); code != cudaSuccess)
    throw_cuda_error(code, (std::string("launch of ") + kernel_name).c_str(), file, line);
}

}  // namespace ladder

// Wrap every runtime call: CUDA_CHECK(cudaMalloc(&p, bytes));
#define CUDA_CHECK(call) ::ladder::check_cuda((call), #call, __FILE__, __LINE__)

// After every kernel launch: catches bad launch configurations (too much shared memory, too many
// threads) at the launch site instead of at the next unrelated call.
#define CUDA_CHECK_LAUNCH(kernel_name) \
  ::ladder::check_cuda(cudaGetLastError(), "launch of " kernel_name, __FILE__, __LINE__)
// The same where the name is a runtime string: CUDA_CHECK_LAUNCH_OF(name).
#define CUDA_CHECK_LAUNCH_OF(kernel_name) ::ladder::check_launch((kernel_name), __FILE__, __LINE__)
