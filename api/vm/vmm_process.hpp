// The VMM process of one sandbox (`nanovm run`, `nanovm vm start`): started by
// api/vm/launcher.cpp as the hidden command `nanovm _vmm`, it boots the default
// kernel with the root image read-only and shared, a fresh 16 GiB writable disk as
// the overlay's upper layer (guest-init: nanovm.overlay=/dev/vdb), virtio-vsock with
// the agent (nanovm.agent) and virtio-rng; serves the control socket; and removes the
// VM's state directory when the guest ends (unless VmmOptions::keep_dir). SIGPIPE is
// ignored from its first instruction: it never dies because its launcher did.
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

#include <memory>

#include "api/vm/state_dir.hpp"
#include "api/vm/vmm_options.hpp"
#include "snapshot/fork_image.hpp"
#include "vmm/machine.hpp"

namespace nanovm::vm {


/// The guest kernel parameters a sandbox boots with (besides the device ones): the
/// agent on its default port and the overlay root on the second disk.
inline constexpr const char* kSandboxParams = "nanovm.agent nanovm.overlay=/dev/vdb";

/// The run directory `options` names (VmmOptions::run_dir, else default_run_dir()).
RunDir vmm_run_dir(const VmmOptions& options);

/// run_vmm's status when the guest rebooted itself: its VM is to be booted again over
/// its disks (reboot_vm, launcher.hpp); the VMM does not do that by itself.
inline constexpr int kVmmExitReboot = 3;

/// Runs the VM until the guest ends. Returns the process exit status: 0 when the
/// guest powered off or was stopped on request, kVmmExitReboot (3) when it rebooted,
/// 1 otherwise (the reason is in vmm.log, or on the readiness pipe before ready).
/// Never throws.
int run_vmm(const VmmOptions& options);

/// run_vmm for a fork child or a restore whose Machine was made ahead by a standby
/// (api/vm/fork_standby.hpp; snapshot::make_fork_standby, with the parent's chain
/// served ahead for a restored parent): `options` must name a restore_dir (and
/// fork_memory for a fork); the standby is restored into instead of a new Machine.
int run_vmm(const VmmOptions& options, snapshot::ForkStandby standby);

}  // namespace nanovm::vm
