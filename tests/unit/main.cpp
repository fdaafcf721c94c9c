// The Catch2 test runner for dnnc's unit tests.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
