#include "tests/kvm/snapshot_child_path.hpp"

#ifndef NANOVM_SNAPSHOT_CHILD
#error "NANOVM_SNAPSHOT_CHILD: the snapshot_child executable (set by tests/kvm/meson.build)"
#endif

namespace nanovm::test {

const char* snapshot_child_path() noexcept { return NANOVM_SNAPSHOT_CHILD; }

}  // namespace nanovm::test
