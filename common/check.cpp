#include "common/check.hpp"

#include <fmt/format.h>

namespace ladder {

std::string cuda_error_hint(cudaError_t code) {
  switch (code) {
    case cudaErrorNoDevice:
      return "no CUDA GPU is visible: run on a machine with an NVIDIA GPU (check nvidia-smi and "
             "CUDA_VISIBLE_DEVICES)";
    case cudaErrorInsufficientDriver:
      return "the NVIDIA driver is missing or older than this CUDA runtime: install a driver that "
             "supports this toolkit, or run on a machine with a GPU";
    case cudaErrorMemoryAllocation:
      return "the GPU ran out of memory: use a smaller problem (fewer heads, shorter sequence)";
    case cudaErrorNoKernelImageForDevice:
    case cudaErrorUnsupportedPtxVersion:
      return "this binary has no code for this GPU: rebuild with the 'gpu' preset (native "
             "architecture) or add the GPU's architecture to CMAKE_CUDA_ARCHITECTURES";
    case cudaErrorInvalidConfiguration:
      return "the launch configuration is invalid (block size or shared memory beyond the limits "
             "of this GPU)";
    case cudaErrorIllegalAddress:
    case cudaErrorMisalignedAddress:
      return "a kernel accessed memory it does not own: rerun the step under "
             "scripts/sanitize.sh to find the access";
    case cudaErrorLaunchTimeout:
      return "the kernel ran longer than the display watchdog allows: use a smaller problem";
    default:
      return "see the CUDA runtime documentation for this error";
  }
}

void throw_cuda_error(cudaError_t code, const char* call, const char* file, int line) {
  // Clear the sticky-free part of the error state so a caller that recovers sees a clean slate.
  cudaGetLastError();
  throw CudaError(code, fmt::format("CUDA error {} ({}) in `{}` at {}:{}\n  hint: {}",
                                    cudaGetErrorName(code), cudaGetErrorString(code), call, file,
                                    line, cuda_error_hint(code)));
}

}  // namespace ladder
