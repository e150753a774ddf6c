// Seeded random inputs. Element i of a tensor depends only on (seed, stream, i), never on the thread
// count or the order of generation, so every run, machine and test sees the same inputs.
#pragma once

#include <cstdint>
#include <vector>

#include "common/dtype.hpp"

namespace ladder {

// N(0,1)·scale for every element, as float.
std::vector<float> random_normal(std::size_t count, std::uint64_t seed, std::uint64_t stream,
                                 float scale = 1.0f);

// The same values rounded to a 16-bit type (fp16 or bf16), and those values back as float (what a
// kernel actually sees, and so what the reference must use). fp8 is not 16 bits (to_bits throws):
// an fp8 problem draws bf16 and quantizes that (quantize_e4m3, common/run_attention.cpp).
struct Tensor16 {
  DType dtype = DType::F16;
  std::vector<std::uint16_t> bits;  // uploaded to the device
  std::vector<float> value;         // exactly the rounded values, widened
};
Tensor16 random_tensor16(std::size_t count, std::uint64_t seed, std::uint64_t stream,
                         DType dtype = DType::F16, float scale = 1.0f);

// Integers in [-8, 8] without 0, as float: sums of up to 2^20 of them are exact in fp32, so a
// reduction that drops or doubles one element is caught exactly.
std::vector<float> random_small_integers(std::size_t count, std::uint64_t seed);

}  // namespace ladder
