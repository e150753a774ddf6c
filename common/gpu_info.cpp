#include "common/gpu_info.hpp"

#include <cuda_runtime.h>
#include <dlfcn.h>
#include <unistd.h>

#include <array>
#include <string>
#include <utility>
#include <cstdlib>
#include <ctime>

#include "common/build_info.hpp"
#include "common/check.hpp"

namespace ladder {

DeviceCount cuda_device_count() {
  DeviceCount result;
  const cudaError_t err = cudaGetDeviceCount(&result.count);
  if (err != cudaSuccess) {
    result.count = 0;
    result.error = std::string(cudaGetErrorName(err)) + ": " + cudaGetErrorString(err);
    cudaGetLastError();
    // Without any NVIDIA driver the runtime says "insufficient driver", as it does for a driver
    // that is merely too old. Only the first is a machine without a GPU.
    void* driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
    result.no_gpu = err == cudaErrorNoDevice || driver == nullptr;
    if (driver) dlclose(driver);
  } else {
    result.no_gpu = result.count == 0;
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
  using ByBusId = int (*)(const char*, void**);
  using Reasons = int (*)(void*, unsigned long long*);
  void* lib = nullptr;
  Handle handle = nullptr;
  ByBusId by_bus_id = nullptr;
  Reasons reasons = nullptr;
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
    by_bus_id = reinterpret_cast<ByBusId>(dlsym(lib, "nvmlDeviceGetHandleByPciBusId_v2"));
    reasons = reinterpret_cast<Reasons>(dlsym(lib, "nvmlDeviceGetCurrentClocksEventReasons"));
    if (!reasons)  // drivers before 535 name it after "throttle"
      reasons = reinterpret_cast<Reasons>(dlsym(lib, "nvmlDeviceGetCurrentClocksThrottleReasons"));
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

// NVML numbers devices by PCI order, CUDA by speed unless CUDA_DEVICE_ORDER=PCI_BUS_ID: the PCI
// bus id is the one name both agree on.
void* nvml_device(const std::string& pci_bus_id) {
  Nvml& n = Nvml::get();
  void* h = nullptr;
  if (!n.lib || !n.by_bus_id || pci_bus_id.empty() || n.by_bus_id(pci_bus_id.c_str(), &h) != 0)
    return nullptr;
  return h;
}

}  // namespace

std::string describe_clock_events(unsigned long long mask) {
  if (mask == 0) return "none";
  static constexpr std::pair<unsigned long long, const char*> kNames[] = {
      {0x1, "idle"},          {0x2, "app clocks"},      {0x4, "sw power cap"},
      {0x8, "hw slowdown"},   {0x10, "sync boost"},     {0x20, "sw thermal"},
      {0x40, "hw thermal"},   {0x80, "hw power brake"}, {0x100, "display clocks"}};
  std::string out;
  for (const auto& [bit, name] : kNames)
    if (mask & bit) out += (out.empty() ? "" : ", ") + std::string(name);
  return out.empty() ? "other" : out;
}

void refresh_clocks(GpuInfo& info) {
  Nvml& n = Nvml::get();
  void* h = nvml_device(info.pci_bus_id);
  if (!h) return;
  unsigned value = 0;
  unsigned long long mask = 0;
  if (n.reasons && n.reasons(h, &mask) == 0) info.clock_event_reasons = mask;
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
  std::array<char, 32> bus{};
  if (cudaDeviceGetPCIBusId(bus.data(), int(bus.size()), device) == cudaSuccess)
    info.pci_bus_id = bus.data();
  else
    cudaGetLastError();
  CUDA_CHECK(cudaRuntimeGetVersion(&info.cuda_runtime));
  CUDA_CHECK(cudaDriverGetVersion(&info.cuda_driver));
  Nvml& n = Nvml::get();
  std::array<char, 96> buffer{};
  if (n.lib && n.driver && n.driver(buffer.data(), unsigned(buffer.size())) == 0)
    info.driver_version = buffer.data();
  refresh_clocks(info);
  return info;
}

std::string git_commit() {
  if (const char* env = std::getenv("LADDER_GIT_COMMIT"); env && *env) return env;
  return build_info().commit;
}

// The environment (scripts/round.sh exports scripts/tree_state.py's answer for the copy it runs
// in) before the build's own record: a binary carried to another tree describes that tree only
// through them.
std::string git_dirty() {
  if (const char* env = std::getenv("LADDER_GIT_DIRTY"); env && *env) return env;
  return build_info().dirty.empty() ? "unknown" : build_info().dirty;
}

std::string tree_hash() {
  if (const char* env = std::getenv("LADDER_TREE_HASH"); env && *env) return env;
  return build_info().tree_hash;
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
