// Starting programs on the guest console.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace nanovm::guest_init {

/// The console's real tty, for use as a controlling terminal: the last entry of
/// /sys/class/tty/console/active (e.g. /dev/ttyS0), else /dev/ttyS0, else
/// /dev/console (which cannot be a controlling terminal: no job control then).
std::string console_tty_path();

/// The environment of the programs guest-init starts: HOME=/root, PATH, TERM (from
/// PID 1's own environment, else "linux"), SHELL=/bin/sh, USER and LOGNAME=root.
std::vector<std::string> child_environment();

/// Forks and execs `argv` (argv[0] is the absolute path of the program) as the
/// leader of a new session with stdin, stdout and stderr on `tty`, all signals
/// unblocked, cwd "/" and child_environment(). With `controlling_terminal` the tty
/// becomes the session's controlling terminal (job control for an interactive
/// shell); without it the session has none, so the kernel does not hang the tty up
/// when the leader exits -- a hangup discards output still queued in the UART's
/// transmit buffer, which would cut the tail of a command's output.
/// Returns the child's pid, or -1 with an error line printed. If the exec itself
/// fails, the child prints an error line and exits with status 127.
pid_t spawn_on_console(const std::vector<std::string>& argv, const std::string& tty,
                       bool controlling_terminal);

}  // namespace nanovm::guest_init
