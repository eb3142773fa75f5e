// virtio-mmio, version 2 ("modern"; virtio 1.2 §4.2.2): the registers through which
// the guest discovers one device, negotiates features, sets up its virtqueues and
// drives the device status state machine (§3.1.1, §2.1). Queue kicks arrive on one
// eventfd per queue (register them as KVM ioeventfds so QueueNotify writes never
// reach a vCPU thread; an MMIO write is handled too) and interrupts leave through one
// eventfd (register it as a KVM irqfd). The Linux guest learns of the device from
// `virtio_mmio.device=4K@<base>:<gsi>` on its command line.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "devices/bus_device.hpp"
#include "devices/virtio/device.hpp"
#include "devices/virtio/queue.hpp"
#include "vmm/event_loop.hpp"
#include "vmm/fd.hpp"
#include "vmm/guest_memory.hpp"
#include "vmm/log.hpp"

namespace nanovm::virtio {

/// The transport's own state (besides each queue's QueueState): what a snapshot
/// saves for the registers.
struct MmioTransportState {
    uint32_t status = 0;
    uint32_t device_features_sel = 0;
    uint32_t driver_features_sel = 0;
    uint64_t driver_features = 0;
    uint32_t queue_sel = 0;
    uint32_t interrupt_status = 0;
    uint32_t config_generation = 0;
};

/// One virtio device on a virtio-mmio window of kWindowSize bytes. Register it on the
/// MMIO bus at its base; not movable (the event loop holds pointers to it).
class MmioTransport : public BusDevice, private DeviceLink {
public:
    /// Offers `device` to the guest. Creates the per-queue notify eventfds and the
    /// interrupt eventfd and watches the notify ones on `loop`. Throws SysError.
    MmioTransport(VirtioDevice& device, GuestMemory& memory, EventLoop& loop);
    /// Resets the device (so no callback runs after) and stops watching.
    ~MmioTransport() override;
    MmioTransport(const MmioTransport&) = delete;
    MmioTransport& operator=(const MmioTransport&) = delete;

    void read(uint64_t offset, std::span<uint8_t> data) override;
    void write(uint64_t offset, std::span<const uint8_t> data) override;

    /// eventfd that the driver's kick of queue i must signal: register it as a KVM
    /// ioeventfd on base + kQueueNotify, 4 bytes, datamatch i.
    int notify_eventfd(uint16_t queue) const { return notify_fds_.at(queue).get(); }
    uint16_t queue_count() const noexcept { return static_cast<uint16_t>(queues_.size()); }
    /// eventfd that raises the device's interrupt: register it as a KVM irqfd on its GSI.
    int interrupt_eventfd() const noexcept { return irq_fd_.get(); }
    VirtioDevice& device() noexcept { return device_; }

    /// Device status as the driver sees it (Status register).
    uint32_t status() const noexcept { return status_.load(); }
    /// Whether the device is activated: from DRIVER_OK until the reset, failed since
    /// or not (a device that failed before DRIVER_OK is never activated). While it
    /// is, queue layout and readiness are fixed. Any thread.
    bool activated() const {
        std::lock_guard lock(mutex_);
        return active_ != nullptr;
    }
    /// Copies of the register state and the queues' state (for snapshots and tests).
    MmioTransportState state() const;
    std::vector<QueueState> queue_states() const;

    /// Takes the registers and queues a snapshot saved (state(), queue_states()), on
    /// a transport that the driver has not touched yet, the device's own state
    /// already loaded. If the saved status has DRIVER_OK (and not NEEDS_RESET) the
    /// device is activated on the loop thread as if the driver had just set it, and
    /// a saved pending interrupt is raised again (its irqfd edge may have been lost
    /// with the old process). The saved values are untrusted: queue count, sizes
    /// (power of two, <= QueueNumMax), ring alignment and placement in guest RAM,
    /// driver features (a subset of the offer, VERSION_1) are checked. Throws Error
    /// naming the device and what is wrong; the transport is then left reset.
    void load_state(const MmioTransportState& state, const std::vector<QueueState>& queues);

    /// The features offered: device bits | VERSION_1 | EVENT_IDX | INDIRECT_DESC.
    uint64_t offered_features() const noexcept { return offered_; }

private:
    // DeviceLink
    void signal_used() override;
    void signal_config_change() override;
    void fail(const std::string& why) override;
    bool failed() const override { return fail_reported_.load(); }

    uint32_t read_register(uint32_t offset);
    void write_register(uint32_t offset, uint32_t value);
    void write_status(uint32_t value);
    void reset_locked();
    /// Hands the device its ActiveDevice and calls activate() on the loop thread
    /// (mutex_ held); a failure fails the device with "<what_failed>: <why>".
    void activate_locked(const char* what_failed);
    void on_notify(uint16_t queue);
    void raise(uint32_t bits);
    Virtqueue* selected_queue();

    VirtioDevice& device_;
    GuestMemory& memory_;
    EventLoop& loop_;
    const uint64_t offered_;
    std::vector<Virtqueue> queues_;
    std::vector<Fd> notify_fds_;
    Fd irq_fd_;

    mutable std::mutex mutex_;  // register access from vCPU threads
    std::atomic<uint32_t> status_{0};
    std::atomic<uint32_t> interrupt_status_{0};
    std::atomic<uint32_t> config_generation_{0};
    std::atomic<bool> live_{false};  // activated after DRIVER_OK (set on the loop thread), not failed or reset
    std::atomic<bool> fail_reported_{false};  // fail() ran since the last reset
    uint32_t device_features_sel_ = 0;
    uint32_t driver_features_sel_ = 0;
    uint64_t driver_features_ = 0;
    uint32_t queue_sel_ = 0;
    /// From DRIVER_OK until reset, failed or not: while set, queue layout and
    /// readiness are fixed (the device may still complete I/O into the rings).
    std::unique_ptr<ActiveDevice> active_;
    RateLimiter log_limit_;
};

}  // namespace nanovm::virtio
