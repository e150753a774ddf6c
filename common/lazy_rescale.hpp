// FlashAttention-4's conditional rescaling, the rule of step 32's lazy variants; host and device,
// so that tests/cpu/test_lazy_rescale.cpp runs the kernel's own decision on random rows.
//
// The online softmax keeps, per row, a reference m, O = Σ_k 2^(x_k − m) v_k and l = Σ_k 2^(x_k − m)
// over the keys seen so far (x = score · scale · log2 e). The result is O / l = Σ 2^x_k v_k /
// Σ 2^x_k: m cancels between numerator and denominator, so ANY m gives the same normalised row, as
// long as O and l always use the same one. m is the running max only to keep 2^(x − m) ≤ 1 (no
// overflow). Changing m to m' costs the rescale of O and l by 2^(m − m'); keeping m when a block's
// max exceeds it by at most τ costs nothing, and leaves every P = 2^(x − m) ≤ 2^τ: with τ = 8, at
// most 256 (fp16's largest is 65504; l ≤ N·256 in fp32). Exact arithmetic, not an approximation:
// the same identity, fewer rescales; the rounding differs only in where P's roundings fall.
//
// The hazard the rule must not have: P computed against one m while O (or l) still holds another
// (tests/cpu/test_lazy_rescale.cpp plants exactly that bug).
#pragma once

#include "common/host_device.hpp"

namespace ladder {

// τ in log2 units: a row's reference moves only when a block's max exceeds it by more than 2^τ.
inline constexpr float kLazyRescaleThresholdLog2 = 8.f;

// Whether a row's reference must move to the block's max. m_ref = −inf (no visible key yet)
// always moves to a finite block max; a block with no visible key (m_block = −inf) never moves it
// (−inf − x and NaN compare false).
LADDER_HOST_DEVICE inline bool must_raise_max(float m_ref, float m_block, float scale_log2,
                                              float threshold_log2 = kLazyRescaleThresholdLog2) {
  return (m_block - m_ref) * scale_log2 > threshold_log2;
}

}  // namespace ladder
