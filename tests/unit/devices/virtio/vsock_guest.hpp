// A fake guest vsock driver for device tests: on top of TestDriver's rings it keeps
// every rx buffer posted (one writable descriptor per slot, reposted as soon as it
// is read), sends tx packets from a pool of fixed slots (reclaimed from the used
// ring), and posts event buffers. Polling, from the test's thread; no interrupts.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstring>
#include <deque>
#include <optional>
#include <span>
#include <thread>
#include <vector>

#include "devices/virtio/vsock/vsock_spec.hpp"
#include "tests/unit/devices/virtio/test_driver.hpp"

namespace nanovm::test {

/// One packet the device put into an rx buffer.
struct RxPacket {
    virtio::vsock::PacketHeader header{};
    std::vector<uint8_t> payload;
};

/// The guest side of a virtio-vsock device under test.
class FakeVsockGuest {
public:
    static constexpr uint64_t kGuestCid = 3;
    static constexpr uint16_t kTxSlots = 128;  // heads 0..127; descriptor 128 + i splits slot i

    /// Brings the device up through `driver` and posts every rx buffer
    /// (`rx_payload` bytes after the header each) and `event_buffers` event buffers.
    FakeVsockGuest(GuestMemory& memory, TestDriver& driver, uint32_t rx_payload = 4096, uint16_t event_buffers = 4)
        : memory_(memory), driver_(driver), rx_buffer_bytes_(virtio::vsock::kHeaderSize + rx_payload) {
        if (!driver_.bring_up()) throw std::runtime_error("vsock device refused the features");
        TestQueue& rx = driver_.queue(virtio::vsock::kRxQueue);
        for (uint16_t i = 0; i < rx.size(); ++i) {
            rx_gpa_.push_back(driver_.alloc(rx_buffer_bytes_));
            rx.set_descriptor(i, {rx_gpa_[i], rx_buffer_bytes_, virtio::desc_flags::kWrite, 0});
            rx.publish(i);
        }
        for (uint16_t i = 0; i < kTxSlots; ++i) {
            tx_gpa_.push_back(driver_.alloc(virtio::vsock::kHeaderSize + virtio::vsock::kMaxPacketPayload + 64));
            tx_free_.push_back(i);
        }
        for (uint16_t i = 0; i < event_buffers; ++i) post_event_buffer();
        driver_.kick(virtio::vsock::kRxQueue);
    }

    /// Posts one 4-byte event buffer and kicks the event queue.
    void post_event_buffer(uint32_t len = 4) {
        TestQueue& ev = driver_.queue(virtio::vsock::kEventQueue);
        const uint16_t slot = static_cast<uint16_t>(event_posted_++ % ev.size());
        if (event_gpa_.size() < ev.size()) event_gpa_.resize(ev.size());
        event_gpa_[slot] = driver_.alloc(len);
        ev.set_descriptor(slot, {event_gpa_[slot], len, virtio::desc_flags::kWrite, 0});
        ev.publish(slot);
        driver_.kick(virtio::vsock::kEventQueue);
    }

    /// Event ids the device delivered since the last call. Each handled event's
    /// buffer is posted again with a kick, as Linux's virtio_transport_event_work
    /// does after acting on it.
    std::vector<uint32_t> take_events() {
        std::vector<uint32_t> ids;
        TestQueue& ev = driver_.queue(virtio::vsock::kEventQueue);
        while (event_seen_ != ev.used_idx()) {
            const auto used = ev.used(event_seen_++);
            ids.push_back(memory_.read<uint32_t>(Gpa(event_gpa_.at(used.id))));
        }
        for (size_t i = 0; i < ids.size(); ++i) post_event_buffer();
        return ids;
    }

    /// Packets the device has put into rx buffers since the last call; their
    /// buffers are posted again (and the rx queue kicked) before it returns.
    std::vector<RxPacket> poll() {
        std::vector<RxPacket> packets;
        TestQueue& rx = driver_.queue(virtio::vsock::kRxQueue);
        const uint16_t used_idx = rx.used_idx();
        while (rx_seen_ != used_idx) {
            const auto used = rx.used(rx_seen_++);
            RxPacket p;
            const uint64_t gpa = rx_gpa_.at(used.id);
            p.header = memory_.read<virtio::vsock::PacketHeader>(Gpa(gpa));
            const uint32_t len = used.len - virtio::vsock::kHeaderSize;
            p.payload.resize(len);
            if (len) {
                const auto bytes = memory_.slice(Gpa(gpa + virtio::vsock::kHeaderSize), len);
                std::memcpy(p.payload.data(), bytes.data(), len);
            }
            packets.push_back(std::move(p));
            rx.publish(static_cast<uint16_t>(used.id));
        }
        if (!packets.empty()) driver_.kick(virtio::vsock::kRxQueue);
        return packets;
    }

    /// Waits up to `timeout` for the next packet (kept in order across calls).
    std::optional<RxPacket> next(std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
        const auto end = std::chrono::steady_clock::now() + timeout;
        while (backlog_.empty()) {
            for (RxPacket& p : poll()) backlog_.push_back(std::move(p));
            if (!backlog_.empty()) break;
            if (std::chrono::steady_clock::now() > end) return std::nullopt;
            std::this_thread::sleep_for(std::chrono::microseconds(100));
        }
        RxPacket p = std::move(backlog_.front());
        backlog_.pop_front();
        return p;
    }

    /// A header from the guest (src = guest CID) to the host (CID 2).
    static virtio::vsock::PacketHeader header(uint16_t op, uint32_t guest_port, uint32_t host_port,
                                              uint32_t buf_alloc = 256 * 1024, uint32_t fwd_cnt = 0,
                                              uint32_t flags = 0) {
        return {kGuestCid, virtio::vsock::kHostCid, guest_port, host_port, 0, virtio::vsock::kTypeStream,
                op,        flags,                   buf_alloc,  fwd_cnt};
    }

    /// Free tx slots right now (after reclaiming the used ones).
    size_t tx_slots_free() {
        reclaim_tx();
        return tx_free_.size();
    }

    /// Sends one packet: `header` (len is set to the payload size unless
    /// `keep_len`) and `payload`, in one descriptor, or with the header split
    /// after `split` bytes into two. Waits for a free slot. Kicks unless told not to.
    void send(virtio::vsock::PacketHeader header, std::span<const uint8_t> payload = {}, bool kick = true,
              bool keep_len = false, uint32_t split = 0) {
        if (!keep_len) header.len = static_cast<uint32_t>(payload.size());
        const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
        // Out of slots with chains not yet notified (kick = false): the device only
        // returns them once told, as a driver out of descriptors must.
        if (tx_slots_free() == 0) kick_tx();
        while (tx_slots_free() == 0) {
            if (std::chrono::steady_clock::now() > end) throw std::runtime_error("no tx slot came back");
            std::this_thread::sleep_for(std::chrono::microseconds(50));
        }
        const uint16_t slot = tx_free_.front();
        tx_free_.pop_front();
        const uint64_t gpa = tx_gpa_[slot];
        memory_.write(Gpa(gpa), header);
        if (!payload.empty()) memory_.write_bytes(Gpa(gpa + virtio::vsock::kHeaderSize), payload);
        const auto total = static_cast<uint32_t>(virtio::vsock::kHeaderSize + payload.size());
        TestQueue& tx = driver_.queue(virtio::vsock::kTxQueue);
        if (split > 0 && split < total) {
            const auto second = static_cast<uint16_t>(kTxSlots + slot);
            tx.set_descriptor(slot, {gpa, split, virtio::desc_flags::kNext, second});
            tx.set_descriptor(second, {gpa + split, total - split, 0, 0});
        } else {
            tx.set_descriptor(slot, {gpa, total, 0, 0});
        }
        tx.publish(slot);
        if (kick) driver_.kick(virtio::vsock::kTxQueue);
    }

    /// Sends a chain of raw readable bytes (for malformed packets).
    void send_raw(std::span<const uint8_t> bytes) {
        if (tx_slots_free() == 0) kick_tx();
        while (tx_slots_free() == 0) std::this_thread::sleep_for(std::chrono::microseconds(50));
        const uint16_t slot = tx_free_.front();
        tx_free_.pop_front();
        memory_.write_bytes(Gpa(tx_gpa_[slot]), bytes);
        TestQueue& tx = driver_.queue(virtio::vsock::kTxQueue);
        tx.set_descriptor(slot, {tx_gpa_[slot], static_cast<uint32_t>(bytes.size()), 0, 0});
        tx.publish(slot);
        driver_.kick(virtio::vsock::kTxQueue);
    }

    void kick_tx() { driver_.kick(virtio::vsock::kTxQueue); }

    /// Waits until the device has returned every tx chain.
    bool wait_tx_done(std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
        const auto end = std::chrono::steady_clock::now() + timeout;
        while (tx_slots_free() != kTxSlots) {
            if (std::chrono::steady_clock::now() > end) return false;
            std::this_thread::sleep_for(std::chrono::microseconds(100));
        }
        return true;
    }

private:
    void reclaim_tx() {
        TestQueue& tx = driver_.queue(virtio::vsock::kTxQueue);
        const uint16_t used_idx = tx.used_idx();
        while (tx_seen_ != used_idx) tx_free_.push_back(static_cast<uint16_t>(tx.used(tx_seen_++).id));
    }

    GuestMemory& memory_;
    TestDriver& driver_;
    uint32_t rx_buffer_bytes_;
    std::vector<uint64_t> rx_gpa_, tx_gpa_, event_gpa_;
    std::deque<uint16_t> tx_free_;
    std::deque<RxPacket> backlog_;
    uint16_t rx_seen_ = 0, tx_seen_ = 0, event_seen_ = 0;
    uint32_t event_posted_ = 0;
};

}  // namespace nanovm::test
