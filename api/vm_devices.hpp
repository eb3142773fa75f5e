// The virtio devices of one VM as the CLI options describe them, in the order the
// guest sees them: the --disk images (/dev/vda, vdb, ...), the --scratch disk, the
// --net tap, the --vsock socket, then virtio-rng. The kernel command line that
// declares them can be made before KVM is touched (virtio_cmdline), the devices
// themselves once the Machine exists (VmDevices).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "api/boot_command.hpp"
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

private:
    EventLoop loop_;  // before devices_: it must outlive them
    virtio::MmioDevices devices_;
    std::vector<const virtio::blk::BlockDevice*> disks_;
    const virtio::VirtioDevice* net_ = nullptr;
    virtio::VirtioDevice* vsock_ = nullptr;
    const virtio::VirtioDevice* rng_ = nullptr;
};

}  // namespace nanovm
