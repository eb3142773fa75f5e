// Exit statuses of `nanovm boot` (also printed by `nanovm boot --help`).
//
// Without ACPI the guest ends every run with a reset; guest-init announces on the
// nanovm control port (guest-init/protocol/control_port.hpp) whether it is a poweroff
// or a reboot, and an unannounced reset is a crash (the kernel runs with panic=-1, so a
// panic resets at once).
#pragma once

namespace nanovm::exit_status {

inline constexpr int kPoweroff = 0;  ///< guest powered off (announced poweroff, then reset)
inline constexpr int kError = 1;     ///< nanovm error: bad input, missing file, KVM failure
inline constexpr int kUsage = 2;     ///< usage error (command line)
inline constexpr int kReboot = 3;    ///< guest rebooted (announced reboot; nanovm does not restart it)
inline constexpr int kCrash = 4;     ///< guest crashed: unannounced reset, triple fault, panic
/// Stopped from the host: 128 + the signal (SIGHUP 129, SIGINT 130, SIGTERM 143);
/// the console escape Ctrl-A x counts as SIGINT.
inline constexpr int kSignalBase = 128;

/// The text `nanovm boot --help` shows.
inline constexpr const char* kHelpText =
    "Exit status:\n"
    "  0  the guest powered off (guest-init announced a poweroff, then reset)\n"
    "  1  nanovm error (bad input, missing or corrupt kernel/initrd, no usable /dev/kvm, KVM failure)\n"
    "  2  usage error\n"
    "  3  the guest rebooted (announced reboot; nanovm does not restart it)\n"
    "  4  the guest crashed (reset or triple fault without announcement, e.g. a kernel panic)\n"
    "  128+N  stopped by signal N (SIGINT 130, SIGTERM 143, SIGHUP 129); Ctrl-A x = 130\n";

}  // namespace nanovm::exit_status
