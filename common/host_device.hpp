// LADDER_HOST_DEVICE: a function that host code and device code both compile (`__host__
// __device__` under nvcc, nothing under a host compiler), for the headers whose arithmetic the CPU
// tests check bit for bit against what the kernels run (exp2_poly.hpp, lazy_rescale.hpp,
// fp8_layout.hpp).
#pragma once

#if defined(__CUDACC__)
#define LADDER_HOST_DEVICE __host__ __device__
#else
#define LADDER_HOST_DEVICE
#endif
