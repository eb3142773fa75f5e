// What the VMM process of one sandbox (`nanovm _vmm`, api/vm/vmm_process.hpp) is
// started with: by the launcher on its command line, or by a fork standby's claim
// (api/vm/standby_handoff.hpp) as JSON.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace nanovm::vm {

/// What `nanovm _vmm` is started with.
struct VmmOptions {
    std::string id;                 ///< the VM's id; its state directory exists
    /// The run directory holding that state directory (RunDir::root, absolute; empty:
    /// run_dir() from the environment).
    std::string run_dir;
    /// Leave the state directory (vmm.log, console.log, disk.ext4) when the VM ends,
    /// whatever the reason: the launcher's caller removes it (nanovmd, when the
    /// sandbox is deleted). Otherwise a guest that powered off or was stopped leaves
    /// nothing behind (unless NANOVM_KEEP_STATE=1).
    bool keep_dir = false;
    int lock_fd = -1;               ///< vmm.lock, flock'ed: held until the process exits
    int ready_fd = -1;              ///< the readiness pipe's write end (-1: none)
    /// A claimed standby's status pipe (standby_keeper.hpp), closed once the VM is
    /// ready or failed to be: its keeper makes the next standby only then (-1: none).
    int started_fd = -1;
    uint32_t cpus = 2;
    uint32_t memory_mib = 1024;
    std::string image;              ///< the root disk image, attached read-only
    std::vector<std::string> disks;  ///< extra --disk specs (/dev/vdc, ...)
    std::chrono::milliseconds boot_timeout{std::chrono::seconds(60)};
    /// Non-empty: restore this snapshot directory (absolute) instead of booting; the
    /// shape, image and disks then come from the snapshot. Before "ready" the guest is
    /// resynced by its agent: RNG reseeded, wall clock stepped, hostname = the id.
    std::string restore_dir;
    /// Boot cold over the disks the VM's directory keeps (boot.json with each
    /// writable disk at its current top, boot_record.hpp): a reboot in the same
    /// directory under the same id. The shape, image and disks then come from
    /// boot.json; restore_dir must be empty.
    bool reboot = false;
    std::string memory_backend = "file";  ///< "file" or "uffd" (snapshot::MemoryBackend)
    /// The guest's hostname (1-64 bytes of [A-Za-z0-9.-]): set by the agent's resync
    /// once the guest answers, after a boot as after a restore. Empty: a booted guest
    /// keeps guest-init's, a restored one takes the VM id.
    std::string hostname;
    /// With restore_dir (a fork base): the parent VMM's frozen memory layer as
    /// "PID:FD:INODE[,...]" (one per RAM region), opened through /proc/PID/fd/FD and
    /// mapped privately (snapshot/fork_image.hpp); memory_backend is then unused.
    std::string fork_memory;
    /// With fork_memory: the parent's delta (snapshot/fork_delta.hpp) as "PID:FD:INODE",
    /// applied over that layer; empty: none.
    std::string fork_delta;
    /// Standby VMMs this VM keeps for its forks once it is ready (0..kMaxForkStandby;
    /// api/vm/standby_keeper.hpp): each has this VM's shape made ahead in KVM, so a
    /// `vm fork` child that takes one skips the process start and the KVM set-up.
    uint32_t fork_standby = 1;
};

/// At most this many standbys per VM (vm fork -n takes at most 4 children).
inline constexpr uint32_t kMaxForkStandby = 4;

}  // namespace nanovm::vm
