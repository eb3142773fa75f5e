// The manager's one door to the VM layer (api/vm/ as a library: launcher, vm_ops,
// guest_ops, adopt; and api/agent_client/): start a VMM in the daemon's run
// directory, drive it through its control socket, reach its guest agent, stop it,
// re-attach to it after a restart. Failures come out as ApiError (vm_error with the
// VM layer's own one-line reason; disk_full for ENOSPC), so the manager never sees
// the VM layer's exception types. VM directories are the daemon's: a VMM leaves its
// directory when it ends (keep_dir), and only the store's collection removes it.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/agent_client/agent_client.hpp"
#include "api/vm/adopt.hpp"
#include "api/vm/launcher.hpp"
#include "api/vm/state_dir.hpp"

namespace nanovm::daemon {

class VmDriver {
public:
    /// VMs live in <state_dir>/vms, fork bases in <state_dir>/forks.
    explicit VmDriver(const std::string& state_dir) : run_{state_dir} {}

    /// A VMM started for a sandbox.
    struct Started {
        std::string vm_id;
        std::string dir;  ///< its VM directory
        pid_t pid = -1;
        bool from_standby = false;  ///< a restore that went into a pre-made VMM
    };

    /// Boots a VM of `cpus` x `memory_mib` from root image `image` (a file), or with
    /// `restore_dir` restores that snapshot (offered first to the pre-made VMMs at
    /// `standby_sockets`, SandboxSpec::standby_sockets); returns once its agent
    /// answers, the guest's hostname set to `hostname` (the sandbox id; empty: the VM
    /// layer's default). No fork standbys. Throws ApiError vm_error with the reason
    /// (and the guest console's last line for a guest that died booting).
    Started start(uint32_t cpus, uint32_t memory_mib, const std::string& image, const std::string& restore_dir = "",
                  const std::vector<std::string>& standby_sockets = {}, const std::string& hostname = "");

    /// One fork child: started, or why not.
    struct ForkChild {
        Started started;  ///< vm_id empty: failed
        std::string error;
    };
    /// Forks VM `vm_id` into `n` children; the fork base is <forks>/<...>/snapshot.
    struct Fork {
        std::string base_root;  ///< the fork base's own directory (users.lock and snapshot/)
        std::string base_dir;   ///< its snapshot directory
        std::vector<ForkChild> children;
    };
    Fork fork(const std::string& vm_id, uint32_t n);

    /// The files of VM `vm_id`. Throws ApiError internal for an id that is not one.
    vm::VmPaths paths(const std::string& vm_id) const;
    /// True while a VMM holds the VM.
    bool alive(const std::string& vm_id) const;
    /// The VMM's pid from its vm.json (0 if unknown).
    pid_t pid(const std::string& vm_id) const;
    /// Whether a live, ready VMM holds the VM now (after a daemon restart).
    vm::Adoption adopt(const std::string& vm_id) const;
    /// Why its VMM ended (from vmm.log), one line.
    std::string end_reason(const std::string& vm_id) const;

    /// Boots the dead VM `vm_id` cold again in its own directory over the disks it
    /// kept (vm::reboot_vm): memory and processes are gone, its disks are not.
    /// Returns once its agent answers. Throws ApiError vm_error with the reason.
    Started reboot(const std::string& vm_id);
    /// True when the VMM of `vm_id` ended because its guest rebooted itself (its
    /// vmm.log's last "VM ... ended: reboot" line).
    bool ended_in_reboot(const std::string& vm_id) const;

    /// `freeze_clock`: vm::pause_vm's (the guest's clocks do not count the pause: a
    /// warm VM's and a sleeping sandbox's; its wall clock is stepped after the resume).
    void pause(const std::string& vm_id, bool freeze_clock = false);
    /// True when the VMM set the guest's clock back to its pause (a freeze_clock
    /// pause): the guest's wall clock is behind by the time paused until a RESYNC.
    bool resume(const std::string& vm_id);
    /// Snapshots into `dir` (absolute, missing); returns whether it is durable.
    bool snapshot(const std::string& vm_id, const std::string& dir, bool wait_durable, bool leave_paused);
    /// Stops the VMM at once (no guest power-off; SIGKILL if it does not go).
    /// Never throws; false if it is still there.
    bool stop(const std::string& vm_id) noexcept;
    /// A connection to the guest agent (the VM must be running).
    agent::AgentClient agent(const std::string& vm_id, std::chrono::milliseconds timeout = std::chrono::seconds(10));
    /// The VM directories in the run directory (for VMMs no record names).
    std::vector<vm::VmPaths> vm_dirs() const;

    /// The root image file of an image name ("default", "tiny"): the disk
    /// tools/rootfs/build made. Throws ApiError invalid_value for another name.
    static std::string image_path(const std::string& name);

private:
    vm::RunDir run_;
};

}  // namespace nanovm::daemon
