// Host-side figures of a VMM process from /proc (proc(5)), for the sandbox metrics
// and autosleep's CPU test.
#pragma once

#include <sys/types.h>

#include <optional>

namespace nanovm::daemon {

/// The process's user + system CPU time in ms (/proc/PID/stat fields 14 and 15);
/// nullopt when it cannot be read (the process is gone).
std::optional<double> process_cpu_ms(pid_t pid);

}  // namespace nanovm::daemon
