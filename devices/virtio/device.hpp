// The contract between a virtio device (blk, net, vsock, rng) and the transport that
// puts it on the guest's bus (devices/virtio/mmio_transport.hpp). The transport owns
// the registers, feature negotiation, the status state machine, the virtqueues and
// the interrupt; the device owns what its queues mean. The core never names a device.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "devices/virtio/queue.hpp"
#include "vmm/event_loop.hpp"
#include "vmm/guest_memory.hpp"

namespace nanovm::virtio {

/// What a live device uses to talk back to the driver. Implemented by the transport.
class DeviceLink {
public:
    virtual ~DeviceLink() = default;
    /// Interrupts the driver for used buffers (InterruptStatus bit 0). Call it when
    /// Virtqueue::needs_interrupt() says so; any thread.
    virtual void signal_used() = 0;
    /// The device's configuration space changed: bumps ConfigGeneration and
    /// interrupts the driver (InterruptStatus bit 1). Any thread.
    virtual void signal_config_change() = 0;
    /// The guest broke the rules (a QueueError, a malformed request): sets
    /// DEVICE_NEEDS_RESET, logs `why` once, and stops delivering queue kicks until the
    /// driver resets the device. Any thread.
    virtual void fail(const std::string& why) = 0;
    /// True after fail() until the driver resets the device.
    virtual bool failed() const = 0;
};

/// Given to a device when the driver sets DRIVER_OK (virtio 1.2 §3.1.1 step 8).
/// Valid until the device's reset() returns.
struct ActiveDevice {
    GuestMemory& memory;
    std::span<Virtqueue> queues;  ///< all of the device's queues; use only the ready ones
    uint64_t features;            ///< what the driver accepted (a subset of the offer)
    DeviceLink& link;
    EventLoop& loop;              ///< the thread every device callback runs on
};

/// One virtio device model. activate(), queue_notify() and reset() are called on
/// the event-loop thread, so a device is single-threaded unless it says otherwise;
/// the config-space and feature calls come from vCPU threads and read only data
/// the device keeps constant or guards itself.
class VirtioDevice {
public:
    virtual ~VirtioDevice() = default;
    /// virtio device id (virtio 1.2 §5, devices/virtio/virtio_spec.hpp).
    virtual uint32_t device_id() const = 0;
    /// Short name for messages ("virtio-blk vda").
    virtual std::string name() const = 0;
    /// Feature bits offered. The transport adds VIRTIO_F_VERSION_1 and may add
    /// EVENT_IDX and INDIRECT_DESC itself; devices list only their own bits.
    virtual uint64_t device_features() const = 0;
    /// QueueNumMax of each queue, in queue order (powers of two).
    virtual std::vector<uint16_t> queue_max_sizes() const = 0;
    /// Guest read of the device configuration space (offset from its start). Bytes
    /// past the end read as zero (the transport fills `data` with zeros first).
    virtual void read_config(uint64_t offset, std::span<uint8_t> data) const = 0;
    /// Guest write of the configuration space; ignored unless a device allows it.
    virtual void write_config(uint64_t /*offset*/, std::span<const uint8_t> /*data*/) {}
    /// The driver is ready (DRIVER_OK). Start serving the queues. May throw
    /// QueueError (the transport then fails the device) or Error.
    virtual void activate(ActiveDevice& active) = 0;
    /// The driver kicked queue `queue` (its ioeventfd fired). May throw QueueError.
    virtual void queue_notify(uint16_t queue) = 0;
    /// The driver reset the device (Status = 0) or the VM is going away: stop all
    /// work, wait for in-flight I/O, forget the ActiveDevice. Must not throw.
    virtual void reset() noexcept = 0;
};

}  // namespace nanovm::virtio
