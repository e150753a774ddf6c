// What GPU the numbers come from: the provenance written into every results file.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

namespace ladder {

// Number of visible CUDA devices, or the reason there are none. Never throws.
struct DeviceCount {
  int count = 0;
  std::string error;   // empty when the query succeeded
  bool no_gpu = false;  // no device, or no NVIDIA driver at all (a machine without a GPU)
  // count == 0 && !no_gpu: a driver is installed but CUDA failed (too old, broken): an error,
  // not a machine without a GPU.
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
  // NVML's clock-event ("throttle") reasons, a bit mask: 0 = none; 1 = GPU idle; 4 = software
  // power cap; 0x20/0x40/0x80 = thermal or power brake slowdowns. Read after timing, a value
  // other than 0 or 1 means the clocks were held down while we measured.
  std::optional<unsigned long long> clock_event_reasons;
  std::string pci_bus_id;
};

GpuInfo query_gpu(int device = 0);
// Re-read the current clocks of the device `info` describes (the harness records them before and
// after each problem's timing). NVML finds the device by its PCI bus id, so the clocks belong to
// the GPU that ran the kernels whatever CUDA_VISIBLE_DEVICES or CUDA_DEVICE_ORDER say.
void refresh_clocks(GpuInfo& info);

// Words for a clock-event mask ("idle", "sw power cap", ...), "none" for 0.
std::string describe_clock_events(unsigned long long mask);

std::string git_commit();   // LADDER_GIT_COMMIT from the environment, else the build's commit
std::string git_dirty();    // "true" | "false" | "unknown": LADDER_GIT_DIRTY, else the build's
std::string tree_hash();    // the tracked files' hash: LADDER_TREE_HASH, else the build's ("" if none)
std::string utc_now();      // ISO 8601
std::string host_name();

}  // namespace ladder
