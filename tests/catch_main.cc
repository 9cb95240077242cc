// The one Catch2 v2 main() of every fxfuse C++ unit test (//tests:catch_main).
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
