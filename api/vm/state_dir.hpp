// Where a running VM keeps its files: a run directory, chosen by the caller (the CLI:
// run_dir(), from the environment; nanovmd: its state directory), holds one state
// directory per VM and the fork bases,
//
//   <run dir>/vms/<id>/
//     vmm.lock      flock(2)ed by the VMM process for its whole life: "alive" means
//                   "someone holds this lock" (no pid to go stale or be reused)
//     vm.json       what the VMM wrote at start (VmInfo: pid, shape, image)
//     control.sock  the VMM's control socket (api/vm/control_protocol.hpp)
//     vsock.sock    the host side of the VM's virtio-vsock (the agent: port 1024)
//     console.log   the guest's serial console
//     vmm.log       the VMM process's own messages (its stderr)
//     disk.ext4     the VM's 16 GiB sparse writable disk (the overlay's upper layer)
//     boot.json     what the VM booted with, for a reboot over its disks (boot_record.hpp)
//   <run dir>/forks/<parent id>-<random id>/   a fork base (ForkBase)
//
// A VMM whose guest powered off or was stopped removes its directory when it ends,
// unless its launcher asked it to keep it (VmmOptions::keep_dir: nanovmd removes a
// sandbox's directory when the sandbox is deleted). A directory whose lock nobody holds
// was left by a VMM that died; removing it is the caller's decision:
// clean_stale_vm_dirs() (`nanovm vm start|run|list` call it; nanovmd never does).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "vmm/fd.hpp"

namespace nanovm::vm {

/// The CLI's run directory: $NANOVM_RUN_DIR, else $XDG_RUNTIME_DIR/nanovm, else
/// <cache_dir()>/run (api/vm/paths.hpp).
std::string run_dir();

/// The files of one VM's state directory.
struct VmPaths {
    std::string id;
    std::string dir;

    std::string lock_file() const { return dir + "/vmm.lock"; }
    std::string info_file() const { return dir + "/vm.json"; }
    std::string control_socket() const { return dir + "/control.sock"; }
    std::string vsock_socket() const { return dir + "/vsock.sock"; }
    std::string console_log() const { return dir + "/console.log"; }
    std::string vmm_log() const { return dir + "/vmm.log"; }
    std::string disk() const { return dir + "/disk.ext4"; }
    std::string boot_file() const { return dir + "/boot.json"; }
};

/// A run directory (see the top of this file). `root` should be absolute: a VMM
/// process is handed it, and runs in another working directory.
struct RunDir {
    std::string root;

    /// <root>/vms: one directory per VM.
    std::string vms() const { return root + "/vms"; }
    /// <root>/forks: the fork bases.
    std::string forks() const { return root + "/forks"; }
    /// <root>/crashed: the logs of VMs that crashed, kept when clean-up removes their
    /// directories (<id>-vmm.log, <id>-console.log; the newest kCrashLogsKept).
    std::string crashed() const { return root + "/crashed"; }
    /// The paths of VM `id` under vms() (no check that it exists).
    VmPaths vm(const std::string& id) const { return VmPaths{id, vms() + "/" + id}; }
};

/// RunDir{run_dir()}, made absolute.
RunDir default_run_dir();

/// What the VMM records about itself in vm.json when it starts.
struct VmInfo {
    std::string id;
    int64_t pid = 0;
    uint32_t cpus = 0;
    uint32_t memory_mib = 0;
    int64_t created_unix_ms = 0;  ///< wall clock, ms since the epoch
    std::string image;            ///< the root disk image (read-only, shared)

    bool operator==(const VmInfo&) const = default;
};

/// vm.json's text (one JSON object).
std::string to_json(const VmInfo& info);
/// Parses vm.json. Throws Error("vm.json: <what is wrong>") for anything malformed.
VmInfo parse_vm_info(std::string_view text);
/// Writes `info` to `path` atomically (temp file + rename). Throws SysError.
void write_vm_info(const std::string& path, const VmInfo& info);
/// Reads and parses `path`. Throws SysError (e.g. ENOENT) or Error.
VmInfo read_vm_info(const std::string& path);

/// A new VM's state directory, already locked.
struct NewVmDir {
    VmPaths paths;
    Fd lock;  ///< holds vmm.lock (flock LOCK_EX); the VMM process inherits it
};

/// Creates <run.vms()>/<fresh id>/ (mode 0700, parents as needed) with its lock held:
/// made as a hidden ".new-<id>" directory, locked, then renamed into place, so no
/// other nanovm ever sees it unlocked. Throws Error when the run directory cannot be
/// made or its socket paths would not fit a sockaddr_un (108 bytes: "run directory
/// R: too long ... (at most N characters fit); set NANOVM_RUN_DIR to a shorter path").
NewVmDir create_vm_dir(const RunDir& run);

/// Locks the existing directory of a dead VM for a new VMM (a reboot over its
/// disks): its lock held (flock LOCK_EX, not waiting). Throws Error "VM ID is still
/// running" when a VMM holds it, "no VM ID" when the directory is gone; SysError.
NewVmDir lock_vm_dir(const VmPaths& paths);

/// True while a VMM holds the VM's lock. False when the lock file is missing.
bool vmm_alive(const VmPaths& paths);

/// The VM directories under run.vms(), sorted by id (names that are not ids are
/// skipped). Empty when there is no run directory yet.
std::vector<VmPaths> list_vm_dirs(const RunDir& run);

/// Resolves what a user typed: a full id or a unique prefix of one. Throws Error
/// with one line: "NOT-AN-ID: not a VM id (12 hex digits, or a unique prefix)",
/// "no VM abc (nanovm vm list shows the VMs)", "ab: ambiguous: ab12..., ab34...".
VmPaths find_vm(const RunDir& run, std::string_view text);

/// Removes a VM directory and everything in it. Never throws.
void remove_vm_dir(const VmPaths& paths) noexcept;

/// The last `max_lines` whole lines of the file at `path`, read from at most its last
/// `max_bytes` (a line cut by that window is dropped); {} if it cannot be read. For
/// showing the end of a log (vmm.log, console.log) whatever its size. Never throws.
std::vector<std::string> file_tail(const std::string& path, size_t max_lines, size_t max_bytes = 64 * 1024) noexcept;

/// The last lines of VM `paths`'s vmm.log (at most `max_lines` lines from its last
/// 2 KiB, joined with " | "), for saying why a VMM died before its directory goes;
/// "" if there is no log. Never throws.
std::string vmm_log_tail(const VmPaths& paths, size_t max_lines = 3) noexcept;

/// Removes the directory of VM `paths` if no VMM holds its lock (taking the lock
/// first, so a live VM is never touched). Returns true if it removed it.
bool remove_if_dead(const VmPaths& paths);

/// True when NANOVM_KEEP_STATE=1: a VM's directory (vmm.log, console.log) is kept
/// after its VMM ends, for a post-mortem, until `vm start|run|list` clean up.
bool keep_state_requested() noexcept;

/// How many crashed VMs' logs RunDir::crashed() keeps (the newest by time).
inline constexpr size_t kCrashLogsKept = 16;

/// Removes every dead VM's directory under `run`, hidden ".new-*" leftovers older
/// than 10 minutes (a nanovm killed while creating one) and the fork bases nobody
/// holds (clean_unused_fork_bases). Returns the ids removed. A VM whose vmm.log says
/// it ended in a crash ("ended: crash") has its vmm.log and console.log copied to
/// run.crashed() first, so that the next `vm start` does not erase the evidence.
/// Only when the caller decides: nothing in the VM layer calls it.
std::vector<std::string> clean_stale_vm_dirs(const RunDir& run);

/// A fork's shared snapshot (nanovm vm fork): <run.forks()>/<parent id>-<random id>/
/// holds `users.lock` and the snapshot directory `snapshot/`. Every VMM whose disks
/// or memory come from it holds a shared flock on users.lock for its life
/// (hold_fork_base); the whole base is removed by clean_unused_fork_bases once nobody
/// holds it. `lock` is the creator's own shared hold.
struct ForkBase {
    std::string dir;  ///< the snapshot directory (<base>/snapshot, not created yet)
    Fd lock;
};

/// Creates a new, empty fork base directory (0700) and its users.lock, held shared.
/// Throws SysError naming the path.
ForkBase new_fork_base(const RunDir& run, const std::string& parent_id);

/// If `dir` is a fork's snapshot directory (<run.forks()>/<name>/snapshot), takes a
/// shared flock on its base's users.lock and returns the fd to keep open; else an
/// invalid Fd. Throws SysError.
Fd hold_fork_base(const RunDir& run, const std::string& dir);

/// Removes every fork base under `run` that no process holds. Never throws. (A
/// caller whose snapshots name files of a fork base, as nanovmd's do, keeps its own
/// count instead of calling this.)
void clean_unused_fork_bases(const RunDir& run) noexcept;

}  // namespace nanovm::vm
