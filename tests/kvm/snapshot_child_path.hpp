// Where meson built snapshot_child, the process the snapshot tests and the benchmark
// restore into. Only snapshot_child_path.cpp is compiled with that absolute path
// (-DNANOVM_SNAPSHOT_CHILD), so that the other sources' compile lines do not depend on
// where the checkout lives and the compiler cache (ccache) serves them in any clone.
#pragma once

namespace nanovm::test {

/// Absolute path of the snapshot_child executable (build/tests/kvm/snapshot_child).
const char* snapshot_child_path() noexcept;

}  // namespace nanovm::test
