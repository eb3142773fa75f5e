// TEST-ONLY hook: NANOVM_TEST_SNAPSHOT_STALL=<step> makes a snapshot stop for good
// at that step (the thread sleeps until the process is killed), so that a test can
// SIGKILL the process at a known point and check what is left on disk (issue 5:
// "SIGKILL of the VMM in the middle of a snapshot ... leaves no durable-looking
// snapshot"). Never set it outside tests. Steps, in snapshot order:
//   state         vm.state written and fsync'd, memory layer not started
//   layer         memory layer written and fsync'd, manifest not started
//   manifest-tmp  manifest.tmp written and fsync'd, not yet renamed to manifest
// On reaching the step it writes "nanovm: test stall at <step>" to stderr first.
#pragma once

#include <string_view>

namespace nanovm::snapshot {

inline constexpr const char* kTestStallEnv = "NANOVM_TEST_SNAPSHOT_STALL";

/// Stalls forever if $NANOVM_TEST_SNAPSHOT_STALL equals `step`; else returns.
void test_stall_point(std::string_view step);

}  // namespace nanovm::snapshot
