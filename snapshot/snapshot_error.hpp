// The error every snapshot part raises: what() names the file and the part that is
// wrong ("vm.state: section 4 (vcpu 0 sregs): checksum mismatch"), so a corrupt
// snapshot is refused with a message, never a crash.
#pragma once

#include <string>

#include "vmm/error.hpp"

namespace nanovm::snapshot {

/// A snapshot file that is truncated, corrupt, of a newer format, or inconsistent
/// with the machine it is restored into.
class SnapshotError : public Error {
public:
    explicit SnapshotError(const std::string& message) : Error(message) {}
};

}  // namespace nanovm::snapshot
