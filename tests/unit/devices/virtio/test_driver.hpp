// A minimal virtio driver for tests: lays out split virtqueues in simulated guest
// memory (GuestMemory::create needs no KVM), brings a device up through its
// virtio-mmio registers like Linux's virtio_mmio.c does, posts descriptor chains and
// collects used elements. Buffers come from a bump allocator in guest RAM.
#pragma once

#include <sys/eventfd.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <thread>
#include <vector>

#include "devices/virtio/mmio_transport.hpp"
#include "devices/virtio/virtio_spec.hpp"
#include "vmm/guest_memory.hpp"

namespace nanovm::test {

/// One buffer of a chain to post: device-readable bytes, or a device-writable length.
struct TestBuffer {
    std::vector<uint8_t> bytes;  ///< readable contents (ignored when writable)
    uint32_t writable_len = 0;   ///< > 0: a device-writable buffer of this many bytes
    static TestBuffer in(std::vector<uint8_t> b) { return {std::move(b), 0}; }
    static TestBuffer out(uint32_t len) { return {{}, len}; }
};

/// Driver-side view of one split virtqueue in guest memory.
class TestQueue {
public:
    /// Rings for `size` entries at `base` (needs 16 * size + 6 + 2 * size + 6 + 8 * size bytes).
    TestQueue(GuestMemory& memory, uint16_t size, uint64_t base)
        : memory_(memory), size_(size), desc_(base), avail_(base + 16ull * size),
          used_((avail_ + 6 + 2ull * size + 3) & ~3ull) {}

    uint16_t size() const { return size_; }
    uint64_t desc_table() const { return desc_; }
    uint64_t avail_ring() const { return avail_; }
    uint64_t used_ring() const { return used_; }

    /// Writes descriptor `index` of the table.
    void set_descriptor(uint16_t index, virtio::Descriptor d) { memory_.write(Gpa(desc_ + 16ull * index), d); }
    /// Publishes `head` in the avail ring and bumps avail.idx.
    void publish(uint16_t head) {
        memory_.write(Gpa(avail_ + 4 + 2ull * (avail_idx_ % size_)), head);
        ++avail_idx_;
        memory_.write(Gpa(avail_ + 2), avail_idx_);
    }
    /// Sets avail.idx directly (to test bogus indices).
    void set_avail_idx(uint16_t idx) {
        avail_idx_ = idx;
        memory_.write(Gpa(avail_ + 2), idx);
    }
    uint16_t used_idx() const { return memory_.read<uint16_t>(Gpa(used_ + 2)); }
    virtio::UsedElement used(uint16_t i) const {
        return memory_.read<virtio::UsedElement>(Gpa(used_ + 4 + 8ull * (i % size_)));
    }
    void set_avail_flags(uint16_t flags) { memory_.write(Gpa(avail_), flags); }
    void set_used_event(uint16_t v) { memory_.write(Gpa(avail_ + 4 + 2ull * size_), v); }
    uint16_t avail_event() const { return memory_.read<uint16_t>(Gpa(used_ + 4 + 8ull * size_)); }

private:
    GuestMemory& memory_;
    uint16_t size_;
    uint64_t desc_, avail_, used_;
    uint16_t avail_idx_ = 0;
};

/// Drives one MmioTransport like a guest driver would, from the test's thread.
class TestDriver {
public:
    /// Rings go at `ring_base`, buffers are allocated from `buffer_base` upwards.
    TestDriver(GuestMemory& memory, virtio::MmioTransport& transport, uint64_t ring_base = 0x10000,
               uint64_t buffer_base = 0x100000)
        : memory_(memory), transport_(transport), ring_base_(ring_base), next_buffer_(buffer_base) {}

    uint32_t reg(uint32_t offset) {
        uint32_t v = 0;
        transport_.read(offset, {reinterpret_cast<uint8_t*>(&v), 4});
        return v;
    }
    void set_reg(uint32_t offset, uint32_t v) { transport_.write(offset, {reinterpret_cast<uint8_t*>(&v), 4}); }

    /// Device features as the driver reads them (both halves).
    uint64_t device_features() {
        set_reg(virtio::mmio::kDeviceFeaturesSel, 0);
        uint64_t f = reg(virtio::mmio::kDeviceFeatures);
        set_reg(virtio::mmio::kDeviceFeaturesSel, 1);
        return f | (uint64_t{reg(virtio::mmio::kDeviceFeatures)} << 32);
    }

    /// The virtio 1.2 §3.1.1 initialisation: reset, ACKNOWLEDGE, DRIVER, features
    /// (`features`, or everything offered), FEATURES_OK, the queues with `queue_size`
    /// entries (0 = each queue's max), DRIVER_OK. Returns false if FEATURES_OK is refused.
    bool bring_up(std::optional<uint64_t> features = {}, uint16_t queue_size = 0) {
        using namespace virtio;
        set_reg(mmio::kStatus, 0);
        set_reg(mmio::kStatus, status::kAcknowledge);
        set_reg(mmio::kStatus, status::kAcknowledge | status::kDriver);
        const uint64_t want = features ? *features : device_features();
        set_reg(mmio::kDriverFeaturesSel, 0);
        set_reg(mmio::kDriverFeatures, static_cast<uint32_t>(want));
        set_reg(mmio::kDriverFeaturesSel, 1);
        set_reg(mmio::kDriverFeatures, static_cast<uint32_t>(want >> 32));
        set_reg(mmio::kStatus, status::kAcknowledge | status::kDriver | status::kFeaturesOk);
        if (!(reg(mmio::kStatus) & status::kFeaturesOk)) return false;
        queues_.clear();
        uint64_t base = ring_base_;
        for (uint16_t i = 0; i < transport_.queue_count(); ++i) {
            set_reg(mmio::kQueueSel, i);
            const uint16_t size = queue_size ? queue_size : static_cast<uint16_t>(reg(mmio::kQueueNumMax));
            // Fresh, zeroed rings, as a driver allocating them anew would have.
            const uint64_t ring_bytes = (26ull * size + 4096 + 4095) & ~4095ull;
            memory_.write_bytes(Gpa(base), std::vector<uint8_t>(ring_bytes, 0));
            next_desc_[i] = 0;
            queues_.emplace_back(memory_, size, base);
            const TestQueue& q = queues_.back();
            set_reg(mmio::kQueueNum, size);
            set_reg(mmio::kQueueDescLow, static_cast<uint32_t>(q.desc_table()));
            set_reg(mmio::kQueueDescHigh, static_cast<uint32_t>(q.desc_table() >> 32));
            set_reg(mmio::kQueueDriverLow, static_cast<uint32_t>(q.avail_ring()));
            set_reg(mmio::kQueueDriverHigh, static_cast<uint32_t>(q.avail_ring() >> 32));
            set_reg(mmio::kQueueDeviceLow, static_cast<uint32_t>(q.used_ring()));
            set_reg(mmio::kQueueDeviceHigh, static_cast<uint32_t>(q.used_ring() >> 32));
            set_reg(mmio::kQueueReady, 1);
            base += ring_bytes;
        }
        set_reg(mmio::kStatus, status::kAcknowledge | status::kDriver | status::kFeaturesOk | status::kDriverOk);
        return true;
    }

    TestQueue& queue(uint16_t i) { return queues_.at(i); }

    /// Copies `bytes` into fresh guest RAM; returns its GPA.
    uint64_t alloc(uint64_t len, const void* bytes = nullptr) {
        const uint64_t gpa = next_buffer_;
        next_buffer_ = (next_buffer_ + len + 15) & ~15ull;
        if (bytes && len) memory_.write_bytes(Gpa(gpa), {static_cast<const uint8_t*>(bytes), len});
        return gpa;
    }

    /// Posts `buffers` as one chain of direct descriptors starting at descriptor
    /// `first` (consecutive indices); returns the head and the writable buffers' GPAs.
    struct Posted {
        uint16_t head;
        std::vector<uint64_t> writable_gpas;
    };
    Posted post(uint16_t queue, const std::vector<TestBuffer>& buffers, std::optional<uint16_t> first = {}) {
        TestQueue& q = queues_.at(queue);
        uint16_t& next = next_desc_[queue];
        const uint16_t head = first ? *first : next;
        Posted posted{head, {}};
        for (size_t i = 0; i < buffers.size(); ++i) {
            const TestBuffer& b = buffers[i];
            const uint16_t index = static_cast<uint16_t>((head + i) % q.size());
            virtio::Descriptor d{};
            if (b.writable_len) {
                d.addr = alloc(b.writable_len);
                d.len = b.writable_len;
                d.flags = virtio::desc_flags::kWrite;
                posted.writable_gpas.push_back(d.addr);
            } else {
                d.addr = alloc(b.bytes.size(), b.bytes.data());
                d.len = static_cast<uint32_t>(b.bytes.size());
            }
            if (i + 1 < buffers.size()) {
                d.flags |= virtio::desc_flags::kNext;
                d.next = static_cast<uint16_t>((index + 1) % q.size());
            }
            q.set_descriptor(index, d);
        }
        next = static_cast<uint16_t>((head + buffers.size()) % q.size());
        q.publish(head);
        return posted;
    }

    /// Kicks `queue` (QueueNotify), as the guest's virtqueue_notify does.
    void kick(uint16_t queue) { set_reg(virtio::mmio::kQueueNotify, queue); }

    /// Waits up to `timeout` for the device to publish used index >= `idx` on `queue`.
    bool wait_used(uint16_t queue, uint16_t idx, std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
        const auto end = std::chrono::steady_clock::now() + timeout;
        while (static_cast<int16_t>(queues_.at(queue).used_idx() - idx) < 0) {
            if (std::chrono::steady_clock::now() > end) return false;
            std::this_thread::sleep_for(std::chrono::microseconds(200));
        }
        return true;
    }

    /// Interrupts the device raised so far (reads and clears its irq eventfd).
    uint64_t take_interrupts() {
        uint64_t n = 0;
        if (::read(transport_.interrupt_eventfd(), &n, sizeof(n)) != sizeof(n)) return 0;
        return n;
    }

    std::vector<uint8_t> read_guest(uint64_t gpa, size_t len) {
        std::vector<uint8_t> out(len);
        auto s = memory_.slice(Gpa(gpa), len);
        std::memcpy(out.data(), s.data(), len);
        return out;
    }

private:
    GuestMemory& memory_;
    virtio::MmioTransport& transport_;
    uint64_t ring_base_;
    uint64_t next_buffer_;
    std::vector<TestQueue> queues_;
    uint16_t next_desc_[64] = {};
};

}  // namespace nanovm::test
