// printf-style formatting for step files.
//
// The harness formats with fmt, but fmt's compile-time format checks do not survive nvcc, so the
// .cu files of the steps (which nvcc compiles) use this instead.
#pragma once

#include <string>

namespace ladder {

std::string strprintf(const char* format, ...) __attribute__((format(printf, 1, 2)));

}  // namespace ladder
