// Catch2's implementation (Catch2 2.13, single header), compiled once for every test
// runner, and the session the runners' main() start (catch_runner.hpp).
// It is third-party code, so tests/meson.build builds it without sanitizers and
// optimisation: under ASan at -O2 this one translation unit took 6-8 min on 2 cores,
// and each runner used to compile its own copy.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <iostream>

#include "tests/catch_runner.hpp"

namespace nanovm::testing {

namespace {
constexpr int kExitSkipped = 77;  // meson's "skipped"
}

int run_catch(int argc, char** argv) { return Catch::Session().run(argc, argv); }

int skip_catch(int argc, char** argv, const char* why) {
    Catch::Session session;
    if (const int rc = session.applyCommandLine(argc, argv); rc != 0) return rc;
    for (const Catch::TestCase& test : Catch::getAllTestCasesSorted(session.config()))
        std::cout << "SKIPPED (" << why << "): " << test.name << '\n';
    return kExitSkipped;
}

}  // namespace nanovm::testing
