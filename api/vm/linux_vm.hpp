// One Linux guest as BootOptions describe it, built and ready to run: guest memory
// with the kernel (and initramfs) loaded, the KVM machine with its vCPUs set up for
// the Linux boot protocol, the legacy devices (serial console, i8042, RTC, control
// port) and the virtio devices. `nanovm boot` (api/cli/boot_command.cpp) and the VMM
// process of `nanovm run` / `nanovm vm start` (api/vm/vmm_process.cpp) both build
// their guest with it and add only what differs (host console, control socket).
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/vm/boot_options.hpp"
#include "devices/legacy/control_port.hpp"
#include "snapshot/fork_image.hpp"
#include "snapshot/snapshot_dir.hpp"
#include "vmm/machine.hpp"
#include "vmm/stop_reason.hpp"

namespace nanovm {

class Serial;

/// What LinuxVm::start_snapshot needs besides the directory.
struct LinuxSnapshotRequest {
    std::string dir;  ///< the snapshot directory (created if missing)
    /// The owner's description of the VM (shape, image, ...), kept in vm.state and
    /// handed back to the restore's make_options as saved["config"].
    nlohmann::json config;
    /// Where writable disk `index` (bus order) continues after the freeze: a new
    /// top layer file that must not exist yet (e.g. in the VM's state directory).
    std::function<std::string(size_t index)> new_top_path;
    /// false: a fork base, written without any fsync (snapshot::SnapshotContent::sync).
    bool sync = true;
};

/// A built Linux guest. Not copyable or movable.
class LinuxVm {
public:
    /// Validates `options` (shape, images), loads the kernel and initramfs, checks the
    /// disk paths, then opens /dev/kvm and creates the machine and its devices.
    /// Guest serial output goes to `console_fd` (not owned; it must outlive the VM).
    /// Throws Error with one line for the user: a bad option, a missing kernel (with
    /// the command that builds it), no /dev/kvm, a PVM /dev/kvm, or the KVM ioctl
    /// that failed.
    LinuxVm(const BootOptions& options, int console_fd);

    /// Restores the snapshot in `dir` (snapshot::restore_snapshot: memory with
    /// `backend`, vCPU and irqchip state), then builds the devices from the options
    /// that `make_options` derives from what the snapshot saved (saved["config"] is
    /// LinuxSnapshotRequest::config, saved["disks"][i]["frozen"] the path of disk
    /// i's frozen top layer, or null for read-only disks, and ["frozen_kind"] "layer"
    /// or "raw" (the first freeze of a raw image freezes the image itself)) and loads their state.
    /// The kernel is not loaded and the vCPUs are not set up: they continue where
    /// the snapshot left them. Throws SnapshotError naming a corrupt part, Error for
    /// device state that does not fit the options.
    /// With `fork_memfds` (a fork child): `dir` is a fork base (LinuxVm::fork) and
    /// the RAM a private mapping of those memfds (snapshot::restore_fork) with the
    /// delta `fork_delta` applied if >= 0; `backend` is not used. With `standby` (a
    /// Machine of the snapshot's shape made ahead, snapshot::make_fork_standby) the
    /// snapshot or fork is restored into it (snapshot::restore_snapshot(standby, ...),
    /// restore_fork(standby, ...)) instead of a new one; a chain it serves ahead is
    /// used by a fork over that chain and dropped otherwise.
    LinuxVm(const std::string& dir, snapshot::MemoryBackend backend,
            const std::function<BootOptions(const nlohmann::json& saved)>& make_options, int console_fd,
            std::span<const int> fork_memfds = {}, int fork_delta = -1, snapshot::ForkStandby standby = {});
    ~LinuxVm();
    LinuxVm(const LinuxVm&) = delete;
    LinuxVm& operator=(const LinuxVm&) = delete;

    /// The machine: pause(), resume() and request_stop() from other threads.
    Machine& machine() noexcept;
    /// The guest's first serial port (console input).
    Serial& com1() noexcept;
    /// What serves a restored VM's RAM on first touch (its counters), or nullptr.
    snapshot::UffdServer* uffd() noexcept;
    /// True for a fork child made in a standby that served its parent's chain ahead
    /// (snapshot::StandbyChain; the claim only moved that userfaultfd registration).
    bool chain_served_ahead() const noexcept;
    /// Runs the guest until it ends (Machine::run).
    StopReason run();
    /// How the guest ended: the stop reason read with guest-init's announcement.
    GuestOutcome outcome(const StopReason& reason) const;
    /// Device counters as JSON (VmDevices::stats_json).
    std::string stats_json() const;

    /// Takes a snapshot of the paused VM (Machine::pause first; it stays paused):
    /// with the device thread held (disks drained), freezes each writable disk's top
    /// layer (O(1): new writes go to request.new_top_path(i)), saves device and
    /// vCPU state and starts the memory copy (snapshot::start_full_snapshot,
    /// background). The returned snapshot places the frozen disk layers that live
    /// in the VM's own directory into request.dir (hard link, or a sparse copy
    /// across file systems) before writing the manifest. The VM may resume as soon
    /// as this returns. Throws Error/SysError/SnapshotError; the VM is unchanged
    /// apart from disks already frozen (harmless: a new top over the old one).
    /// Once the snapshot has placed its layers, a disk whose run of frozen layers in
    /// the VM's own directory (the new top's) reached DiskCompactor::kCompactAtLayers
    /// is compacted in the background (one thread, logged to the VMM log; a failure
    /// leaves the chain as it was). A running compaction is waited for first.
    std::unique_ptr<snapshot::PendingSnapshot> start_snapshot(const LinuxSnapshotRequest& request);

    /// Forks the paused VM (Machine::pause first; it stays paused): with the device
    /// thread held (disks drained), freezes each writable disk's top layer as
    /// start_snapshot does and freezes guest RAM as the shared layer
    /// (snapshot::freeze_for_fork: from now on this VM writes private copies over
    /// it). Writes request.dir as a fork base: vm.state, the frozen disk layers of
    /// the VM's own directory, the manifest; nothing fsync'd (request.sync is not
    /// read), no memory layer: children restore it with the returned memfds
    /// (LinuxVm's restore constructor with `fork_memfds`). Throws Error/SysError/
    /// SnapshotError; if the RAM freeze failed the VM is as before but for frozen disks.
    snapshot::ForkImage fork(const LinuxSnapshotRequest& request);

    /// Waits for a running background compaction of the disks' layer chains
    /// (disk_compactor.hpp) to end. start_snapshot waits for one too: call this first,
    /// before pausing the VM, so that the wait is not part of the pause. Any thread.
    void wait_compaction();

    /// Every file the disks read: each disk's layer chain, top first (a raw disk: its image).
    std::vector<std::string> disk_files() const;

private:
    struct Parts;
    struct DeviceCapture;
    /// Freezes the writable disks' top layers and saves the devices' state (device
    /// thread held: inside run_quiesced).
    DeviceCapture capture_devices(const LinuxSnapshotRequest& request);

    std::unique_ptr<Parts> parts_;
};

}  // namespace nanovm
