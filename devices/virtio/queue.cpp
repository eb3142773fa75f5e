#include "devices/virtio/queue.hpp"

#include <atomic>
#include <bit>
#include <cstring>

#include <fmt/format.h>

namespace nanovm::virtio {

namespace {

// Split-ring layout (virtio 1.2 §2.7.6, §2.7.8): byte sizes and field offsets.
constexpr uint64_t desc_table_bytes(uint16_t size) { return uint64_t{size} * sizeof(Descriptor); }
constexpr uint64_t avail_ring_bytes(uint16_t size) { return 6 + 2 * uint64_t{size}; }  // flags idx ring[] used_event
constexpr uint64_t used_ring_bytes(uint16_t size) { return 6 + 8 * uint64_t{size}; }   // flags idx ring[] avail_event
constexpr uint64_t kRingFlags = 0, kRingIdx = 2, kRingEntries = 4;

}  // namespace

Virtqueue::Virtqueue(uint16_t index, uint16_t max_size) : index_(index), max_size_(max_size) {
    if (max_size == 0 || max_size > kMaxQueueSize || !std::has_single_bit(max_size))
        throw Error(fmt::format("virtqueue {}: max size {} is not a power of two in [1, {}]", index, max_size,
                                kMaxQueueSize));
    reset();
}

void Virtqueue::reset() {
    state_ = QueueState{};
    state_.size = max_size_;
}

void Virtqueue::fail(const std::string& what) const { throw QueueError(fmt::format("queue {}: {}", index_, what)); }

void Virtqueue::check_layout(const GuestMemory& memory) const {
    const QueueState& s = state_;
    if (s.size == 0 || s.size > max_size_ || !std::has_single_bit(s.size))
        fail(fmt::format("size {} is not a power of two in [1, {}]", s.size, max_size_));
    if (s.desc_table % 16 != 0) fail(fmt::format("descriptor table {:#x} is not 16-byte aligned", s.desc_table));
    if (s.avail_ring % 2 != 0) fail(fmt::format("avail ring {:#x} is not 2-byte aligned", s.avail_ring));
    if (s.used_ring % 4 != 0) fail(fmt::format("used ring {:#x} is not 4-byte aligned", s.used_ring));
    const auto inside = [&](const char* what, uint64_t gpa, uint64_t bytes) {
        if (!memory.contains(Gpa(gpa), bytes))
            fail(fmt::format("{} [{:#x}, +{:#x}) is not inside guest RAM", what, gpa, bytes));
    };
    inside("descriptor table", s.desc_table, desc_table_bytes(s.size));
    inside("avail ring", s.avail_ring, avail_ring_bytes(s.size));
    inside("used ring", s.used_ring, used_ring_bytes(s.size));
}

uint16_t Virtqueue::read_avail_idx(const GuestMemory& memory) const {
    const auto idx = memory.read<uint16_t>(Gpa(state_.avail_ring + kRingIdx));
    // The ring entries and descriptors the index covers are read after it (§2.7.13.3).
    std::atomic_thread_fence(std::memory_order_acquire);
    return idx;
}

std::optional<DescriptorChain> Virtqueue::pop(const GuestMemory& memory) {
    const QueueState& s = state_;
    if (!s.ready) return std::nullopt;
    try {
        const uint16_t avail_idx = read_avail_idx(memory);
        const uint16_t pending = static_cast<uint16_t>(avail_idx - s.next_avail);
        if (pending == 0) return std::nullopt;
        if (pending > s.size)
            fail(fmt::format("avail index {} is {} ahead of the device's {}, more than the queue size {}", avail_idx,
                             pending, s.next_avail, s.size));
        const uint64_t slot = s.next_avail % s.size;
        const auto head = memory.read<uint16_t>(Gpa(s.avail_ring + kRingEntries + 2 * slot));
        if (head >= s.size) fail(fmt::format("avail ring slot {}: head {} >= queue size {}", slot, head, s.size));
        DescriptorChain chain;
        chain.head = head;
        uint32_t visited = 0;
        walk(memory, chain, s.desc_table, s.size, head, false, visited);
        ++state_.next_avail;
        return chain;
    } catch (const QueueError&) {
        throw;
    } catch (const Error& e) {  // GuestMemory refused a range: report it as the guest's fault
        fail(e.what());
    }
}

void Virtqueue::walk(const GuestMemory& memory, DescriptorChain& chain, uint64_t table, uint32_t count,
                     uint16_t first, bool in_indirect, uint32_t& visited) const {
    const char* where = in_indirect ? "indirect descriptor" : "descriptor";
    uint32_t index = first;
    for (uint32_t steps = 0;; ++steps) {
        if (steps >= count) fail(fmt::format("{} chain from {} loops (more than {} links)", where, first, count));
        const auto d = memory.read<Descriptor>(Gpa(table + uint64_t{index} * sizeof(Descriptor)));
        if (d.flags & desc_flags::kIndirect) {
            if (in_indirect) fail(fmt::format("{} {}: nested indirect table", where, index));
            if (!state_.indirect) fail(fmt::format("{} {}: indirect table without VIRTIO_F_INDIRECT_DESC", where, index));
            if (d.flags & desc_flags::kNext) fail(fmt::format("{} {}: both INDIRECT and NEXT set", where, index));
            if (d.len == 0 || d.len % sizeof(Descriptor) != 0)
                fail(fmt::format("{} {}: indirect table length {} is not a non-zero multiple of 16", where, index,
                                 d.len));
            const uint32_t entries = d.len / sizeof(Descriptor);
            if (entries > kMaxChainDescriptors)
                fail(fmt::format("{} {}: indirect table of {} entries (max {})", where, index, entries,
                                 kMaxChainDescriptors));
            if (!memory.contains(Gpa(d.addr), d.len))
                fail(fmt::format("{} {}: indirect table [{:#x}, +{:#x}) is not inside guest RAM", where, index, d.addr,
                                 d.len));
            walk(memory, chain, d.addr, entries, 0, true, visited);
            return;
        }
        // Buffer descriptors count toward the limit; the one naming an indirect table
        // does not, so a table of exactly kMaxChainDescriptors entries fits.
        if (++visited > kMaxChainDescriptors)
            fail(fmt::format("chain from {} has more than {} descriptors", chain.head, kMaxChainDescriptors));
        if (d.len > 0) {
            if (!memory.contains(Gpa(d.addr), d.len))
                fail(fmt::format("{} {}: buffer [{:#x}, +{:#x}) is not inside one region of guest RAM", where, index,
                                 d.addr, d.len));
            if (d.flags & desc_flags::kWrite) {
                chain.writable.push_back({Gpa(d.addr), d.len});
                chain.writable_bytes += d.len;
            } else {
                if (!chain.writable.empty())
                    fail(fmt::format("{} {}: device-readable buffer after a device-writable one", where, index));
                chain.readable.push_back({Gpa(d.addr), d.len});
                chain.readable_bytes += d.len;
            }
        }
        if (!(d.flags & desc_flags::kNext)) return;
        if (d.next >= count) fail(fmt::format("{} {}: next index {} >= {} entries", where, index, d.next, count));
        index = d.next;
    }
}

void Virtqueue::require_ready(const char* what) const {
    // Not ready: the driver never laid the rings out, or the size and addresses are
    // not the ones check_layout accepted (size 0 would divide by zero below).
    if (!state_.ready || state_.size == 0) fail(fmt::format("{} on a queue that is not ready", what));
}

void Virtqueue::push_used(GuestMemory& memory, uint16_t head, uint32_t written) {
    require_ready("push_used");
    QueueState& s = state_;
    try {
        const uint64_t slot = s.next_used % s.size;
        memory.write(Gpa(s.used_ring + kRingEntries + 8 * slot), UsedElement{head, written});
        ++s.next_used;
        // The element must be visible before the index that publishes it (§2.7.13.4).
        std::atomic_thread_fence(std::memory_order_release);
        memory.write(Gpa(s.used_ring + kRingIdx), s.next_used);
    } catch (const QueueError&) {
        throw;
    } catch (const Error& e) {
        fail(e.what());
    }
}

bool Virtqueue::needs_interrupt(const GuestMemory& memory) {
    QueueState& s = state_;
    if (!s.ready || s.size == 0) return false;
    // The used index store must be visible before the driver's suppression fields are
    // read, or an interrupt can be lost (the driver's virtio_mb pairs with this).
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (!s.event_idx) {
        const auto flags = memory.read<uint16_t>(Gpa(s.avail_ring + kRingFlags));
        return !(flags & kAvailFlagNoInterrupt);
    }
    const uint16_t old = s.signalled_used;
    const bool valid = s.signalled_used_valid;
    s.signalled_used = s.next_used;
    s.signalled_used_valid = true;
    if (!valid) return true;
    const auto used_event = memory.read<uint16_t>(Gpa(s.avail_ring + kRingEntries + 2 * uint64_t{s.size}));
    // vring_need_event (§2.7.10): interrupt if used_event lies in [old, new).
    return static_cast<uint16_t>(s.next_used - used_event - 1) < static_cast<uint16_t>(s.next_used - old);
}

bool Virtqueue::enable_notification(GuestMemory& memory, bool enable) {
    QueueState& s = state_;
    if (!s.ready || s.size == 0) return false;  // no rings to write; pop() finds nothing either
    if (s.event_idx) {
        if (!enable) return false;  // avail_event left behind: the driver stops kicking once past it
        memory.write(Gpa(s.used_ring + kRingEntries + 8 * uint64_t{s.size}), s.next_avail);
    } else {
        const uint16_t flags = enable ? 0 : kUsedFlagNoNotify;
        memory.write(Gpa(s.used_ring + kRingFlags), flags);
        if (!enable) return false;
    }
    std::atomic_thread_fence(std::memory_order_seq_cst);
    return read_avail_idx(memory) != s.next_avail;
}

uint16_t Virtqueue::notify_on_next_avail(GuestMemory& memory) {
    require_ready("notify_on_next_avail");
    QueueState& s = state_;
    const uint16_t avail = read_avail_idx(memory);
    try {
        if (s.event_idx)
            memory.write(Gpa(s.used_ring + kRingEntries + 8 * uint64_t{s.size}), avail);
        else
            memory.write(Gpa(s.used_ring + kRingFlags), uint16_t{0});
    } catch (const QueueError&) {
        throw;
    } catch (const Error& e) {
        fail(e.what());
    }
    std::atomic_thread_fence(std::memory_order_seq_cst);
    return avail;
}

}  // namespace nanovm::virtio
