// Sandbox (VM) ids: 12 lowercase hex digits (48 random bits from getrandom(2)), short
// enough to type, long enough that two VMs of one host never collide in practice.
// Users may type any unique prefix of an id (api/vm/state_dir.hpp resolves it).
#pragma once

#include <string>
#include <string_view>

namespace nanovm::vm {

/// Characters in an id.
inline constexpr size_t kVmIdLength = 12;

/// A fresh random id. Throws SysError(getrandom).
std::string new_vm_id();

/// True if `text` is a full id: exactly kVmIdLength of [0-9a-f].
bool is_vm_id(std::string_view text);

/// True if `text` could be a prefix of an id: 1..kVmIdLength of [0-9a-f].
bool is_vm_id_prefix(std::string_view text);

}  // namespace nanovm::vm
