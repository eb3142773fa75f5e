// Starting a sandbox's VMM process (api/vm/vmm_process.hpp), for the CLI and nanovmd:
// checks what can be checked before forking (shape, kernel, root image, /dev/kvm) so
// that the common mistakes are one clear line, creates the VM's state directory in
// the caller's run directory, forks and re-executes this nanovm binary as the hidden
// `nanovm _vmm`, and waits until the guest agent answers. A library: it prints
// nothing, and removes nothing but the directory of a VM that failed to start (and
// not even that with SandboxSpec::keep_dir); stale directories of other VMs are the
// caller's (clean_stale_vm_dirs).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "api/vm/state_dir.hpp"
#include "vmm/error.hpp"

namespace nanovm::vm {

/// What a sandbox is started with.
struct SandboxSpec {
    /// The run directory (RunDir::root) the VM's directory is made in; empty:
    /// run_dir() from the environment. Made absolute for the VMM.
    std::string run_dir;
    /// The VM's directory is the caller's: the VMM leaves it when the VM ends
    /// (VmmOptions::keep_dir), and a failed start leaves it too (StartError::paths),
    /// so vmm.log and console.log can be read; the caller removes it (remove_vm_dir).
    bool keep_dir = false;
    uint32_t cpus = 2;          ///< 1..4
    uint32_t memory_mib = 1024;  ///< 128..8192
    std::string image;           ///< root disk image; empty: default_root_image()
    std::vector<std::string> disks;  ///< extra disks: PATH[,ro][,serial=ID]
    std::chrono::milliseconds boot_timeout{std::chrono::seconds(60)};
    /// Non-empty: restore this snapshot directory instead of booting (cpus, memory,
    /// image and disks then come from the snapshot and the fields above are ignored).
    std::string restore_dir;
    std::string memory_backend = "file";  ///< restore only: "file" or "uffd"
    std::string hostname;  ///< VmmOptions::hostname (nanovmd: the sandbox id, kept across its restores)
    /// restore_dir is a fork base: the parent's frozen RAM as VmmOptions::fork_memory says.
    std::string fork_memory;
    std::string fork_delta;  ///< with fork_memory: VmmOptions::fork_delta
    /// With restore_dir: standby sockets (a fork child: its parent's,
    /// standby_sockets(), oldest first; a restore: standbys of the snapshot's shape);
    /// the VM goes to the first that takes it (standby_handoff.hpp), else a new VMM
    /// process starts as usual.
    std::vector<std::string> standby_sockets;
    /// Standbys the new VM keeps for its own forks (VmmOptions::fork_standby, 0..4; 0:
    /// none, as nanovmd's sandboxes).
    uint32_t fork_standby = 1;
};

/// <cache_dir()>/rootfs/default/disk.ext4, the image tools/rootfs/build makes.
std::string default_root_image();

/// A started VMM.
struct StartedVm {
    VmPaths paths;
    pid_t pid = -1;
    bool from_standby = false;  ///< a fork child that went to a standby (not a child of this process)
};

/// Why a VM did not start (what() is one line: the VMM's error, or "the VM did not
/// start within N s", or the end of its vmm.log).
class StartError : public Error {
public:
    StartError(const std::string& message, VmPaths paths, std::vector<std::string> console)
        : Error(message), paths_(std::move(paths)), console_(std::move(console)) {}
    /// The VM's directory (removed already, unless SandboxSpec::keep_dir).
    const VmPaths& paths() const noexcept { return paths_; }
    /// The guest console's last lines (up to 25), oldest first: a kernel panic's reason.
    const std::vector<std::string>& console() const noexcept { return console_; }

private:
    VmPaths paths_;
    std::vector<std::string> console_;
};

/// Starts a VMM for a new VM (or hands a fork child to one of the parent's
/// standbys, see SandboxSpec::standby_sockets) and returns once its agent answers
/// (within spec.boot_timeout + 30 s). With `attached` the VMM gets SIGTERM when
/// this process dies (nanovm run); otherwise it lives on by itself (nanovm vm start,
/// nanovmd: it outlives the caller, and ignores SIGPIPE, so a caller that dies
/// while it boots does not take it along). Either way it runs in its own session, so
/// a Ctrl-C on this terminal does not reach it. A termination signal that arrives
/// on `signal_fd` (a signalfd, or -1) meanwhile stops the VMM and throws
/// Interrupted. Thread-safe (nanovmd and `vm fork` start several at once). Throws
/// Error with one line before anything is made (a bad shape, no kernel, no image,
/// no /dev/kvm, a snapshot that is not complete), StartError once the VMM was
/// started and failed, SysError (pipe2, fork).
StartedVm start_vm(const SandboxSpec& spec, bool attached, int signal_fd = -1);

/// Boots the dead VM `paths` cold again in its own directory, under its own id, over
/// the disks it kept (boot.json with each writable disk at its current top,
/// boot_record.hpp): memory and processes are gone, every byte written to its
/// disks is there (what the guest had not synced may not be). A reboot: of a VM
/// whose guest rebooted or crashed, or that was stopped for one. The shape and disks
/// come from boot.json; of `spec` only boot_timeout and fork_standby count. The
/// directory is never removed, not even when the boot fails (its vmm.log says why).
/// Returns once the agent answers, as start_vm. Throws Error before anything starts
/// ("VM ID is still running", no boot.json: "...boot.json: No such file or
/// directory", layers that do not fit), StartError once the VMM was started and failed.
StartedVm reboot_vm(const VmPaths& paths, const SandboxSpec& spec, bool attached, int signal_fd = -1);

/// A termination signal arrived while waiting.
struct Interrupted {
    int signal;
};

/// Waits up to `timeout` for the VMM with `pid` (a child of this process) to exit,
/// then SIGKILLs it (silently). Returns its wait status (0 if it is not a child).
int reap_vmm(pid_t pid, std::chrono::milliseconds timeout);

/// Waits up to `timeout` until no VMM holds the lock of `paths` (polls every 10 ms).
bool wait_vmm_gone(const VmPaths& paths, std::chrono::milliseconds timeout);

}  // namespace nanovm::vm
