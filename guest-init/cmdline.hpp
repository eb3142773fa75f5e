// The kernel command line: the `nanovm.*` keys that tell guest-init what to do.
//
// The kernel does not pass dotted parameters ("nanovm.exec=...") to init's argv or
// environment, so guest-init reads /proc/cmdline and parses it here. Pure functions:
// no I/O, unit-tested in guest-init/tests/cmdline_test.cpp.
//
// Keys ('-' and '_' are interchangeable in key names, as for kernel parameters; a key
// given twice: the last one wins):
//   nanovm.until_ready[=<bool>]   power off right after the ready line. No value
//                                 means true; bool: 1/0, y/n, yes/no, true/false, on/off.
//   nanovm.exec=<shell command>   run `/bin/sh -c <command>` on the console, print the
//                                 exit line, power off. Quote it to keep spaces:
//                                 nanovm.exec="echo hi; uname -a".
//   nanovm.agent[=<port>]         serve the guest agent (agent/server.hpp) on vsock
//                                 <port> (default 1024, proto::kAgentVsockPort) until
//                                 a power-off or reboot request.
//   nanovm.overlay=<device>|tmpfs make / writable before anything else runs: an
//                                 overlayfs whose lower layer is the (read-only)
//                                 root disk and whose upper layer is on the ext4
//                                 disk <device> (a /dev/ path, e.g. /dev/vdb) or in
//                                 RAM (tmpfs). Independent of the mode.
// until_ready wins over exec, exec over agent. None: an interactive /bin/sh on the
// console.
// Unknown nanovm.* keys are warnings (a newer host may pass keys an older guest does
// not know); a known key with a bad or missing value is an error.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace nanovm::guest_init {

/// One whitespace-separated kernel parameter, split like the kernel's next_arg():
/// `key`, or `key=value` with one level of double quotes removed from the value (and
/// from the whole parameter, for "key=value with spaces"). There is no escaping: a
/// double quote only toggles quoting, so a value cannot contain one — use single
/// quotes inside a quoted shell command.
struct KernelParam {
    std::string key;
    std::optional<std::string> value;  ///< nullopt: no '=' at all; "" for `key=`

    bool operator==(const KernelParam&) const = default;
};

/// Splits a kernel command line (e.g. the contents of /proc/cmdline, trailing
/// newline included) into parameters. Stops at a bare `--`: what follows belongs
/// to init's argv, not to the kernel's parameters.
std::vector<KernelParam> split_kernel_params(std::string_view cmdline);

/// What guest-init does after its ready line.
enum class BootMode {
    kShell,       ///< interactive /bin/sh on the console, power off when it exits
    kUntilReady,  ///< power off right after the ready line
    kExec,        ///< /bin/sh -c <exec_command>, exit line, power off
    kAgent,       ///< serve the guest agent on vsock port agent_port until powered off
};

/// guest-init's settings from the command line, with what was wrong with it.
struct BootConfig {
    BootMode mode = BootMode::kShell;
    std::string exec_command;           ///< set when mode == kExec
    uint32_t agent_port = 1024;         ///< vsock port when mode == kAgent
    /// nanovm.overlay: "" (none), "tmpfs", or a device path under /dev/.
    std::string overlay;
    std::vector<std::string> warnings;  ///< e.g. unknown keys; boot goes on
    std::vector<std::string> errors;    ///< bad values; guest-init powers off
};

/// The value nanovm.overlay= takes for an upper layer in RAM.
inline constexpr const char* kOverlayTmpfs = "tmpfs";

/// Reads the nanovm.* keys of `cmdline`; other parameters are ignored.
BootConfig parse_boot_config(std::string_view cmdline);

}  // namespace nanovm::guest_init
