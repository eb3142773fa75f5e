// The VMM process of one sandbox (`nanovm run`, `nanovm vm start`): started by
// api/vm/launcher.cpp as the hidden command `nanovm _vmm`, it boots the default
// kernel with the root image read-only and shared, a fresh 16 GiB writable disk as
// the overlay's upper layer (guest-init: nanovm.overlay=/dev/vdb), virtio-vsock with
// the agent (nanovm.agent) and virtio-rng; serves the control socket; and removes the
// VM's state directory when the guest ends.
//
// Readiness: the launcher gives it the write end of a pipe. Once the guest agent
// answers a PING the VMM writes "ready\n"; if the VM fails first it writes
// "error <one line>\n", then the last guest console lines as "console <line>\n",
// and exits. Either way it closes the pipe.
//
// Control commands (control_protocol.hpp):
//   status                   {"id", "pid", "state", "cpus", "memory_mib", "uptime_ms",
//                             "image", "vsock_socket", "console_log"}
//                            state: booting | running | paused | stopping
//   pause                    vCPUs out of KVM_RUN; {"state": "paused", "pause_us"}
//   resume                   {"state": "running", "resume_us"}
//   snapshot dir [leave_paused] [wait_durable]
//                            pauses (unless paused), drains the devices, freezes the
//                            writable disk, saves vCPU/device state, freezes the RAM
//                            (snapshot/frozen_ram.hpp) or write-protects it, and resumes
//                            (unless leave_paused); the layer is written after that;
//                            {"dir", "snapshot_ms" (request -> running again), "pause_ms",
//                             "state", "background", "frozen", "durable", "durable_ms"
//                             (with wait_durable)}. `dir` must be
//                            absolute and missing or empty.
//   fork dir                 pauses (unless paused), drains the devices, freezes the
//                            writable disk and guest RAM (snapshot/fork_image.hpp: the
//                            RAM becomes a shared sealed layer; this VM goes on over a
//                            private copy-on-write mapping of it), writes the fork base
//                            `dir` (vm.state, disk layers, manifest; no fsync) and
//                            resumes; {"dir", "memfds" ("PID:FD:INODE,...", for the
//                            children's fork_memory), "delta" (same form or "": the
//                            pages of a VM already over a frozen layer, fork_delta),
//                            "delta_pages", "fork_ms", "pause_ms", "copied_pages", "state"}.
//   stop [force] [timeout_ms]  graceful: the agent powers the guest off; after
//                            timeout_ms (default 10000) or with force: the VMM stops the
//                            vCPUs at once. Answers {"state": "stopping"} right away.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace nanovm::vm {

/// What `nanovm _vmm` is started with.
struct VmmOptions {
    std::string id;                 ///< the VM's id; its state directory exists
    int lock_fd = -1;               ///< vmm.lock, flock'ed: held until the process exits
    int ready_fd = -1;              ///< the readiness pipe's write end (-1: none)
    uint32_t cpus = 2;
    uint32_t memory_mib = 1024;
    std::string image;              ///< the root disk image, attached read-only
    std::vector<std::string> disks;  ///< extra --disk specs (/dev/vdc, ...)
    std::chrono::milliseconds boot_timeout{std::chrono::seconds(60)};
    /// Non-empty: restore this snapshot directory (absolute) instead of booting; the
    /// shape, image and disks then come from the snapshot. Before "ready" the guest is
    /// resynced by its agent: RNG reseeded, wall clock stepped, hostname = the id.
    std::string restore_dir;
    std::string memory_backend = "file";  ///< "file" or "uffd" (snapshot::MemoryBackend)
    /// With restore_dir (a fork base): the parent VMM's frozen memory layer as
    /// "PID:FD:INODE[,...]" (one per RAM region), opened through /proc/PID/fd/FD and
    /// mapped privately (snapshot/fork_image.hpp); memory_backend is then unused.
    std::string fork_memory;
    /// With fork_memory: the parent's delta (snapshot/fork_delta.hpp) as "PID:FD:INODE",
    /// applied over that layer; empty: none.
    std::string fork_delta;
};

/// The guest kernel parameters a sandbox boots with (besides the device ones): the
/// agent on its default port and the overlay root on the second disk.
inline constexpr const char* kSandboxParams = "nanovm.agent nanovm.overlay=/dev/vdb";

/// Runs the VM until the guest ends. Returns the process exit status: 0 when the
/// guest powered off or was stopped on request, 1 otherwise (the reason is in
/// vmm.log, or on the readiness pipe before ready). Never throws.
int run_vmm(const VmmOptions& options);

}  // namespace nanovm::vm
