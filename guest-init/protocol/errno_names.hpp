// errno values by name: the agent reports failures as "ENOENT", "EACCES"... because
// names, unlike numbers, mean the same on every architecture and libc.
#pragma once

#include <string>
#include <string_view>

namespace nanovm::agent::proto {

/// The symbolic name of `err` ("ENOENT"), or "E<number>" for a value without one.
std::string errno_name(int err);

/// The errno value named `name` on this system, or 0 if there is none.
int errno_from_name(std::string_view name);

}  // namespace nanovm::agent::proto
