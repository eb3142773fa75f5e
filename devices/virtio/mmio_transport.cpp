#include "devices/virtio/mmio_transport.hpp"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "vmm/error.hpp"

namespace nanovm::virtio {

namespace {

constexpr uint64_t kTransportFeatures = feature::kVersion1 | feature::kRingEventIdx | feature::kRingIndirectDesc;

Fd make_eventfd() {
    Fd fd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (!fd) throw_errno("eventfd");
    return fd;
}

uint32_t low32(uint64_t v) { return static_cast<uint32_t>(v); }
uint32_t high32(uint64_t v) { return static_cast<uint32_t>(v >> 32); }
void set_low32(uint64_t& v, uint32_t x) { v = (v & ~0xffffffffull) | x; }
void set_high32(uint64_t& v, uint32_t x) { v = (v & 0xffffffffull) | (uint64_t{x} << 32); }

}  // namespace

MmioTransport::MmioTransport(VirtioDevice& device, GuestMemory& memory, EventLoop& loop)
    : device_(device), memory_(memory), loop_(loop), offered_(device.device_features() | kTransportFeatures) {
    const std::vector<uint16_t> sizes = device.queue_max_sizes();
    if (sizes.empty() || sizes.size() > 64) throw Error(fmt::format("{}: {} queues", device.name(), sizes.size()));
    for (size_t i = 0; i < sizes.size(); ++i) {
        queues_.emplace_back(static_cast<uint16_t>(i), sizes[i]);
        notify_fds_.push_back(make_eventfd());
    }
    irq_fd_ = make_eventfd();
    for (size_t i = 0; i < notify_fds_.size(); ++i) {
        const auto queue = static_cast<uint16_t>(i);
        loop_.add(notify_fds_[i].get(), EPOLLIN, [this, queue](uint32_t) { on_notify(queue); });
    }
}

MmioTransport::~MmioTransport() {
    live_ = false;
    for (const Fd& fd : notify_fds_) loop_.remove(fd.get());
    if (active_) loop_.run_sync([this] { device_.reset(); });
}

MmioTransportState MmioTransport::state() const {
    std::lock_guard lock(mutex_);
    return {status_.load(),   device_features_sel_,       driver_features_sel_, driver_features_,
            queue_sel_,       interrupt_status_.load(),   config_generation_.load()};
}

std::vector<QueueState> MmioTransport::queue_states() const {
    std::vector<QueueState> out;
    for (const Virtqueue& q : queues_) out.push_back(q.state());
    return out;
}

void MmioTransport::load_state(const MmioTransportState& state, const std::vector<QueueState>& queues) {
    std::lock_guard lock(mutex_);
    if (status_.load() != 0 || active_) throw Error(fmt::format("{}: load_state on a transport in use", device_.name()));
    const auto refuse = [&](const std::string& why) {
        reset_locked();
        return Error(fmt::format("{}: saved transport state refused: {}", device_.name(), why));
    };
    if (queues.size() != queues_.size())
        throw refuse(fmt::format("{} queues saved, the device has {}", queues.size(), queues_.size()));
    constexpr uint32_t kKnownStatus = status::kAcknowledge | status::kDriver | status::kFeaturesOk |
                                      status::kDriverOk | status::kDeviceNeedsReset | status::kFailed;
    if (state.status & ~kKnownStatus) throw refuse(fmt::format("unknown status bits {:#x}", state.status));
    const bool features_ok = (state.status & status::kFeaturesOk) != 0;
    if (features_ok && ((state.driver_features & ~offered_) != 0 || !(state.driver_features & feature::kVersion1)))
        throw refuse(fmt::format("driver features {:#x} not within the offer {:#x}", state.driver_features, offered_));
    const bool event_idx = features_ok && (state.driver_features & feature::kRingEventIdx);
    const bool indirect = features_ok && (state.driver_features & feature::kRingIndirectDesc);
    for (size_t i = 0; i < queues.size(); ++i) {
        Virtqueue& q = queues_[i];
        const QueueState& saved = queues[i];
        if (saved.size == 0 || saved.size > q.max_size() || (saved.size & (saved.size - 1)) != 0)
            throw refuse(fmt::format("queue {}: size {} (max {}, a power of two)", i, saved.size, q.max_size()));
        if (saved.ready && !features_ok) throw refuse(fmt::format("queue {}: ready before FEATURES_OK", i));
        if (saved.event_idx != event_idx || saved.indirect != indirect)
            throw refuse(fmt::format("queue {}: ring features differ from the driver's", i));
        q.state() = saved;
        if (saved.ready) {
            try {
                q.check_layout(memory_);
            } catch (const QueueError& e) {
                throw refuse(e.what());
            }
        }
    }
    device_features_sel_ = state.device_features_sel;
    driver_features_sel_ = state.driver_features_sel;
    driver_features_ = state.driver_features;
    queue_sel_ = state.queue_sel;
    config_generation_ = state.config_generation;
    interrupt_status_ = state.interrupt_status & (mmio::kInterruptUsedRing | mmio::kInterruptConfigChange);
    status_ = state.status;
    if (state.status & status::kDeviceNeedsReset) {
        fail_reported_ = true;  // it stays failed until the driver resets it
    } else if (state.status & status::kDriverOk) {
        activate_locked("activation after restore failed");
        // A kick the driver made just before the snapshot may have been left unread in
        // the old VMM's ioeventfd. With VIRTIO_F_EVENT_IDX the driver does not kick again
        // for buffers past the avail_event it already crossed (virtio 1.2 §2.7.10), so
        // that queue would wait forever: replay one kick per ready queue. A device that
        // finds nothing new in its ring does nothing (§2.7.13: notifications are hints).
        if (live_) {
            const uint64_t one = 1;
            for (size_t i = 0; i < queues_.size(); ++i) {
                if (!queues_[i].state().ready) continue;
                [[maybe_unused]] const ssize_t n = ::write(notify_fds_[i].get(), &one, sizeof(one));
            }
        }
    }
    if (interrupt_status_.load() != 0) {
        const uint64_t one = 1;
        [[maybe_unused]] const ssize_t n = ::write(irq_fd_.get(), &one, sizeof(one));
    }
}

Virtqueue* MmioTransport::selected_queue() { return queue_sel_ < queues_.size() ? &queues_[queue_sel_] : nullptr; }

void MmioTransport::read(uint64_t offset, std::span<uint8_t> data) {
    std::fill(data.begin(), data.end(), uint8_t{0});
    if (offset >= mmio::kConfig) {
        device_.read_config(offset - mmio::kConfig, data);
        return;
    }
    if (data.size() != 4 || offset % 4 != 0) {
        uint64_t suppressed = 0;
        if (log_limit_.allow(suppressed))
            log_line(fmt::format("{}: {}-byte read at register {:#x} ignored (registers are 32-bit)", device_.name(),
                                 data.size(), offset));
        return;
    }
    std::lock_guard lock(mutex_);
    const uint32_t value = read_register(static_cast<uint32_t>(offset));
    std::memcpy(data.data(), &value, 4);
}

void MmioTransport::write(uint64_t offset, std::span<const uint8_t> data) {
    if (offset >= mmio::kConfig) {
        device_.write_config(offset - mmio::kConfig, data);
        return;
    }
    if (data.size() != 4 || offset % 4 != 0) {
        uint64_t suppressed = 0;
        if (log_limit_.allow(suppressed))
            log_line(fmt::format("{}: {}-byte write at register {:#x} ignored (registers are 32-bit)", device_.name(),
                                 data.size(), offset));
        return;
    }
    uint32_t value;
    std::memcpy(&value, data.data(), 4);
    std::lock_guard lock(mutex_);
    write_register(static_cast<uint32_t>(offset), value);
}

uint32_t MmioTransport::read_register(uint32_t offset) {
    Virtqueue* q = selected_queue();
    switch (offset) {
        case mmio::kMagicValue: return mmio::kMagic;
        case mmio::kVersion: return mmio::kVersionModern;
        case mmio::kDeviceId: return device_.device_id();
        case mmio::kVendorId: return mmio::kVendor;
        case mmio::kDeviceFeatures:
            return device_features_sel_ == 0 ? low32(offered_) : device_features_sel_ == 1 ? high32(offered_) : 0;
        case mmio::kQueueNumMax: return q ? q->max_size() : 0;
        case mmio::kQueueNum: return q ? q->state().size : 0;
        case mmio::kQueueReady: return q && q->state().ready ? 1 : 0;
        case mmio::kInterruptStatus: return interrupt_status_.load();
        case mmio::kStatus: return status_.load();
        case mmio::kQueueDescLow: return q ? low32(q->state().desc_table) : 0;
        case mmio::kQueueDescHigh: return q ? high32(q->state().desc_table) : 0;
        case mmio::kQueueDriverLow: return q ? low32(q->state().avail_ring) : 0;
        case mmio::kQueueDriverHigh: return q ? high32(q->state().avail_ring) : 0;
        case mmio::kQueueDeviceLow: return q ? low32(q->state().used_ring) : 0;
        case mmio::kQueueDeviceHigh: return q ? high32(q->state().used_ring) : 0;
        case mmio::kShmLenLow:
        case mmio::kShmLenHigh: return 0xffffffff;  // no shared memory regions (§4.2.2: length -1)
        case mmio::kConfigGeneration: return config_generation_.load();
        default: return 0;
    }
}

void MmioTransport::write_register(uint32_t offset, uint32_t value) {
    Virtqueue* q = selected_queue();
    const uint32_t st = status_.load();
    // Queue layout may change only while the queue is not ready and the device not
    // activated. Activated, not live: a device that failed (NEEDS_RESET) is no longer
    // live but still owns its queues (I/O in flight completes against them) until
    // the driver resets it.
    const auto queue_writable = [&](const char* reg) {
        if (!q) return false;
        if (q->state().ready || active_) {
            uint64_t suppressed = 0;
            if (log_limit_.allow(suppressed))
                log_line(fmt::format("{}: {} of live queue {} ignored", device_.name(), reg, queue_sel_));
            return false;
        }
        return true;
    };
    switch (offset) {
        case mmio::kDeviceFeaturesSel: device_features_sel_ = value; return;
        case mmio::kDriverFeaturesSel: driver_features_sel_ = value; return;
        case mmio::kDriverFeatures:
            if (st & status::kFeaturesOk) return;  // §3.1.1: fixed once FEATURES_OK is set
            if (driver_features_sel_ == 0) set_low32(driver_features_, value);
            if (driver_features_sel_ == 1) set_high32(driver_features_, value);
            return;
        case mmio::kQueueSel: queue_sel_ = value; return;
        case mmio::kQueueNum:
            if (queue_writable("QueueNum")) q->state().size = static_cast<uint16_t>(std::min<uint32_t>(value, 0xffff));
            return;
        case mmio::kQueueDescLow: if (queue_writable("QueueDescLow")) set_low32(q->state().desc_table, value); return;
        case mmio::kQueueDescHigh: if (queue_writable("QueueDescHigh")) set_high32(q->state().desc_table, value); return;
        case mmio::kQueueDriverLow: if (queue_writable("QueueDriverLow")) set_low32(q->state().avail_ring, value); return;
        case mmio::kQueueDriverHigh: if (queue_writable("QueueDriverHigh")) set_high32(q->state().avail_ring, value); return;
        case mmio::kQueueDeviceLow: if (queue_writable("QueueDeviceLow")) set_low32(q->state().used_ring, value); return;
        case mmio::kQueueDeviceHigh: if (queue_writable("QueueDeviceHigh")) set_high32(q->state().used_ring, value); return;
        case mmio::kQueueReady:
            if (!q) return;
            if (active_) {  // readiness is fixed from DRIVER_OK until the reset (see queue_writable)
                if (value != (q->state().ready ? 1u : 0u)) {
                    uint64_t suppressed = 0;
                    if (log_limit_.allow(suppressed))
                        log_line(fmt::format("{}: QueueReady={} of queue {} ignored while the device is active",
                                             device_.name(), value, queue_sel_));
                }
                return;
            }
            if (value == 1 && !q->state().ready) {
                try {
                    q->check_layout(memory_);
                    q->state().ready = true;
                } catch (const QueueError& e) {
                    fail(e.what());
                }
            } else if (value == 0) {
                q->state().ready = false;
            }
            return;
        case mmio::kQueueNotify:
            // Normally caught by the ioeventfd in KVM; without one it arrives here.
            if (value < notify_fds_.size()) {
                const uint64_t one = 1;
                [[maybe_unused]] const ssize_t n = ::write(notify_fds_[value].get(), &one, sizeof(one));
            }
            return;
        case mmio::kInterruptAck: interrupt_status_.fetch_and(~value); return;
        case mmio::kStatus: write_status(value); return;
        default: {
            uint64_t suppressed = 0;
            if (log_limit_.allow(suppressed))
                log_line(fmt::format("{}: write {:#x} to register {:#x} ignored", device_.name(), value, offset));
        }
    }
}

void MmioTransport::write_status(uint32_t value) {
    if (value == 0) {
        reset_locked();
        return;
    }
    const uint32_t old = status_.load();
    if ((value & old) != (old & ~status::kDeviceNeedsReset)) {
        uint64_t suppressed = 0;
        if (log_limit_.allow(suppressed))
            log_line(fmt::format("{}: status {:#x} -> {:#x} clears bits without a reset; ignored", device_.name(), old,
                                 value));
        return;
    }
    // Only the driver's own bits (§2.1): DEVICE_NEEDS_RESET is the device's to set, and
    // unknown bits would make the transport's saved state unrestorable (load_state
    // refuses them) and could pass for a device failure.
    constexpr uint32_t kDriverBits =
        status::kAcknowledge | status::kDriver | status::kFeaturesOk | status::kDriverOk | status::kFailed;
    if (value & ~kDriverBits & ~old) {
        uint64_t suppressed = 0;
        if (log_limit_.allow(suppressed))
            log_line(fmt::format("{}: status bits {:#x} are not the driver's to set; ignored", device_.name(),
                                 value & ~kDriverBits & ~old));
    }
    uint32_t added = value & ~old & kDriverBits;
    if (added & status::kFeaturesOk) {
        const bool subset = (driver_features_ & ~offered_) == 0;
        const bool modern = (driver_features_ & feature::kVersion1) != 0;
        if (!subset || !modern) {
            log_line(fmt::format("{}: driver features {:#x} refused ({})", device_.name(), driver_features_,
                                 !subset ? "not offered" : "no VIRTIO_F_VERSION_1"));
            added &= ~status::kFeaturesOk;  // §3.1.1 step 5: the driver sees it unset and gives up
        } else {
            for (Virtqueue& q : queues_) {
                q.state().event_idx = (driver_features_ & feature::kRingEventIdx) != 0;
                q.state().indirect = (driver_features_ & feature::kRingIndirectDesc) != 0;
            }
        }
    }
    if ((added & status::kDriverOk) && !((old | added) & status::kFeaturesOk)) {
        fail("DRIVER_OK without FEATURES_OK");
        return;
    }
    status_.fetch_or(added);
    if ((added & status::kDriverOk) && !failed()) activate_locked("activation failed");
}

void MmioTransport::activate_locked(const char* what_failed) {
    active_ = std::make_unique<ActiveDevice>(ActiveDevice{memory_, queues_, driver_features_, *this, loop_});
    try {
        // live_ turns true on the loop thread right after activate(): a kick still
        // pending from before DRIVER_OK must not reach the device ahead of activate().
        loop_.run_sync([this] {
            device_.activate(*active_);
            live_ = !failed();
        });
    } catch (const std::exception& e) {
        fail(fmt::format("{}: {}", what_failed, e.what()));
    }
}

void MmioTransport::reset_locked() {
    live_ = false;
    if (active_) {
        loop_.run_sync([this] { device_.reset(); });
        active_.reset();
    }
    for (Virtqueue& q : queues_) q.reset();
    fail_reported_ = false;
    status_ = 0;
    interrupt_status_ = 0;
    device_features_sel_ = driver_features_sel_ = queue_sel_ = 0;
    driver_features_ = 0;
}

void MmioTransport::on_notify(uint16_t queue) {
    uint64_t count;
    [[maybe_unused]] const ssize_t n = ::read(notify_fds_[queue].get(), &count, sizeof(count));
    if (!live_ || failed() || !queues_[queue].state().ready) return;
    try {
        device_.queue_notify(queue);
    } catch (const std::exception& e) {
        fail(e.what());
    }
}

void MmioTransport::raise(uint32_t bits) {
    interrupt_status_.fetch_or(bits);
    const uint64_t one = 1;
    [[maybe_unused]] const ssize_t n = ::write(irq_fd_.get(), &one, sizeof(one));
}

void MmioTransport::signal_used() { raise(mmio::kInterruptUsedRing); }

void MmioTransport::signal_config_change() {
    config_generation_.fetch_add(1);
    raise(mmio::kInterruptConfigChange);
}

void MmioTransport::fail(const std::string& why) {
    live_ = false;
    if (fail_reported_.exchange(true)) return;  // logged and signalled once per failure
    log_line(fmt::format("{}: {}; device needs reset", device_.name(), why));
    // §2.1.2: set DEVICE_NEEDS_RESET and send a configuration change notification. The
    // generation and interrupt status change first, so whoever sees the status bit
    // also sees the notification.
    config_generation_.fetch_add(1);
    interrupt_status_.fetch_or(mmio::kInterruptConfigChange);
    status_.fetch_or(status::kDeviceNeedsReset);
    const uint64_t one = 1;
    [[maybe_unused]] const ssize_t n = ::write(irq_fd_.get(), &one, sizeof(one));
}

}  // namespace nanovm::virtio
