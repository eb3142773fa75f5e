// The sandbox state machine as data: which operation may start from which state,
// the state a sandbox is in while the operation runs, and the state it leaves. The
// manager (manager.hpp) checks every operation here and nowhere else; docs/api.md
// shows the same table ("Sandbox states"), and tests/daemon/docs_test.py checks it
// against /v1/openapi.json's x-nanovm-transitions, which is made from this table.
//
//   creating     its VMM is starting (create, restore, fork child)
//   running      the guest runs
//   paused       vCPUs stopped by an explicit pause; only resume goes on
//   sleeping     vCPUs stopped by sleep, autosleep or snapshot(leave_paused): the next
//                exec, file or session call resumes it
//   archiving    its memory and disk are being packed into the archive store
//   archived     packed; no VMM, no RAM; unarchive restores it under the same id
//   unarchiving  being restored from its archive
//   rebooting    its guest boots cold over its kept disk
//   deleting     being stopped and removed
//   error        its VMM died (the reason from its vmm.log) or never came up
#pragma once

#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace nanovm::daemon {

enum class SandboxState {
    creating,
    running,
    paused,
    sleeping,
    archiving,
    archived,
    unarchiving,
    rebooting,
    deleting,
    error,
};

/// Every state, in the order above (docs/api.md's columns).
std::span<const SandboxState> all_states();

/// What a client (or the daemon itself) does to a sandbox.
enum class SandboxOp {
    use,        ///< exec, files, sessions, commands: needs the guest running (a sleeping one is woken first)
    pause,      ///< POST .../pause
    resume,     ///< POST .../resume
    sleep,      ///< POST .../sleep
    snapshot,   ///< POST .../snapshots; to = sleeping only with leave_paused (the manager decides that one)
    fork,       ///< POST .../fork
    patch,      ///< PATCH /v1/sandboxes/{id}
    archive,    ///< POST .../archive
    unarchive,  ///< POST .../unarchive
    reboot,     ///< POST .../reboot
    remove,     ///< DELETE /v1/sandboxes/{id}
    autosleep,  ///< the daemon: idle for autosleep_s
    expire,     ///< the daemon: end_at passed (deleted, or archived with on_timeout "archive")
    vmm_died,   ///< the daemon: the watcher saw its VMM gone
};

/// One row: `op` may start in any state of `from`; while it runs the sandbox is in
/// `during` (nullopt: stays as it was); afterwards it is in `to` (nullopt: unchanged,
/// or the manager's choice where the row's comment says so). In the states of
/// `no_op_in` (a part of `from`) it is allowed and does nothing.
struct Transition {
    SandboxOp op;
    std::initializer_list<SandboxState> from;
    std::optional<SandboxState> during;
    std::optional<SandboxState> to;
    std::initializer_list<SandboxState> no_op_in = {};
    bool by_daemon = false;  ///< the daemon's own (autosleep, expire, vmm_died), never a client call
};

/// The table, one row per operation, in SandboxOp's order.
std::span<const Transition> transition_table();

/// The row for `op`.
const Transition& transition(SandboxOp op);

/// True if `op` may start in `state`.
bool allowed(SandboxOp op, SandboxState state);

/// True if `op` is allowed in `state` and changes nothing there (the row's no_op_in:
/// pause of a paused sandbox, resume of a running one, sleep of a sleeping one,
/// archive of an archived one, unarchive of a running one): answered at once.
bool no_op(SandboxOp op, SandboxState state);

/// Why `op` may not start in `state`: a catalogue code and a one-line message that
/// names the state and the call that would help.
struct Refusal {
    std::string code;  ///< wrong_state, sandbox_paused (use of paused), sandbox_archived (anything on archived)
    std::string message;
};

/// nullopt when `op` is allowed in `state`.
std::optional<Refusal> refusal(SandboxOp op, SandboxState state);

/// Throws ApiError (409) with refusal(op, state) when `op` may not start in `state`.
void require_allowed(SandboxOp op, SandboxState state);

std::string_view to_string(SandboxState state);
/// The operation's name in docs/api.md and the OpenAPI document ("use", "archive"...).
std::string_view to_string(SandboxOp op);
/// Parses a state name; nullopt for an unknown one.
std::optional<SandboxState> parse_state(std::string_view text);

/// States in which the sandbox holds (or is getting, or is still giving back) a VMM
/// and counts against the caps: creating, running, paused, sleeping, archiving,
/// unarchiving, rebooting.
bool holds_resources(SandboxState state);

}  // namespace nanovm::daemon
