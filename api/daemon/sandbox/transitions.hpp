// The sandbox state machine as data: which operation may start from which state,
// and the state it leaves. The manager (manager.hpp) checks every operation here and
// nowhere else; docs/api.md shows the same table.
//
//   creating  its VMM is starting (create, restore, fork child)
//   running   the guest runs
//   paused    vCPUs stopped by an explicit pause; resume to go on
//   sleeping  vCPUs stopped by snapshot(leave_paused): the next exec, file or
//             session call resumes it
//   deleting  being stopped and removed
//   error     its VMM died (the reason from its vmm.log) or never came up
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace nanovm::daemon {

enum class SandboxState { creating, running, paused, sleeping, deleting, error };

/// What a client (or the daemon itself) does to a sandbox.
enum class SandboxOp {
    use,       ///< exec, files, sessions: needs the guest running (a sleeping one is woken first)
    pause,
    resume,
    snapshot,  ///< to = sleeping only with leave_paused (the manager decides that one)
    fork,
    patch,
    remove,
    vmm_died,  ///< the watcher saw its VMM gone
};

/// One row: `op` may start in any state of `from`; afterwards the sandbox is in `to`
/// (nullopt: unchanged).
struct Transition {
    SandboxOp op;
    std::initializer_list<SandboxState> from;
    std::optional<SandboxState> to;
};

/// The table.
std::span<const Transition> transition_table();

/// The row for `op`.
const Transition& transition(SandboxOp op);

/// True if `op` may start in `state`.
bool allowed(SandboxOp op, SandboxState state);

/// Throws ApiError when `op` may not start in `state`: sandbox_paused for a use of a
/// paused sandbox, wrong_state ("cannot pause: the sandbox is error") otherwise.
void require_allowed(SandboxOp op, SandboxState state);

std::string_view to_string(SandboxState state);
std::string_view to_string(SandboxOp op);
/// Parses a state name; nullopt for an unknown one.
std::optional<SandboxState> parse_state(std::string_view text);

/// States whose VMM exists and counts against the caps.
bool holds_resources(SandboxState state);

}  // namespace nanovm::daemon
