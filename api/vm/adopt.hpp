// Finding out what holds a VM's directory, for a caller that did not start its VMM
// or has restarted since (nanovmd after a restart re-attaches to the sandboxes
// whose VMMs lived on; `nanovm vm` commands find the VM a user names). A VMM is
// alive while it holds vmm.lock (state_dir.hpp), and ready once its control socket
// says "running" or "paused" (the guest agent answered). Reads only: nothing is
// removed or stopped.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>

#include <nlohmann/json.hpp>

#include "api/vm/state_dir.hpp"

namespace nanovm::vm {

/// What holds VM `paths` now.
struct Adoption {
    enum class State {
        ready,         ///< a live VMM answered status with state running or paused
        starting,      ///< a live VMM that is still booting (its agent has not answered yet)
        stopping,      ///< a live VMM that is stopping
        unresponsive,  ///< the lock is held, but the control socket does not answer (see reason)
        dead,          ///< the directory is there, no VMM holds it (see reason)
        missing,       ///< no such directory
    };
    State state = State::missing;
    VmPaths paths;
    /// ready/starting/stopping: the VMM's status answer without "ok" (state, pid, cpus,
    /// memory_mib, uptime_ms, image, vsock_socket, console_log: vmm_process.hpp).
    nlohmann::json status;
    /// The VMM's pid (from status, else vm.json); 0 when unknown.
    pid_t pid = 0;
    /// dead: vmm_end_reason(); unresponsive: the control socket's error.
    std::string reason;
};

/// "ready", "starting", "stopping", "unresponsive", "dead", "missing".
const char* to_string(Adoption::State state) noexcept;

/// Tells whether a live, ready VMM holds VM `id` of `run` (lock + control `status`,
/// waiting up to `timeout` for the answer), so that a restarted caller can drive it
/// again; for a dead one, why it ended. Throws Error("ID: not a VM id") for an id
/// that is not 12 hex digits (a caller's input never reaches a path); nothing else.
Adoption adopt(const RunDir& run, const std::string& id,
               std::chrono::milliseconds timeout = std::chrono::seconds(2));

/// Why the VMM of `paths` ended, from the end of its vmm.log (last 8 KiB), one line
/// without the "nanovm: " prefix: its last "VM <id> ended: <outcome> (<reason>)"
/// line, with the guest console line it logged for a crash (a kernel panic) after
/// "; "; else its last line that is not guest console output (a VMM error, e.g.
/// "KVM_CREATE_VM: Cannot allocate memory"); else "its VMM ended without a word in
/// its log (killed?)". Never throws.
std::string vmm_end_reason(const VmPaths& paths) noexcept;

}  // namespace nanovm::vm
