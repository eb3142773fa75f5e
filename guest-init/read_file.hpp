// Reading small kernel-provided files (/proc/cmdline, /proc/meminfo, sysfs).
#pragma once

#include <optional>
#include <string>

namespace nanovm::guest_init {

/// Reads the file at `path` whole. nullopt on error, with errno set.
std::optional<std::string> read_small_file(const char* path);

}  // namespace nanovm::guest_init
