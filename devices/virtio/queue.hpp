// The split virtqueue (virtio 1.2 §2.7): the one place where ring memory the guest
// controls is parsed. Everything it hands out has been checked: every descriptor
// index is below the queue size, every buffer lies inside one region of guest RAM,
// chains neither loop nor exceed kMaxChainDescriptors, device-readable buffers come
// before device-writable ones, and indirect tables are well formed and not nested.
// A malformed ring raises QueueError; the device then marks itself NEEDS_RESET
// (devices/virtio/mmio_transport.hpp) and the VMM keeps running.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "devices/virtio/virtio_spec.hpp"
#include "vmm/address.hpp"
#include "vmm/error.hpp"
#include "vmm/guest_memory.hpp"

namespace nanovm::virtio {

/// A guest broke the virtqueue rules. what() says which rule and where
/// ("queue 0: descriptor 7: next index 300 >= queue size 256").
class QueueError : public Error {
public:
    explicit QueueError(const std::string& message) : Error(message) {}
};

/// Everything about one virtqueue that outlives a VMM process: where the driver put
/// the rings and how far the device got. Plain data; a snapshot saves it as is.
struct QueueState {
    uint16_t size = 0;        ///< QueueNum: entries, a power of two <= the max size
    bool ready = false;       ///< QueueReady
    uint64_t desc_table = 0;  ///< GPA of the descriptor table (16-byte aligned)
    uint64_t avail_ring = 0;  ///< GPA of the driver area / avail ring (2-byte aligned)
    uint64_t used_ring = 0;   ///< GPA of the device area / used ring (4-byte aligned)
    uint16_t next_avail = 0;  ///< free-running avail index of the next chain to take
    uint16_t next_used = 0;   ///< free-running used index the device publishes next
    bool event_idx = false;   ///< VIRTIO_F_EVENT_IDX negotiated
    bool indirect = false;    ///< VIRTIO_F_INDIRECT_DESC negotiated
    /// Used index at the last interrupt sent (EVENT_IDX bookkeeping, §2.7.10).
    uint16_t signalled_used = 0;
    bool signalled_used_valid = false;
};

/// One guest buffer of a chain: [addr, addr + len) lies inside one region of guest RAM.
struct BufferSegment {
    Gpa addr;
    uint32_t len = 0;  ///< bytes, > 0
};

/// A validated descriptor chain: the driver's buffers for one request, readable
/// ones (driver -> device) and writable ones (device -> driver), in chain order.
struct DescriptorChain {
    uint16_t head = 0;  ///< index of the first descriptor: what push_used returns
    std::vector<BufferSegment> readable;
    std::vector<BufferSegment> writable;
    uint64_t readable_bytes = 0;  ///< sum of readable lengths
    uint64_t writable_bytes = 0;  ///< sum of writable lengths
};

/// The most buffer descriptors one chain may use, direct and indirect ones together
/// (a descriptor that only names an indirect table does not count).
inline constexpr uint32_t kMaxChainDescriptors = kMaxQueueSize;

/// One split virtqueue of a device. Not thread-safe: a device uses each queue from
/// one thread at a time (its event-loop handler), the transport only while the
/// queue is not live (before DRIVER_OK, or after reset).
class Virtqueue {
public:
    /// `index` is the queue's number (for messages), `max_size` what QueueNumMax
    /// reports (a power of two, <= kMaxQueueSize).
    Virtqueue(uint16_t index, uint16_t max_size);

    uint16_t index() const noexcept { return index_; }
    uint16_t max_size() const noexcept { return max_size_; }
    QueueState& state() noexcept { return state_; }
    const QueueState& state() const noexcept { return state_; }

    /// Checks what the driver configured before the queue goes live: size a power of
    /// two in [1, max_size], ring alignment (§2.7: 16/2/4 bytes) and that each ring
    /// lies inside one region of `memory`. Throws QueueError.
    void check_layout(const GuestMemory& memory) const;

    /// Takes the next chain the driver made available, or nothing if there is none.
    /// Throws QueueError if the avail ring or the chain is malformed; the queue is
    /// then unusable until reset.
    std::optional<DescriptorChain> pop(const GuestMemory& memory);

    /// Gives back the chain the last pop() returned, unused, so that the next pop()
    /// returns it again (a device that cannot serve it yet: tap full, no frame).
    /// Only right after that pop(), before any push_used; nothing in guest memory
    /// changes (the avail ring and descriptors stay the driver's).
    void undo_pop() noexcept { --state_.next_avail; }

    /// Returns chain `head` to the driver with `written` bytes written into its
    /// writable buffers (§2.7.8): used element, then (release) the used index.
    /// Throws QueueError if the queue is not ready (nothing is written) or the used
    /// ring is outside guest memory.
    void push_used(GuestMemory& memory, uint16_t head, uint32_t written);

    /// After one or more push_used: whether the driver asked to be interrupted
    /// (EVENT_IDX: used_event crossed, §2.7.10; else no VIRTQ_AVAIL_F_NO_INTERRUPT).
    /// Records the used index as signalled when it returns true. False on a queue
    /// that is not ready.
    bool needs_interrupt(const GuestMemory& memory);

    /// Whether the driver should notify the device on new buffers. With EVENT_IDX this
    /// writes avail_event = next_avail (or leaves it behind when disabling); without,
    /// sets/clears VIRTQ_USED_F_NO_NOTIFY. Returns true if new chains arrived
    /// meanwhile when enabling (the caller must then pop again: no kick will come).
    /// On a queue that is not ready: writes nothing, returns false.
    bool enable_notification(GuestMemory& memory, bool enable);

    /// Asks the driver to notify on the very next buffer it makes available, even
    /// while earlier ones are still unconsumed: with EVENT_IDX, avail_event = the
    /// driver's current avail idx (virtio 1.2 §2.7.10: it notifies once its idx
    /// passes that); without, clears VIRTQ_USED_F_NO_NOTIFY. Returns the driver's
    /// avail idx it read. Throws QueueError if the queue is not ready or the ring
    /// lies outside guest RAM.
    uint16_t notify_on_next_avail(GuestMemory& memory);

    /// The driver's avail idx as it is in guest memory now (§2.7.6). Throws QueueError.
    uint16_t avail_idx(const GuestMemory& memory) const { return read_avail_idx(memory); }

    /// Back to the state after device reset: not ready, size = max size, rings 0.
    void reset();

private:
    uint16_t read_avail_idx(const GuestMemory& memory) const;
    /// Throws QueueError naming `what` unless the queue is ready with a size > 0.
    void require_ready(const char* what) const;
    void walk(const GuestMemory& memory, DescriptorChain& chain, uint64_t table, uint32_t count,
              uint16_t first, bool in_indirect, uint32_t& visited) const;
    [[noreturn]] void fail(const std::string& what) const;

    uint16_t index_;
    uint16_t max_size_;
    QueueState state_;
};

}  // namespace nanovm::virtio
