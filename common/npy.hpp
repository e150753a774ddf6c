// Minimal NumPy .npy writer (format version 1.0), so anyone can load a step's inputs and outputs
// with numpy.load and compare them with another implementation.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace ladder {

// dtype: "<f2" (fp16), "<f4" (fp32). `data` holds prod(shape) elements of that type.
void write_npy(const std::string& path, const std::string& dtype,
               const std::vector<std::int64_t>& shape, const void* data, std::size_t bytes);

// The header a file with this dtype and shape starts with (tests check it against the format).
std::string npy_header(const std::string& dtype, const std::vector<std::int64_t>& shape);

}  // namespace ladder
