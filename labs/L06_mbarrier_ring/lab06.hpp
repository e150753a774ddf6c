// Lab 06's given interface (do not edit): the kernel's fixed numbers, the release points the
// consumer can choose from, and the record the kernel leaves when a wait times out. Included by
// your ring.hpp, by the kernel (mbarrier_ring.cu), by the protocol model (model.hpp) and by the
// checker, so all four agree on them.
#pragma once

#include <cstdint>
#include <cstdlib>

namespace lab06 {

inline constexpr int kStep = 56;          // the lab's number in the registry (50 + lab)
inline constexpr int kBlockN = 128;       // keys per K/V block: rows of one TMA box
inline constexpr int kStages = 2;         // the kernel's ring depth (the model also tries 3 and 4)
inline constexpr int kConsumerWarps = 8;  // 2 consumer warpgroups x 4 warps: arrivals per empty phase
inline constexpr int kElementBytes = 2;   // fp16

// The three places in a consumer's block where it could arrive on empty[stage] (mbarrier_ring.cu
// marks each one): right after full[stage] said the bytes landed, after S = Q K^T (K has been
// read), or after O += P V (K and V have been read).
enum class Release : int { kAfterWait = 0, kAfterScores = 1, kAfterOutput = 2 };
inline const char* release_name(Release r) {
  return r == Release::kAfterWait ? "after the full wait" : r == Release::kAfterScores ? "after S = Q K^T" : "after O += P V";
}

// A wait that did not complete in kStallMs: the kernel's bounded wait gives up, and every other
// wait of the launch gives up at once, so a wrong protocol ends the launch instead of hanging the
// GPU. The first producer and the first consumer that gave up leave a record (which barrier, which
// parity, which block): what each side was waiting for when the launch gave up.
inline constexpr int kStallMs = 250;
// The limit a run uses: kStallMs, or LADDER_LAB_STALL_MS from the environment. Under
// compute-sanitizer a kernel runs ~100× slower and a correct ring would look deadlocked at 250 ms;
// scripts/sanitize_all.sh raises it (a deadlock then still ends, only later).
inline int stall_ms() {
  const char* env = std::getenv("LADDER_LAB_STALL_MS");
  const int ms = env ? std::atoi(env) : 0;
  return ms > 0 ? ms : kStallMs;
}
enum class Waiter : int { kNone = 0, kProducer = 1, kConsumer = 2 };
struct Stall {  // plain (a __device__ variable holds it); waiter == kNone: no record
  int waiter;   // Waiter
  int stage;    // -1: the Q tile's barrier
  int parity;
  int block;    // i: the block's position in the CTA's processing order
  int cta_x, cta_y;
  int warp;     // warp of the CTA
  int timed_out;  // 1: this wait ran out its kStallMs; 0: it gave up because another one had
};
struct Stalls {
  Stall producer, consumer;
  bool any() const { return producer.waiter != int(Waiter::kNone) || consumer.waiter != int(Waiter::kNone); }
};
// The records since the last call, and forget them. Defined in the kernel file; needs a CUDA
// context.
Stalls take_stalls();

}  // namespace lab06
