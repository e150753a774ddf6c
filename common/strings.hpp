// printf-style formatting for step files.
//
// The harness formats with fmt, but fmt's compile-time format checks do not survive nvcc, so the
// .cu files of the steps (which nvcc compiles) use this instead.
#pragma once

#include <string>

namespace ladder {

std::string strprintf(const char* format, ...) __attribute__((format(printf, 1, 2)));

// 137438953472 -> "137,438,953,472": counts this large are unreadable in %g.
std::string grouped(double value);

}  // namespace ladder
