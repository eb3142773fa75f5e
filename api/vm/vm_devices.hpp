// The virtio devices of one VM as the CLI options describe them, in the order the
// guest sees them: the --disk images (/dev/vda, vdb, ...), the --scratch disk, the
// --net tap, the --vsock socket, then virtio-rng. The kernel command line that
// declares them can be made before KVM is touched (virtio_cmdline), the devices
// themselves once the Machine exists (VmDevices).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "api/vm/boot_options.hpp"
#include <nlohmann/json.hpp>

#include "devices/bus.hpp"
#include "devices/virtio/mmio_devices.hpp"
#include "vmm/event_loop.hpp"
#include "vmm/machine.hpp"

namespace nanovm {

namespace virtio::blk {
class BlockDevice;
}

/// How many virtio devices `options` asks for.
size_t virtio_device_count(const BootOptions& options);

/// The virtio_mmio.device=... parameters for those devices, space-separated.
std::string virtio_cmdline(const BootOptions& options);

/// Checks, before KVM is touched, that every --root/--disk image exists and is a
/// regular file or block device, so a wrong path is the error a user sees first.
/// Throws Error("--disk PATH: No such file or directory").
void check_disk_paths(const BootOptions& options);

/// Creates the devices of `options` on `machine` (MMIO windows, ioeventfds, irqfds),
/// all served by one EventLoop thread. Opens the disk images (creating the scratch
/// disk sparse if missing), the tap and the vsock socket. Throws Error / SysError
/// naming the option and path that failed. Destroy it before the Machine.
class VmDevices {
public:
    VmDevices(const BootOptions& options, Machine& machine, MmioBus& mmio);
    ~VmDevices();
    VmDevices(const VmDevices&) = delete;
    VmDevices& operator=(const VmDevices&) = delete;

    size_t size() const noexcept { return devices_.size(); }
    /// Device counters as one JSON object: {"disks": [{"path", "read_only", "reads",
    /// "writes", "flushes", ...}], "rng": {...}, ...}.
    std::string stats_json() const;

    /// Runs `work` on the device thread after draining every disk (in-flight
    /// requests completed and returned to the driver, avail rings emptied), so that
    /// no device touches guest memory or its rings until `work` returns. Call with
    /// the vCPUs paused (Machine::pause): then the devices and guest memory are at
    /// one instant for the whole of `work` (snapshots). Rethrows what `work` throws.
    void run_quiesced(const std::function<void()>& work);
    /// The state of every device (vm_devices_state.cpp has the layout). Inside
    /// run_quiesced. Throws Error if a device cannot be saved.
    nlohmann::json save_state();
    /// Loads a saved state into devices made from the same options, before the
    /// vCPUs run: device structs, then transports (activating what the driver had
    /// activated); then the vsock device queues a TRANSPORT_RESET. Throws Error
    /// naming the device and what does not fit.
    void load_state(const nlohmann::json& state);
    /// The disks in bus order (/dev/vda first).
    const std::vector<virtio::blk::BlockDevice*>& disks() const noexcept { return disks_; }

private:
    EventLoop loop_;  // before devices_: it must outlive them
    virtio::MmioDevices devices_;
    std::vector<virtio::blk::BlockDevice*> disks_;
    const virtio::VirtioDevice* net_ = nullptr;
    virtio::VirtioDevice* vsock_ = nullptr;
    const virtio::VirtioDevice* rng_ = nullptr;
};

}  // namespace nanovm
