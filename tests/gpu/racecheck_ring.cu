// Is compute-sanitizer racecheck's report on step 25 the kernel's hazard or the tool's?
//
// racecheck reports, in step 25, writes by hopper::bulk_load (the cp.async.bulk of a stage's
// per-row statistics) against the consumers' loads of those statistics, once the two-stage
// ring wraps. This program is that ring and nothing else: one CTA, a producer warp whose lane 0
// fills a two-stage ring of small float stages kPasses times each, and eight consumer warps that
// read every stage with step 25's access pattern and instruction (a generic 8-byte load of the
// float2 at 8j + 2t) and check every value. The
// variants change one thing each, so that which of them racecheck flags says what it misreads:
//
//   bulk                step 25: cp.async.bulk + complete_tx on full[s]; the consumers wait
//                       full[s], read, __syncwarp, lane 0 arrives on empty[s]; the producer waits
//                       empty[s] before the next bulk copy into the stage
//   bulk_all_arrive     as bulk, but every consumer thread arrives on empty[s] (CUTLASS's
//                       PipelineTmaAsync and FlashAttention-3 with a cluster of one)
//   bulk_fenced         as bulk, each consumer thread fencing (fence.proxy.async) after its reads
//   generic             the producer writes the stage with st.shared and arrives on full[s]
//                       (release): does racecheck follow mbarrier ordering at all?
//   generic_all_arrive  generic with every consumer thread arriving, as bulk_all_arrive
//   syncthreads         generic writes, the hand-over ordered by __syncthreads: the control
//   bulk_syncthreads    bulk copies waited by the producer thread alone, the hand-over to the
//                       consumers by __syncthreads: the same generic-read -> async-write reuse,
//                       ordered by bar.sync instead of an mbarrier
//   bulk_broken         WRONG on purpose: the consumer warps release the stage before reading it.
//                       racecheck must flag it, and the consumers' delay makes them read the
//                       producer's next pass: its values come out wrong.
//
// Every consumer thread waits kLateCycles clock cycles right before its reads (step 25's
// late_consumers stress does the same), so that a release placed too early is overrun by the
// producer, which then refills the stage while the consumer is still to read it.
//
//   racecheck_ring VARIANT [--spin CYCLES]     exit 0: every value right; 1: a wrong value (or
//                                              none read); 2: usage; 5: CUDA failed;
//                                              77: no GPU, or not compute capability 9.0
// tests/gpu/racecheck_ring.sh runs every variant plain and under racecheck, and says how to read
// the outcome (docs/25_hopper_backward.md, "What racecheck reports").
#include <cuda_runtime.h>

#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/check.hpp"
#include "common/device/hopper/arch.cuh"
#include "common/device/hopper/mbarrier.cuh"
#include "common/device/hopper/pipeline.cuh"
#include "common/device/hopper/smem.cuh"
#include "common/device/hopper/tma.cuh"
#include "common/device_buffer.hpp"
#include "common/gpu_info.hpp"

namespace {

namespace hopper = ladder::hopper;

// ---- Exit codes (as the project's executables and ctest's SKIP_RETURN_CODE read them) ----------
constexpr int kExitOk = 0;
constexpr int kExitWrong = 1;
constexpr int kExitUsage = 2;
constexpr int kExitCuda = 5;
constexpr int kExitSkipped = 77;

// ---- The ring ------------------------------------------------------------------------------
constexpr int kStages = 2;                      // step 25's Q/dO/LSE/D ring depth
constexpr int kStageFloats = 128;               // a stage: step 25's lse stage at kBlockM = 128
constexpr std::uint32_t kStageBytes = kStageFloats * sizeof(float);  // 512: one bulk copy
static_assert(kStageBytes % 16 == 0, "cp.async.bulk moves multiples of 16 bytes");
constexpr int kPasses = 16;                     // times each stage is refilled (>= 8)
constexpr int kPositions = kStages * kPasses;   // ring positions the producer fills in turn
constexpr int kWarpThreads = 32;
constexpr int kConsumerWarps = 8;               // step 25's two consumer warpgroups
constexpr int kConsumerThreads = kConsumerWarps * kWarpThreads;
constexpr int kThreads = kWarpThreads + kConsumerThreads;  // warp 0 is the producer
// Step 25's read pattern: lane 4g + t reads the float2 at 8j + 2t for every j (all g alike).
constexpr int kLanesPerRow = 4;
constexpr int kReadsPerThread = kStageFloats / 8;  // float2 reads, j = 0 .. kStageFloats/8 - 1
constexpr long long kLateCycles = 20000;        // ~10 us at 2 GHz: far longer than one bulk copy

// The value of element i of ring position p: distinct for every element of every pass, exact in
// float, so a read of the wrong pass (or of a stale stage) is caught.
__host__ __device__ constexpr float expected_value(int position, int i) {
  return float(position * kStageFloats + i);
}
static_assert(kPositions * kStageFloats < (1 << 24), "values stay exact in float");

// ---- The variants: one protocol choice each ------------------------------------------------
enum class Fill { kBulk, kGeneric };              // how the producer writes a stage
enum class Order { kMbarrier, kSyncthreads };     // what hands a stage over, both ways
enum class Release {                              // how a consumer warp gives a stage back
  kPerWarp,        // read; __syncwarp; lane 0 arrives (step 25)
  kPerThread,      // read; every thread arrives
  kPerWarpFenced,  // read; fence.proxy.async; __syncwarp; lane 0 arrives
  kBeforeReads,    // __syncwarp; lane 0 arrives; read: the bug
};

template <Fill kFill_, Order kOrder_, Release kRelease_>
struct Protocol {
  static constexpr Fill kFill = kFill_;
  static constexpr Order kOrder = kOrder_;
  static constexpr Release kRelease = kRelease_;
  // Arrivals that complete an empty barrier's phase: one per consumer warp, or per thread.
  static constexpr int kEmptyArrivals = kRelease == Release::kPerThread ? kConsumerThreads : kConsumerWarps;
};
// Named types, so that a racecheck report names the variant (ring_kernel<Bulk>, ...).
struct Bulk : Protocol<Fill::kBulk, Order::kMbarrier, Release::kPerWarp> {};
struct BulkAllArrive : Protocol<Fill::kBulk, Order::kMbarrier, Release::kPerThread> {};
struct BulkFenced : Protocol<Fill::kBulk, Order::kMbarrier, Release::kPerWarpFenced> {};
struct Generic : Protocol<Fill::kGeneric, Order::kMbarrier, Release::kPerWarp> {};
struct GenericAllArrive : Protocol<Fill::kGeneric, Order::kMbarrier, Release::kPerThread> {};
struct Syncthreads : Protocol<Fill::kGeneric, Order::kSyncthreads, Release::kPerWarp> {};
struct BulkSyncthreads : Protocol<Fill::kBulk, Order::kSyncthreads, Release::kPerWarp> {};
struct BulkBroken : Protocol<Fill::kBulk, Order::kMbarrier, Release::kBeforeReads> {};

// What the consumers saw, for the host to judge.
struct Outcome {
  unsigned long long reads;  // values read and compared (a run that read nothing fails)
  unsigned long long wrong;  // of those, not the value of the position being read
  unsigned first_claimed;    // 0 until the first wrong value is recorded below
  int first_position, first_index, first_thread;
  float first_got, first_expected;
};

struct Ring {
  alignas(16) float stage[kStages][kStageFloats];
  std::uint64_t full[kStages];   // the stage holds position p's values (mbarrier order only)
  std::uint64_t empty[kStages];  // every consumer is done reading the stage
};
// Dynamic shared memory rounded up as step 25 does (hopper::aligned_smem): the compiler then
// cannot tell the stage's address space, and the reads are the same generic 8-byte loads
// (LD.E.64) as step 25's, not LDS.
constexpr std::size_t kSmemBytes = hopper::smem_bytes_for<Ring>;

#if LADDER_SM90A

// A consumer that is late to read: the producer, if the stage were already released, would refill
// it in this time.
__device__ __forceinline__ void spin(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

// Step 25's reads of a stage (the lse and D loops of block()), every value checked.
__device__ __forceinline__ void read_stage(const float* stage, int position, int lane,
                                           unsigned long long& wrong, Outcome* out) {
  const int t = lane % kLanesPerRow;
#pragma unroll
  for (int j = 0; j < kReadsPerThread; ++j) {
    const int i = 8 * j + 2 * t;
    const float2 v = *reinterpret_cast<const float2*>(stage + i);
    const float want[2] = {expected_value(position, i), expected_value(position, i + 1)};
    const float got[2] = {v.x, v.y};
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      if (got[e] == want[e]) continue;
      ++wrong;
      if (atomicCAS(&out->first_claimed, 0u, 1u) == 0u) {
        out->first_position = position;
        out->first_index = i + e;
        out->first_thread = int(threadIdx.x);
        out->first_got = got[e];
        out->first_expected = want[e];
      }
    }
  }
}

// The producer thread's fill of one stage with position p's values.
template <class P>
__device__ __forceinline__ void fill(Ring& ring, int stage, const float* src, int position) {
  const float* from = src + std::int64_t(position) * kStageFloats;
  if constexpr (P::kFill == Fill::kBulk) {
    hopper::mbarrier_arrive_expect_tx(&ring.full[stage], kStageBytes);
    hopper::bulk_load(ring.stage[stage], from, kStageBytes, &ring.full[stage]);
  } else {
    for (int i = 0; i < kStageFloats; ++i) ring.stage[stage][i] = from[i];
    if constexpr (P::kOrder == Order::kMbarrier) hopper::mbarrier_arrive(&ring.full[stage]);  // release
  }
}
#endif  // LADDER_SM90A

template <class P>
__global__ void __launch_bounds__(kThreads, 1)
    ring_kernel(const float* __restrict__ src, Outcome* __restrict__ out, long long late_cycles) {
#if LADDER_SM90A
  extern __shared__ unsigned char smem_raw[];
  Ring& ring = hopper::aligned_smem<Ring>(smem_raw);
  const int warp = int(threadIdx.x) / kWarpThreads;
  const int lane = int(threadIdx.x) % kWarpThreads;
  const bool producer = warp == 0;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      hopper::mbarrier_init(&ring.full[s], 1);  // the producer's one arrival (with expect_tx)
      hopper::mbarrier_init(&ring.empty[s], P::kEmptyArrivals);
    }
    hopper::mbarrier_init_fence();
  }
  __syncthreads();
  unsigned long long wrong = 0;

  if constexpr (P::kOrder == Order::kSyncthreads) {
    // Position p: the producer fills stage p % 2 (a bulk copy it waits for itself), one
    // __syncthreads publishes it, the consumers read it. The stage's next fill (p + 2) comes after
    // the __syncthreads of p + 1, which every consumer passes only after its reads of p.
    for (int p = 0; p < kPositions; ++p) {
      const int s = hopper::ring_stage<kStages>(p);
      if (producer && lane == 0) {
        fill<P>(ring, s, src, p);
        if constexpr (P::kFill == Fill::kBulk) hopper::mbarrier_wait(&ring.full[s], hopper::ring_parity<kStages>(p));
      }
      __syncthreads();
      if (!producer) {
        spin(late_cycles);
        read_stage(ring.stage[s], p, lane, wrong, out);
      }
    }
  } else if (producer) {
    // pipeline.cuh's protocol, as step 25's producer: wait for the stage's previous pass to be
    // released, then fill it.
    if (lane == 0)
      for (int p = 0; p < kPositions; ++p) {
        const int s = hopper::ring_stage<kStages>(p);
        hopper::mbarrier_wait(&ring.empty[s], hopper::ring_parity<kStages>(p) ^ 1);
        fill<P>(ring, s, src, p);
      }
  } else {
    for (int p = 0; p < kPositions; ++p) {
      const int s = hopper::ring_stage<kStages>(p);
      hopper::mbarrier_wait(&ring.full[s], hopper::ring_parity<kStages>(p));
      auto release_by_lane0 = [&] {
        __syncwarp();
        if (lane == 0) hopper::mbarrier_arrive(&ring.empty[s]);
      };
      if constexpr (P::kRelease == Release::kBeforeReads) release_by_lane0();  // the bug
      spin(late_cycles);
      read_stage(ring.stage[s], p, lane, wrong, out);
      if constexpr (P::kRelease == Release::kPerWarpFenced) hopper::fence_proxy_async_smem();
      if constexpr (P::kRelease == Release::kPerThread) hopper::mbarrier_arrive(&ring.empty[s]);
      else if constexpr (P::kRelease != Release::kBeforeReads) release_by_lane0();
    }
  }
  if (!producer) {
    atomicAdd(&out->reads, static_cast<unsigned long long>(kPositions) * kReadsPerThread * 2);
    if (wrong > 0) atomicAdd(&out->wrong, wrong);
  }
#elif defined(__CUDA_ARCH__)
  __trap();  // built without sm_90a: main refuses such a GPU before launching
#endif  // LADDER_SM90A
}

// ---- Host ------------------------------------------------------------------------------------
struct VariantEntry {
  std::string_view name;
  void (*kernel)(const float*, Outcome*, long long);
  bool broken;  // a wrong value is the expected outcome
};
const std::array kVariants = {
    VariantEntry{"bulk", ring_kernel<Bulk>, false},
    VariantEntry{"bulk_all_arrive", ring_kernel<BulkAllArrive>, false},
    VariantEntry{"bulk_fenced", ring_kernel<BulkFenced>, false},
    VariantEntry{"generic", ring_kernel<Generic>, false},
    VariantEntry{"generic_all_arrive", ring_kernel<GenericAllArrive>, false},
    VariantEntry{"syncthreads", ring_kernel<Syncthreads>, false},
    VariantEntry{"bulk_syncthreads", ring_kernel<BulkSyncthreads>, false},
    VariantEntry{"bulk_broken", ring_kernel<BulkBroken>, true},
};

int usage(const char* why) {
  std::fprintf(stderr, "racecheck_ring: %s\nusage: racecheck_ring VARIANT [--spin CYCLES]\nvariants:", why);
  for (const auto& v : kVariants) std::fprintf(stderr, " %.*s", int(v.name.size()), v.name.data());
  std::fprintf(stderr, "\n");
  return kExitUsage;
}

int run(const VariantEntry& variant, long long late_cycles) {
  std::vector<float> host(std::size_t(kPositions) * kStageFloats);
  for (int p = 0; p < kPositions; ++p)
    for (int i = 0; i < kStageFloats; ++i) host[std::size_t(p) * kStageFloats + i] = expected_value(p, i);
  ladder::DeviceBuffer<float> src(host.size());
  src.upload(host);
  ladder::DeviceBuffer<Outcome> out(1);
  CUDA_CHECK(cudaMemset(out.get(), 0, sizeof(Outcome)));
  variant.kernel<<<1, kThreads, kSmemBytes>>>(src.get(), out.get(), late_cycles);
  CUDA_CHECK_LAUNCH("ring_kernel");
  CUDA_CHECK(cudaDeviceSynchronize());
  const Outcome o = out.download().front();

  const unsigned long long expected_reads =
      static_cast<unsigned long long>(kConsumerThreads) * kPositions * kReadsPerThread * 2;
  std::printf("%.*s: %d passes of %d stages, %llu values read, %llu wrong (consumer delay %lld cycles)\n",
              int(variant.name.size()), variant.name.data(), kPasses, kStages, o.reads, o.wrong, late_cycles);
  if (o.reads != expected_reads) {
    std::printf("FAIL: %llu values read, expected %llu: the consumers did not run their loop\n", o.reads,
                expected_reads);
    return kExitWrong;
  }
  if (o.wrong > 0) {
    std::printf("%s: thread %d read %g at position %d, element %d, expected %g%s\n",
                variant.broken ? "WRONG (as this variant should)" : "FAIL", o.first_thread, o.first_got,
                o.first_position, o.first_index, o.first_expected,
                variant.broken ? "" : ": the ring handed a stage over too early");
    return kExitWrong;
  }
  std::printf("%s\n", variant.broken ? "no wrong value seen this time (the release is still early: racecheck must flag it)"
                                     : "ok: every value is the one its position wrote");
  return kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage("no variant given");
  const std::string_view name = argv[1];
  const VariantEntry* variant = nullptr;
  for (const auto& v : kVariants)
    if (v.name == name) variant = &v;
  if (variant == nullptr) return usage("unknown variant");
  long long late_cycles = kLateCycles;
  for (int a = 2; a < argc; ++a) {
    const std::string_view arg = argv[a];
    if (arg == "--spin" && a + 1 < argc) {
      char* end = nullptr;
      late_cycles = std::strtoll(argv[++a], &end, 10);
      if (end == argv[a] || *end != '\0' || late_cycles < 0) return usage("--spin takes a number of cycles >= 0");
    } else {
      return usage("unknown argument");
    }
  }
  try {
    const auto devices = ladder::cuda_device_count();
    if (devices.count == 0) {
      std::printf("%s: %s\n", devices.no_gpu ? "SKIPPED: no CUDA GPU" : "FAILED: CUDA cannot use the driver",
                  devices.error.c_str());
      return devices.no_gpu ? kExitSkipped : kExitCuda;
    }
    if (const auto why = hopper::refuse_unless_sm90()) {
      std::printf("SKIPPED: %s\n", why->c_str());
      return kExitSkipped;
    }
    return run(*variant, late_cycles);
  } catch (const std::exception& e) {
    std::printf("FAILED: %s\n", e.what());
    return kExitCuda;
  }
}
