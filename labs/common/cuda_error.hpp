// The labs' GPU runs (L11, L12, L14): a failed CUDA call as one line the checker prints, naming
// the call and the runtime's error, so a learner knows which step of the run went wrong.
#pragma once

#include <cuda_runtime.h>

#include <string>

namespace lab {

inline std::string cuda_error(const char* what, cudaError_t e) {
  return std::string(what) + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")";
}

}  // namespace lab
