// Catch2 2.x has no Catch2WithMain target: this file is its main().
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
