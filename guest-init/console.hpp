// The guest console: PID 1's standard fds and the lines guest-init prints on it.
#pragma once

#include <string_view>

namespace nanovm::guest_init {

/// Makes sure fds 0, 1 and 2 are open: any that is closed is pointed at
/// /dev/console. Returns false if /dev/console could not be opened (e.g. before
/// devtmpfs is mounted, when the initramfs has no /dev/console node).
bool ensure_console_fds();

/// Writes `line` plus "\n" to stdout with one write(2). No prefix is added.
void write_line(std::string_view line);

/// Prints "nanovm-init: <message>".
void log_info(std::string_view message);

/// Prints "nanovm-init: error: <what>".
void log_error(std::string_view what);

/// Prints "nanovm-init: error: <what>: <strerror(err)>".
void log_errno(std::string_view what, int err);

}  // namespace nanovm::guest_init
