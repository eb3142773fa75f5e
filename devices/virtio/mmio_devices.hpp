// Where virtio devices live in a VM: the n-th device gets the 4 KiB virtio-mmio
// window at kVirtioMmioBase + n * 4 KiB (in the 32-bit MMIO hole, below the IOAPIC)
// and IOAPIC pin kFirstVirtioGsi + n; its queue kicks are KVM ioeventfds and its
// interrupt a KVM irqfd, so neither passes through a vCPU thread. The guest learns of
// each device from `virtio_mmio.device=4K@<base>:<gsi>` (Linux
// drivers/virtio/virtio_mmio.c, VIRTIO_MMIO_CMDLINE_DEVICES); Linux numbers block
// devices in that order, so the first disk added is /dev/vda.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "devices/bus.hpp"
#include "devices/virtio/device.hpp"
#include "devices/virtio/mmio_transport.hpp"
#include "vmm/event_loop.hpp"
#include "vmm/guest_memory.hpp"
#include "vmm/vm.hpp"

namespace nanovm::virtio {

/// GPA of the first virtio-mmio window (Firecracker uses the same hole).
inline constexpr uint64_t kVirtioMmioBase = 0xd0000000;
/// IOAPIC pin of the first device; pins 0-4 are the PIT, keyboard, cascade, COM2, COM1.
inline constexpr uint32_t kFirstVirtioGsi = 5;
/// Pins 5..23 of the 24-pin IOAPIC: at most 19 virtio devices per VM.
inline constexpr uint32_t kMaxVirtioDevices = 24 - kFirstVirtioGsi;

/// The kernel command-line parameter that declares device number `index`, e.g.
/// "virtio_mmio.device=4K@0xd0000000:5". Throws Error if index >= kMaxVirtioDevices.
std::string virtio_mmio_cmdline_param(uint32_t index);

/// The parameters of devices 0..count-1, space-separated: what the kernel command
/// line needs for `count` devices (known before the VM exists). Throws as above.
std::string virtio_mmio_cmdline(uint32_t count);

/// Owns a VM's virtio devices and their transports, in the order they were added.
/// Destroy it before the Vm, the GuestMemory and the EventLoop it was given (it
/// resets every device, so no device callback runs afterwards).
class MmioDevices {
public:
    MmioDevices(Vm& vm, GuestMemory& memory, MmioBus& bus, EventLoop& loop)
        : vm_(vm), memory_(memory), bus_(bus), loop_(loop) {}
    ~MmioDevices();
    MmioDevices(const MmioDevices&) = delete;
    MmioDevices& operator=(const MmioDevices&) = delete;

    /// Puts `device` in the next window: registers the transport on the MMIO bus, its
    /// queue notify eventfds as ioeventfds (4-byte writes of the queue index to
    /// QueueNotify) and its interrupt eventfd as an irqfd on its GSI. Returns the
    /// transport. Throws Error when all kMaxVirtioDevices windows are taken, SysError
    /// from KVM_IOEVENTFD / KVM_IRQFD.
    MmioTransport& add(std::unique_ptr<VirtioDevice> device);

    /// virtio_mmio_cmdline(size()): the declarations of every device added.
    std::string kernel_cmdline() const { return virtio_mmio_cmdline(static_cast<uint32_t>(slots_.size())); }
    size_t size() const noexcept { return slots_.size(); }
    MmioTransport& transport(size_t index) { return *slots_.at(index).transport; }

private:
    struct Slot {
        std::unique_ptr<VirtioDevice> device;
        std::unique_ptr<MmioTransport> transport;
        Gpa base;
        uint32_t gsi;
    };
    Vm& vm_;
    GuestMemory& memory_;
    MmioBus& bus_;
    EventLoop& loop_;
    std::vector<Slot> slots_;
};

}  // namespace nanovm::virtio
