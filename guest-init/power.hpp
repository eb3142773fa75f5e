// Ending the VM: PID 1's power-off and reboot.
//
// The guest kernel runs with ACPI off, where a real power-off only halts the CPU,
// and with reboot=k, where a reboot resets through the i8042 (0xFE to port 0x64),
// which reaches the VMM. So both actions end in reboot(RB_AUTOBOOT), and guest-init
// first writes which one it means to the nanovm control port
// (guest-init/protocol/control_port.hpp): the VMM then treats the reset that follows
// as power-off (the VM ends) or as reboot.
#pragma once

#include <optional>

namespace nanovm::guest_init {

/// What the VM should do after guest-init is done.
enum class PowerAction { kPoweroff, kReboot };

/// The action a signal to PID 1 asks for: SIGUSR2 (busybox poweroff) and SIGUSR1
/// (halt) power off; SIGTERM (reboot) and SIGINT (Ctrl-Alt-Del) reboot.
std::optional<PowerAction> power_action_for_signal(int sig);

/// sync(); SIGTERM (and SIGCONT) to every process, a short grace period, SIGKILL to
/// what is left; sync(); remount / read-only (a read-write root disk is left clean);
/// announce `action` on the control port; reboot(RB_AUTOBOOT).
/// Never returns: should the reboot call fail, it tries RB_POWER_OFF, then sleeps
/// forever (PID 1 must not exit).
[[noreturn]] void power_down(PowerAction action);

}  // namespace nanovm::guest_init
