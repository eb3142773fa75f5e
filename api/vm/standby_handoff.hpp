// Handing a fork child to a standby VMM (api/vm/fork_standby.hpp). The standby
// listens on a SOCK_SEQPACKET unix socket in its parent VM's directory
// (standby-<n>.sock). The launcher connects and sends one message: the child's
// VmmOptions as JSON, with its vmm.lock and readiness-pipe write end attached as
// SCM_RIGHTS (unix(7)), so the standby then holds the VM's lock and answers on the
// pipe exactly as a VMM the launcher had exec'ed. The standby answers "ok" once it
// owns them (it has unlinked its socket: nobody else can claim it), or "no: <why>"
// (a shape it was not made for, a malformed message); a standby that went away
// meanwhile just closes the connection. Either way the launcher starts a VMM
// process itself instead.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "api/vm/vmm_options.hpp"
#include "vmm/fd.hpp"

namespace nanovm::vm {

/// The environment a VMM takes its settings from (nanovm's own NANOVM_* variables,
/// and XDG_RUNTIME_DIR, XDG_CACHE_HOME and HOME, which place the run and cache
/// directories): name -> value for those set. A claim carries the launcher's, so a
/// standby (started by the parent VMM, with the parent's environment) runs the child
/// as a VMM the launcher had exec'ed would (NANOVM_KEEP_STATE, the run directory).
using VmmEnvironment = std::map<std::string, std::string>;

/// This process's VmmEnvironment.
VmmEnvironment vmm_environment();

/// Makes this process's VmmEnvironment exactly `env`: sets those, unsets the other
/// variables of that kind.
void apply_vmm_environment(const VmmEnvironment& env);

/// VmmOptions (lock_fd and ready_fd are not part of it) and a VmmEnvironment as the
/// claim's JSON.
std::string encode_claim(const VmmOptions& options, const VmmEnvironment& env);

/// A claim's contents.
struct DecodedClaim {
    VmmOptions options;
    VmmEnvironment env;
};

/// The inverse, validating every field's type and range (the id a VM id, run_dir
/// empty or absolute, cpus
/// 1..4, memory 128..8192 MiB, fork_standby 0..kMaxForkStandby, environment names
/// of the kinds above, values without NUL). Throws Error with one line naming the
/// field.
DecodedClaim decode_claim(std::string_view json);

/// Launcher side: offers the fork child `options` (with this process's
/// vmm_environment()) to the standby listening at
/// `socket_path`, passing `lock_fd` and `ready_fd` (both stay open here; close them
/// once this returns a pid). Waits up to `timeout` for the answer. Returns the
/// standby's pid (SO_PEERCRED) once it said "ok"; nullopt, with the reason in
/// `why`, if nothing listens there, it refused, or it closed without answering.
/// Never throws for the standby's failures.
std::optional<pid_t> hand_to_standby(const std::string& socket_path, const VmmOptions& options, int lock_fd,
                                     int ready_fd, std::chrono::milliseconds timeout, std::string& why);

/// What a standby received: the child's options and the fds that came with them.
struct StandbyClaim {
    VmmOptions options;  ///< lock_fd / ready_fd unset: see lock, ready
    VmmEnvironment env;  ///< the launcher's vmm_environment()
    Fd lock;             ///< the child's vmm.lock (flock'ed by the launcher's open file description)
    Fd ready;            ///< the child's readiness pipe, write end
};

/// Standby side: reads the one message of accepted connection `conn`, waiting up to
/// `timeout`. Throws Error (no message in time, not exactly two fds attached, bad
/// JSON per decode_claim); fds that came with a bad message are closed.
StandbyClaim receive_claim(int conn, std::chrono::milliseconds timeout);

/// Standby side: sends `answer` ("ok" or "no: <why>") on `conn`. Best effort.
void answer_claim(int conn, std::string_view answer);

}  // namespace nanovm::vm
