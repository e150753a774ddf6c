#include "common/strings.hpp"

#include <cstdarg>
#include <cstdio>
#include <vector>

namespace ladder {

std::string strprintf(const char* format, ...) {
  va_list args;
  va_start(args, format);
  va_list copy;
  va_copy(copy, args);
  const int length = std::vsnprintf(nullptr, 0, format, copy);
  va_end(copy);
  std::vector<char> buffer(length > 0 ? length + 1 : 1);
  std::vsnprintf(buffer.data(), buffer.size(), format, args);
  va_end(args);
  return std::string(buffer.data(), length > 0 ? length : 0);
}

std::string grouped(double value) {
  std::string digits = strprintf("%.0f", value);
  for (auto pos = std::ptrdiff_t(digits.size()) - 3; pos > 0; pos -= 3) digits.insert(pos, ",");
  return digits;
}

}  // namespace ladder
