// The manager's one door to the VM layer (api/vm/, api/agent_client/): start a VMM,
// drive it through its control socket, reach its guest agent, stop it. Failures
// come out as ApiError (vm_error with the VM layer's own one-line reason), so the
// manager never sees the VM layer's exception types. When the VM layer gets its
// library form (a caller-chosen run directory, no printing, no clean-up side
// effects), this file is what changes.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "api/agent_client/agent_client.hpp"
#include "api/vm/launcher.hpp"
#include "api/vm/state_dir.hpp"

namespace nanovm::daemon::vmdriver {

/// A VMM started for a sandbox.
struct Started {
    std::string vm_id;
    std::string dir;  ///< its VM directory
    pid_t pid = -1;
};

/// Starts a VMM (detached: it outlives the daemon) and waits until its agent
/// answers. Daemon sandboxes keep no fork standbys. Throws ApiError vm_error.
Started start(vm::SandboxSpec spec);

/// The files of VM `vm_id` in the daemon's run directory.
vm::VmPaths paths(const std::string& vm_id);

/// True while a VMM holds the VM's lock.
bool alive(const std::string& vm_id);

/// The VMM's pid from its vm.json (0 if unreadable).
pid_t pid(const std::string& vm_id);

/// One control request. Throws ApiError vm_error ("the VMM refused: ...", "does
/// not answer: ...").
nlohmann::json control(const std::string& vm_id, const std::string& command, const nlohmann::json& args = nullptr,
                       std::chrono::milliseconds timeout = std::chrono::seconds(10));

/// Stops the VMM at once (control "stop" forced; SIGKILL if it does not go within
/// 10 s). Never throws; returns false if it is still there.
bool stop(const std::string& vm_id) noexcept;

/// A connection to the guest agent. Throws ApiError vm_error.
agent::AgentClient agent(const std::string& vm_id, std::chrono::milliseconds timeout = std::chrono::seconds(10));

/// The end of the VMM's log (for why it died): "" if none.
std::string log_tail(const std::string& vm_id);

/// The root image file of an image name ("default", "tiny"): the disk
/// tools/rootfs/build made. Throws ApiError invalid_value for another name.
std::string image_path(const std::string& name);

}  // namespace nanovm::daemon::vmdriver
