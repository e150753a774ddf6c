// What GPU the numbers come from: the provenance written into every results file.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

namespace ladder {

// Number of visible CUDA devices, or the reason there are none. Never throws.
struct DeviceCount {
  int count = 0;
  std::string error;  // empty when the query succeeded
};
DeviceCount cuda_device_count();

struct GpuInfo {
  std::string name;
  int sm = 0;  // compute capability ×10
  int sm_count = 0;
  std::size_t l2_bytes = 0;
  std::size_t smem_per_sm = 0;
  std::size_t smem_per_block_optin = 0;
  std::size_t memory_bytes = 0;
  int max_threads_per_sm = 0;
  int cuda_runtime = 0;  // e.g. 13000
  int cuda_driver = 0;   // the newest CUDA the driver supports
  // From NVML, when the driver provides it (absent otherwise):
  std::string driver_version;
  std::optional<int> sm_clock_mhz, mem_clock_mhz, max_sm_clock_mhz, max_mem_clock_mhz;
  std::optional<int> temperature_c, power_limit_w;
};

GpuInfo query_gpu(int device = 0);
// Re-read the current clocks (the harness records them before and after timing).
void refresh_clocks(GpuInfo& info, int device = 0);

std::string git_commit();   // LADDER_GIT_COMMIT from the environment, else the build's commit
std::string utc_now();      // ISO 8601
std::string host_name();

}  // namespace ladder
