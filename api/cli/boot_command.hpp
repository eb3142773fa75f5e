// `nanovm boot`: boot a Linux guest with the serial console on this terminal.
#pragma once

#include "api/vm/boot_options.hpp"

namespace nanovm {

/// Runs the guest to its end; returns the exit status (api/cli/exit_status.hpp). Prints
/// every error as one line on stderr; never throws.
int run_boot(const BootOptions& options);

}  // namespace nanovm
