// The one translation unit that instantiates Catch2's runner for the unit tests.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
