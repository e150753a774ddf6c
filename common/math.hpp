// Constants the kernels share, usable on the host and the device.
#pragma once

namespace ladder {

// log2(e): exp(x) = exp2(x · log2(e)), and exp2 is one MUFU.EX2 instruction while expf is two
// instructions plus a range reduction. Kernels fold it into the softmax scale once.
inline constexpr float kLog2e = 1.4426950408889634f;

}  // namespace ladder
