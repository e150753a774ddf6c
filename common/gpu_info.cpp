#include "common/gpu_info.hpp"

#include <cuda_runtime.h>
#include <dlfcn.h>
#include <unistd.h>

#include <array>
#include <cstdlib>
#include <ctime>

#include "common/check.hpp"

#ifndef LADDER_GIT_COMMIT
#define LADDER_GIT_COMMIT "unknown"
#endif

namespace ladder {

DeviceCount cuda_device_count() {
  DeviceCount result;
  const cudaError_t err = cudaGetDeviceCount(&result.count);
  if (err != cudaSuccess) {
    result.count = 0;
    result.error = std::string(cudaGetErrorName(err)) + ": " + cudaGetErrorString(err);
    cudaGetLastError();
  }
  return result;
}

namespace {

// NVML is loaded at run time, not linked: the library ships with the driver, and a binary linked
// against it would not even start on a machine without one (CI), where `--list` must still work.
struct Nvml {
  using Init = int (*)();
  using Handle = int (*)(unsigned, void**);
  using Clock = int (*)(void*, int, unsigned*);
  using Driver = int (*)(char*, unsigned);
  using Temperature = int (*)(void*, int, unsigned*);
  using Power = int (*)(void*, unsigned*);
  void* lib = nullptr;
  Handle handle = nullptr;
  Clock clock = nullptr, max_clock = nullptr;
  Driver driver = nullptr;
  Temperature temperature = nullptr;
  Power power_limit = nullptr;

  Nvml() {
    lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) return;
    auto init = reinterpret_cast<Init>(dlsym(lib, "nvmlInit_v2"));
    if (!init || init() != 0) {
      lib = nullptr;
      return;
    }
    handle = reinterpret_cast<Handle>(dlsym(lib, "nvmlDeviceGetHandleByIndex_v2"));
    clock = reinterpret_cast<Clock>(dlsym(lib, "nvmlDeviceGetClockInfo"));
    max_clock = reinterpret_cast<Clock>(dlsym(lib, "nvmlDeviceGetMaxClockInfo"));
    driver = reinterpret_cast<Driver>(dlsym(lib, "nvmlSystemGetDriverVersion"));
    temperature = reinterpret_cast<Temperature>(dlsym(lib, "nvmlDeviceGetTemperature"));
    power_limit = reinterpret_cast<Power>(dlsym(lib, "nvmlDeviceGetEnforcedPowerLimit"));
  }
  static Nvml& get() {
    static Nvml nvml;
    return nvml;
  }
};

constexpr int kNvmlClockSm = 1, kNvmlClockMem = 2, kNvmlTemperatureGpu = 0;

// NVML numbers devices by PCI order; CUDA by speed unless CUDA_DEVICE_ORDER=PCI_BUS_ID. With one GPU
// (our machine) they agree; with several, the provenance's clock may belong to another device.
void* nvml_device(int device) {
  Nvml& n = Nvml::get();
  void* h = nullptr;
  if (!n.lib || !n.handle || n.handle(unsigned(device), &h) != 0) return nullptr;
  return h;
}

}  // namespace

void refresh_clocks(GpuInfo& info, int device) {
  Nvml& n = Nvml::get();
  void* h = nvml_device(device);
  if (!h) return;
  unsigned value = 0;
  if (n.clock && n.clock(h, kNvmlClockSm, &value) == 0) info.sm_clock_mhz = int(value);
  if (n.clock && n.clock(h, kNvmlClockMem, &value) == 0) info.mem_clock_mhz = int(value);
  if (n.max_clock && n.max_clock(h, kNvmlClockSm, &value) == 0) info.max_sm_clock_mhz = int(value);
  if (n.max_clock && n.max_clock(h, kNvmlClockMem, &value) == 0) info.max_mem_clock_mhz = int(value);
  if (n.temperature && n.temperature(h, kNvmlTemperatureGpu, &value) == 0)
    info.temperature_c = int(value);
  if (n.power_limit && n.power_limit(h, &value) == 0) info.power_limit_w = int(value / 1000);
}

GpuInfo query_gpu(int device) {
  GpuInfo info;
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  info.name = prop.name;
  info.sm = prop.major * 10 + prop.minor;
  info.sm_count = prop.multiProcessorCount;
  info.l2_bytes = std::size_t(prop.l2CacheSize);
  info.smem_per_sm = prop.sharedMemPerMultiprocessor;
  info.smem_per_block_optin = prop.sharedMemPerBlockOptin;
  info.memory_bytes = prop.totalGlobalMem;
  info.max_threads_per_sm = prop.maxThreadsPerMultiProcessor;
  CUDA_CHECK(cudaRuntimeGetVersion(&info.cuda_runtime));
  CUDA_CHECK(cudaDriverGetVersion(&info.cuda_driver));
  Nvml& n = Nvml::get();
  std::array<char, 96> buffer{};
  if (n.lib && n.driver && n.driver(buffer.data(), unsigned(buffer.size())) == 0)
    info.driver_version = buffer.data();
  refresh_clocks(info, device);
  return info;
}

std::string git_commit() {
  if (const char* env = std::getenv("LADDER_GIT_COMMIT"); env && *env) return env;
  return LADDER_GIT_COMMIT;
}

std::string utc_now() {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buffer[32];
  std::strftime(buffer, sizeof buffer, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buffer;
}

std::string host_name() {
  char buffer[256] = {};
  if (gethostname(buffer, sizeof buffer - 1) != 0) return "unknown";
  return buffer;
}

}  // namespace ladder
