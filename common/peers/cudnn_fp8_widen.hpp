// The one kernel of the cuDNN FP8 row (cudnn_fp8.cpp): cuDNN on Hopper writes O in e4m3, the
// harness reads it in bf16. In its own .cu because the peer itself is host C++ compiled without
// nvcc; it needs no cuDNN.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace ladder::peers {

// out[i] = bf16(from_e4m3(in[i]) · factor) for i < n, then every byte of in[0, n) set to 0xFF
// (e4m3's NaN: the next launch must write each one again, or the check after it sees NaN). `factor`
// is a power of two, so each product is exact and so is its bf16 (cudnn_fp8_o_value on the host).
// `out` is __nv_bfloat16 device memory; stream-ordered.
void launch_widen_e4m3_to_bf16(std::uint8_t* in, void* out, std::int64_t n, float factor,
                               cudaStream_t stream);

}  // namespace ladder::peers
