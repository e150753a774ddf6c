// Catch2 3.x and 2.13 have different headers; the tests include this one.
#pragma once

#if __has_include(<catch2/catch_test_macros.hpp>)
#include <catch2/catch_approx.hpp>
#include <catch2/catch_session.hpp>
#include <catch2/catch_test_macros.hpp>
using Catch::Approx;
#else
// Catch2 2.x: the file that defines LADDER_CATCH_RUNNER provides Catch's implementation and its
// own main() (the GPU tests' main decides first whether there is a GPU at all).
#ifdef LADDER_CATCH_RUNNER
#define CATCH_CONFIG_RUNNER
#endif
#include <catch2/catch.hpp>
#endif
