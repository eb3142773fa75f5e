// main() of the test runners that need nothing before Catch2 runs (unit, agent,
// guest-init). Catch2's implementation is in catch_impl.cpp, one copy for all runners.
#include "tests/catch_runner.hpp"

int main(int argc, char** argv) { return nanovm::testing::run_catch(argc, argv); }
