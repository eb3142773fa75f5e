// Entry points into Catch2's runner for our test executables' main(). Catch2 2.13
// declares Catch::Session only in the translation unit that holds its implementation
// (CATCH_CONFIG_RUNNER), so that unit (catch_impl.cpp) runs the session for them.
#pragma once

namespace nanovm::testing {

/// Runs the test cases Catch2's command line (argc, argv) selects.
/// Returns Catch2's exit status: 0 = all passed, else the failed assertions (at most 255).
int run_catch(int argc, char** argv);

/// Applies Catch2's command line, prints "SKIPPED (<why>): <name>" for every test case
/// it selects on stdout, and returns 77 (meson's "skipped"); a bad command line returns
/// Catch2's status instead. For runners whose prerequisite (e.g. /dev/kvm) is missing.
int skip_catch(int argc, char** argv, const char* why);

}  // namespace nanovm::testing
