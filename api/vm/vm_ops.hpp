// The operations on a running VM that go through its VMM's control socket
// (control_protocol.hpp; the commands are in vmm_process.hpp): status, pause,
// resume, snapshot, stop, and the two that start new VMMs, restore and fork. One
// function each, over the VM's paths, for both front ends (api/cli/vm_command.cpp,
// nanovmd). A library: nothing printed, nothing removed; every error is an exception
// whose what() is one line.
//
// Errors, besides those named per function:
//   VmStateError   the VM is not in a state the operation needs: not running (its
//                  VMM is gone: state() "dead", what() says why from its vmm.log),
//                  paused, booting or stopping (state() is the VMM's word for it).
//   ControlCommandError  the VMM refused the request (control_protocol.hpp): what()
//                  is its one-line reason ("snapshot /x: exists and is not empty...").
//   Error          the control socket does not answer ("control socket PATH: ...").
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/vm/launcher.hpp"
#include "api/vm/state_dir.hpp"
#include "vmm/error.hpp"

namespace nanovm::vm {

/// The VM is not in the state an operation needs.
class VmStateError : public Error {
public:
    VmStateError(const std::string& message, std::string state) : Error(message), state_(std::move(state)) {}
    /// "dead" (no VMM holds the VM), or the VMM's state: "paused", "booting", "stopping".
    const std::string& state() const noexcept { return state_; }

private:
    std::string state_;
};

/// The VMM's status answer without "ok": {"id", "pid", "state" (booting | running |
/// paused | stopping), "cpus", "memory_mib", "uptime_ms", "image", "vsock_socket",
/// "console_log"}. Throws VmStateError "dead" ("VM ID is not running (<vmm_end_reason>)")
/// when no VMM holds it, Error when it does not answer within `timeout`.
nlohmann::json vm_status(const VmPaths& paths, std::chrono::milliseconds timeout = std::chrono::seconds(5));

/// vm_status, then VmStateError unless the state is "running" ("VM ID is paused:
/// resume it first", state "paused"; "VM ID is booting", ...). For operations that
/// need the guest agent.
nlohmann::json require_running(const VmPaths& paths);

/// Pauses the vCPUs (memory and devices stay). Returns the VMM's answer {"state":
/// "paused", "pause_us": microseconds}. ControlCommandError when it is booting or
/// stopping; pausing a paused VM is not an error. `freeze_clock`: the guest's
/// kvmclock is set back at the resume to its value at the pause (the guest's
/// monotonic clock does not jump by the paused time; the daemon's warm VMs).
nlohmann::json pause_vm(const VmPaths& paths, bool freeze_clock = false);

/// Lets a paused VM's vCPUs run again. Returns {"state": "running", "resume_us"}.
nlohmann::json resume_vm(const VmPaths& paths);

/// What snapshot_vm is asked for.
struct SnapshotRequest {
    std::string dir;            ///< the snapshot directory: absolute, missing or empty
    bool wait_durable = false;  ///< return once it is on stable storage (fsync'd)
    bool leave_paused = false;  ///< leave the VM paused afterwards
};

/// What snapshot_vm did.
struct SnapshotResult {
    std::string dir;
    bool durable = false;     ///< on stable storage already (always with wait_durable)
    double snapshot_ms = 0;   ///< request -> the VM running again (or left paused)
    double pause_ms = 0;      ///< how long the vCPUs stood still
    double durable_ms = -1;   ///< with wait_durable: request -> durable; else -1
    std::string state;        ///< the VM's state afterwards: running | paused
    nlohmann::json answer;    ///< the VMM's whole answer (vmm_process.hpp), without "ok"
};

/// Snapshots the VM into request.dir (memory, disk, devices, running processes);
/// the rest is written in the background unless wait_durable (snapshot::is_durable
/// tells later). Waits up to `timeout` for the answer. Throws Error for a relative
/// or empty dir (nothing sent), ControlCommandError (dir not empty, disk full...).
SnapshotResult snapshot_vm(const VmPaths& paths, const SnapshotRequest& request,
                           std::chrono::milliseconds timeout = std::chrono::minutes(30));

/// How stop_vm stops it.
struct StopRequest {
    bool force = false;  ///< stop the vCPUs at once, no guest power-off
    /// How long the guest may take to power off before the VMM forces it (0: at once).
    std::chrono::milliseconds grace{std::chrono::seconds(10)};
};

/// How stop_vm went.
struct StopResult {
    bool was_running = true;  ///< false: no VMM held the VM already
    bool killed = false;      ///< the VMM did not go on request: it got SIGKILL
    std::string note;         ///< killed: why, one line ("the stop request failed (...)")
};

/// Stops the VM's VMM and waits until it is gone (grace + 10 s, then SIGKILL and 5 s
/// more). Its directory stays (the VMM removes it itself after a clean stop unless
/// keep_dir; a caller that wants it gone calls remove_if_dead). Throws Error only
/// when the VMM still holds the VM after the SIGKILL.
StopResult stop_vm(const VmPaths& paths, const StopRequest& request = {});

/// Starts a new VM from the snapshot directory `dir` (start_vm with
/// spec.restore_dir = dir; the shape, image and disks come from the snapshot, the
/// other fields of `spec` as for start_vm: run_dir, keep_dir, fork_standby,
/// memory_backend, boot_timeout). Throws what start_vm throws.
StartedVm restore_vm(SandboxSpec spec, const std::string& dir, bool attached = false, int signal_fd = -1);

/// What fork_vm is asked for.
struct ForkRequest {
    uint32_t count = 1;  ///< children, 1..4
    /// How each child starts: keep_dir, fork_standby, boot_timeout (run_dir is
    /// fork_vm's `run`; restore_dir, fork_memory, fork_delta and standby_sockets are
    /// the fork's).
    SandboxSpec child;
};

/// Why a child of a fork did not start.
struct ForkFailure {
    std::string error;                 ///< one line (StartError::what() and the like)
    std::vector<std::string> console;  ///< StartError::console(): the guest console's last lines
};

/// One child of a fork: started, or why not.
using ForkChild = std::variant<StartedVm, ForkFailure>;

/// What fork_vm made.
struct ForkResult {
    /// The fork base (<run>/forks/<parent id>-<random>/snapshot): vm.state, disk
    /// layers and manifest the children's disks read from. Each child holds it
    /// (hold_fork_base); clean_unused_fork_bases removes it once nobody does.
    std::string base_dir;
    nlohmann::json answer;           ///< the parent VMM's fork answer (fork_ms, pause_ms...)
    std::vector<ForkChild> children;  ///< in order, request.count of them
};

/// Forks the running (or paused) VM `parent` into request.count new VMs in `run`: the parent
/// freezes its disks and RAM into a fork base and runs on; the children start from
/// it at once (in parallel; each takes one of the parent's standbys if one is free)
/// in run. Returns once every child is ready or failed. Throws Error for a count
/// outside 1..4, VmStateError, ControlCommandError (the parent's fork failed: then no
/// child is started and the base is removed).
ForkResult fork_vm(const RunDir& run, const VmPaths& parent, const ForkRequest& request);

}  // namespace nanovm::vm
