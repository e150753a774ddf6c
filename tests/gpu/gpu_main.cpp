// main() of the GPU tests. Without a GPU it exits with 77, which ctest reports as "skipped"
// (SKIP_RETURN_CODE), so a machine without a GPU never counts these tests as passed. A machine
// WITH a driver on which CUDA fails (a driver too old for the runtime, say) is an error, not a
// skip: otherwise every GPU test would vanish there while `scripts/test.sh` exited 0.
#include <cstdio>
#include <memory>

#include "common/gpu_info.hpp"
#define LADDER_CATCH_RUNNER
#include "tests/catch.hpp"
#include "tests/gpu/gpu_support.hpp"

namespace {
std::unique_ptr<ladder::Session> g_session;
constexpr int kSkipped = 77;
constexpr int kFailed = 1;
}  // namespace

ladder::Session& ladder::testing::session() { return *g_session; }

int main(int argc, char** argv) {
  const auto devices = ladder::cuda_device_count();
  if (devices.count == 0 && devices.no_gpu) {
    std::printf("SKIPPED: no CUDA GPU (%s)\n", devices.error.c_str());
    return kSkipped;
  }
  if (devices.count == 0) {
    std::printf("FAILED: an NVIDIA driver is present but CUDA cannot use it (%s)\n",
                devices.error.c_str());
    return kFailed;
  }
  g_session = std::make_unique<ladder::Session>(ladder::query_gpu());
  std::printf("GPU: %s, sm_%d\n", g_session->gpu.name.c_str(), g_session->gpu.sm);
  const int result = Catch::Session().run(argc, argv);
  g_session.reset();
  // Catch returns the number of failed assertions (capped at 255): exactly 77 of them must not
  // read as "skipped".
  return result == 0 ? 0 : kFailed;
}
