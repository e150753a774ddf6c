#include "common/npy.hpp"

#include <fmt/format.h>

#include <fstream>
#include <stdexcept>

namespace ladder {

std::string npy_header(const std::string& dtype, const std::vector<std::int64_t>& shape) {
  std::string dims;
  for (auto d : shape) dims += fmt::format("{}, ", d);
  // A 1-tuple keeps its comma, "(3,)"; longer tuples drop the trailing one, "(2, 3)".
  if (!dims.empty()) dims.resize(dims.size() - (shape.size() == 1 ? 1 : 2));
  std::string dict = fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': ({}), }}",
                                 dtype, shape.empty() ? "" : dims);
  // Magic (6) + version (2) + header length (2) + dict + padding + '\n', a multiple of 64 bytes.
  const std::size_t unpadded = 10 + dict.size() + 1;
  dict.append((64 - unpadded % 64) % 64, ' ');
  dict.push_back('\n');
  std::string header("\x93NUMPY\x01\x00", 8);
  header.push_back(char(dict.size() & 0xFF));
  header.push_back(char(dict.size() >> 8));
  return header + dict;
}

void write_npy(const std::string& path, const std::string& dtype,
               const std::vector<std::int64_t>& shape, const void* data, std::size_t bytes) {
  std::ofstream out(path, std::ios::binary);
  if (!out) throw std::runtime_error(fmt::format("cannot open {} for writing", path));
  const std::string header = npy_header(dtype, shape);
  out.write(header.data(), std::streamsize(header.size()));
  out.write(static_cast<const char*>(data), std::streamsize(bytes));
  if (!out) throw std::runtime_error(fmt::format("failed writing {}", path));
}

}  // namespace ladder
