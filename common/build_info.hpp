// What the running binary was built from: part of every results file's provenance.
#pragma once

#include <string>

namespace ladder {

struct BuildInfo {
  std::string commit;        // 12 hex digits, "-dirty" if the tree had uncommitted changes
  std::string dirty;         // "true", "false", or "unknown" (a copy without .git: scripts/tree_state.py)
  std::string tree_hash;     // SHA-256 (16 hex digits) of the tracked files' contents, "" if unknown
  std::string nvcc;          // the CUDA compiler's version
  std::string cuda_flags;    // CMAKE_CUDA_FLAGS plus the build type's flags
  std::string build_type;    // Release, Debug, ...
  std::string architectures; // CMAKE_CUDA_ARCHITECTURES
};

// Generated at build time (cmake/build_info.cmake): rebuilt whenever the commit or the dirty
// state changes, unlike a value fixed when CMake configured the tree.
const BuildInfo& build_info();

}  // namespace ladder
