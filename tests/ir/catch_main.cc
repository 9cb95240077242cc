// Shared Catch2 v2 main for fxfuse's unit tests.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
