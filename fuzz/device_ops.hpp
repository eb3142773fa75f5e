// What the virtio device harnesses (fuzz/{blk,vsock,net,rng}_device_fuzz.cpp) share:
// a hostile driver's operations on one device behind its MmioTransport, decoded from
// the fuzz input, and the device invariants checked after every step. A harness adds
// only its device and its host-side events (an io_uring completion, a host socket
// becoming readable, a tap frame), as ops kHostOps and up.
//
// Input format, after the harness's own header (little endian; zeros past the end):
//   up to kMaxOps ops, each u8 op and its operands; op % 16 is
//     0 write register   u8 reg (kRegisters), u32 value
//     1 read register    u8 reg
//     2 kick             u8 queue (QueueNotify write), then the loop settles
//     3 write RAM        u32 gpa (mod RAM size), u8 len, len bytes
//     4 bring up         u8 how (bit 0: features from a u64 that follows, else all
//                        offered; bit 1: minus bit u8 that follows), u8 queue size (0:
//                        QueueNumMax): virtio 1.2 §3.1.1 through TestDriver
//     5 post chain       u8 queue, u8 buffers (1-4), each u8 b: bit 7 writable, length
//                        (b & 0x7f) * 8 (0: 8); readable: b & 0x7f bytes follow
//     6 config access    u16 offset, u8 width (bit 7: write, a u64 value follows)
//     7 reset            Status = 0
//     8 queue register   u8 queue, u8 which (QueueReady 0/1, QueueNum, a ring
//                        address low/high), u32 value: the registers the issue-15
//                        bug went through, without a reg table detour
//     9 malformed chain  u8 queue, u8 kind: a next index past the table, a loop, a
//                        buffer outside RAM, an avail index far ahead
//    10 kick and hold    u8 queue: the kick is handled in one loop turn and the loop
//                        is then held, so that register writes land before any
//                        completion of what that kick started; any op that needs
//                        the loop (or the end of the input) releases it
//    11 release          lets a held loop go and settles
//    12-15 host events   the harness's own (host_event(op - 12, in))
// Invariants after each step (the loop settled): the transport's (DRIVER_OK only
// with FEATURES_OK, accepted features offered with VERSION_1); while the device is
// activated (from DRIVER_OK, failed since or not: MmioTransport::activated) and the
// driver did not write Status, every queue's size, ring addresses and readiness stay
// as they were (check activation, not liveness); while it is not live (not
// activated, or NEEDS_RESET) the device
// writes nothing into guest RAM (a DirtyTracker records every device store; the
// harness's own RAM writes bypass it). ASan/UBSan watch for the rest (a division by
// a zero queue size, an access outside guest RAM's mappings).
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "devices/virtio/mmio_transport.hpp"
#include "fuzz/fuzz_input.hpp"
#include "fuzz/fuzz_support.hpp"
#include "tests/unit/devices/virtio/test_driver.hpp"
#include "tests/unit/vmm/event_loop_waits.hpp"
#include "vmm/dirty_tracker.hpp"

namespace nanovm::fuzz {

/// Guest RAM of every device harness: small, so that zeroing it per input is cheap.
inline constexpr uint64_t kDeviceRamBytes = 4 * MiB;
inline constexpr uint64_t kDeviceRingBase = 0x10000;
inline constexpr uint64_t kDeviceBufferBase = 1 * MiB;  // TestDriver's bump allocator from here
/// Ops per input, and buffer bytes the posts of one input may allocate.
inline constexpr int kMaxOps = 192;
inline constexpr uint64_t kMaxBufferBytes = 2 * MiB;
/// Op numbers from which the harness's own host events start (op % 16).
inline constexpr uint8_t kHostOps = 12;

/// The guest RAM and device thread of a device harness: made once per process,
/// the RAM zeroed again for each input (4 MiB: cheap).
struct DeviceRig {
    GuestMemory& memory;
    EventLoop& loop;
};
inline DeviceRig device_rig() {
    static GuestMemory memory = GuestMemory::create(kDeviceRamBytes);
    static EventLoop loop;
    discard_guest_ram(memory);
    return {memory, loop};
}

/// The bytes of a wire struct, for a readable buffer.
template <typename T>
std::vector<uint8_t> bytes_of(const T& value) {
    const auto* p = reinterpret_cast<const uint8_t*>(&value);
    return {p, p + sizeof(T)};
}

/// One device on its transport, driven by fuzz ops. Construct per input.
class DeviceOps {
public:
    DeviceOps(GuestMemory& memory, EventLoop& loop, virtio::MmioTransport& transport)
        : memory_(memory), loop_(loop), transport_(transport),
          driver_(memory, transport, kDeviceRingBase, kDeviceBufferBase), tracker_(ranges(memory)) {
        memory_.set_dirty_tracker(&tracker_);
    }
    ~DeviceOps() {
        release();
        memory_.set_dirty_tracker(nullptr);
    }
    DeviceOps(const DeviceOps&) = delete;
    DeviceOps& operator=(const DeviceOps&) = delete;

    test::TestDriver& driver() noexcept { return driver_; }
    /// Whether the driver laid rings out (TestDriver::queue and post are usable).
    bool have_rings() const noexcept { return have_rings_; }

    /// Posts a chain on `queue` (after a bring-up; else nothing), within the input's
    /// buffer budget. The harness's writes are not device stores: not tracked.
    std::optional<test::TestDriver::Posted> post(uint16_t queue, const std::vector<test::TestBuffer>& buffers) {
        if (!have_rings_ || queue >= transport_.queue_count()) return std::nullopt;
        uint64_t bytes = 0;
        for (const auto& b : buffers) bytes += (b.writable_len ? b.writable_len : b.bytes.size()) + 16;
        if (buffer_bytes_ + bytes > kMaxBufferBytes) return std::nullopt;
        buffer_bytes_ += bytes;
        const Untracked untracked(*this);
        return driver_.post(queue, buffers);
    }

    /// Runs every op of `in`; `host_event(n, in)` runs the harness's event n (0-3).
    template <typename HostEvent>
    void run(FuzzInput& in, HostEvent&& host_event) {
        for (int op = 0; op < kMaxOps && !in.empty(); ++op) {
            const Snapshot before = snapshot();
            status_written_ = false;
            const uint8_t code = in.u8() % 16;
            if (trace_) std::fprintf(stderr, "device_ops: op %d: %u (status %#x)\n", op, code, before.status);
            if (code >= kHostOps) {
                release();
                host_event(static_cast<uint8_t>(code - kHostOps), in);
            } else {
                transport_op(code, in);
            }
            if (!held_) test::settle(loop_);
            check(before);
        }
        // An input that ends holding the loop: what the hold kept back runs now.
        const Snapshot before = snapshot();
        status_written_ = false;
        release();
        test::settle(loop_);
        check(before);
    }

    /// Lets a held loop go (no-op if not held).
    void release() {
        if (!held_) return;
        hold_release_->store(true);
        held_ = false;
    }

private:
    struct Snapshot {
        uint32_t status = 0;
        bool activated = false;
        std::vector<virtio::QueueState> queues;
    };
    /// Detaches the tracker while the harness itself writes guest RAM (device stores
    /// meanwhile go unseen: never a false report).
    struct Untracked {
        explicit Untracked(DeviceOps& ops) : ops_(ops) { ops_.memory_.set_dirty_tracker(nullptr); }
        ~Untracked() { ops_.memory_.set_dirty_tracker(&ops_.tracker_); }
        DeviceOps& ops_;
    };

    static std::vector<DirtyTracker::Range> ranges(const GuestMemory& memory) {
        std::vector<DirtyTracker::Range> out;
        for (const MemoryRegion& r : memory.regions()) out.push_back({r.gpa, r.size});
        return out;
    }

    /// The transport's state, read on the loop thread; while the loop is held (parked
    /// in our task: nothing of the device runs) read from here.
    Snapshot snapshot() {
        Snapshot s;
        if (held_)
            s.queues = transport_.queue_states();
        else
            loop_.run_sync([&] { s.queues = transport_.queue_states(); });
        s.status = transport_.status();
        s.activated = transport_.activated();
        return s;
    }

    static bool live(const Snapshot& s) { return s.activated && !(s.status & virtio::status::kDeviceNeedsReset); }

    /// Checks the invariants between `before` and now; returns now.
    Snapshot check(const Snapshot& before) {
        Snapshot now = snapshot();
        const uint32_t st = now.status;
        fuzz_check(!(st & virtio::status::kDriverOk) || (st & virtio::status::kFeaturesOk),
                   "DRIVER_OK only with FEATURES_OK");
        if (st & virtio::status::kFeaturesOk) {
            const uint64_t accepted = transport_.state().driver_features;
            fuzz_check((accepted & ~transport_.offered_features()) == 0, "accepted features were offered");
            fuzz_check((accepted & virtio::feature::kVersion1) != 0, "accepted features include VERSION_1");
        }
        bool device_stored = false;
        for (size_t i = 0; i < tracker_.region_count(); ++i)
            for (const uint64_t word : tracker_.take(i)) device_stored |= word != 0;
        if (status_written_) return now;
        if (before.activated && now.activated) {
            for (size_t q = 0; q < now.queues.size(); ++q) {
                const virtio::QueueState &a = before.queues[q], &b = now.queues[q];
                fuzz_check(a.size == b.size && a.ready == b.ready && a.desc_table == b.desc_table &&
                               a.avail_ring == b.avail_ring && a.used_ring == b.used_ring,
                           "queue layout and readiness are fixed while the device is activated");
            }
        }
        if (!live(before) && !live(now) && before.status == st)
            fuzz_check(!device_stored, "a device that is not live (not activated, or NEEDS_RESET) stores nothing "
                                       "into guest RAM");
        return now;
    }

    void write_reg(uint32_t offset, uint32_t value) {
        if (offset == virtio::mmio::kStatus) {
            release();  // a Status write may run on the loop (activate, reset)
            status_written_ = true;
        }
        driver_.set_reg(offset, value);
    }

    static uint32_t pick_register(uint8_t r) {
        static constexpr uint32_t kRegisters[] = {
            virtio::mmio::kDeviceFeaturesSel, virtio::mmio::kDriverFeatures,  virtio::mmio::kDriverFeaturesSel,
            virtio::mmio::kQueueSel,          virtio::mmio::kQueueNum,        virtio::mmio::kQueueReady,
            virtio::mmio::kQueueNotify,       virtio::mmio::kInterruptAck,    virtio::mmio::kStatus,
            virtio::mmio::kQueueDescLow,      virtio::mmio::kQueueDescHigh,   virtio::mmio::kQueueDriverLow,
            virtio::mmio::kQueueDriverHigh,   virtio::mmio::kQueueDeviceLow,  virtio::mmio::kQueueDeviceHigh,
            virtio::mmio::kInterruptStatus,   virtio::mmio::kConfigGeneration, virtio::mmio::kQueueReset,
        };
        return kRegisters[r % std::size(kRegisters)];
    }

    void transport_op(uint8_t code, FuzzInput& in) {
        using namespace virtio;
        switch (code) {
            case 0: {
                const uint32_t reg = pick_register(in.u8());
                write_reg(reg, in.u32());
                break;
            }
            case 1:
                driver_.reg(pick_register(in.u8()));
                break;
            case 2:
                release();
                driver_.kick(in.u8());
                break;
            case 3: {
                const uint64_t gpa = in.u32() % kDeviceRamBytes;
                const auto bytes = in.bytes(in.u8());
                if (memory_.contains(Gpa(gpa), bytes.size()))  // through slice: not a device store
                    std::copy(bytes.begin(), bytes.end(), memory_.slice(Gpa(gpa), bytes.size()).begin());
                break;
            }
            case 4: {
                const uint8_t how = in.u8();
                std::optional<uint64_t> features;
                if (how & 1) features = in.u64();
                if (how & 2) features = transport_.offered_features() & ~(1ull << (in.u8() % 64));
                const uint8_t queue_size = in.u8();
                release();
                status_written_ = true;
                buffer_bytes_ = 0;
                const Untracked untracked(*this);
                if (driver_.bring_up(features, queue_size)) have_rings_ = true;
                break;
            }
            case 5: {
                const auto queue = static_cast<uint16_t>(in.u8() % transport_.queue_count());
                std::vector<test::TestBuffer> buffers;
                for (int n = in.u8() % 4 + 1; n > 0; --n) {
                    const uint8_t b = in.u8();
                    if (b & 0x80) {
                        buffers.push_back(test::TestBuffer::out((b & 0x7fu) == 0 ? 8 : (b & 0x7fu) * 8));
                    } else {
                        const auto bytes = in.bytes(b & 0x7fu);
                        buffers.push_back(test::TestBuffer::in({bytes.begin(), bytes.end()}));
                    }
                }
                post(queue, buffers);
                break;
            }
            case 6: {
                const uint64_t offset = mmio::kConfig + in.u16() % (mmio::kWindowSize - mmio::kConfig);
                const uint8_t w = in.u8();
                static constexpr size_t kWidths[] = {4, 1, 2, 8};
                uint64_t value = (w & 0x80) ? in.u64() : 0;
                if (w & 0x80)
                    transport_.write(offset, std::span(reinterpret_cast<const uint8_t*>(&value), kWidths[w % 4]));
                else
                    transport_.read(offset, std::span(reinterpret_cast<uint8_t*>(&value), kWidths[w % 4]));
                break;
            }
            case 7:
                write_reg(mmio::kStatus, 0);
                break;
            case 8: {
                const uint8_t queue = in.u8();
                const uint8_t which = in.u8() % 8;
                const uint32_t value = in.u32();
                static constexpr uint32_t kQueueRegs[] = {mmio::kQueueNum,       mmio::kQueueDescLow,
                                                          mmio::kQueueDescHigh,  mmio::kQueueDriverLow,
                                                          mmio::kQueueDriverHigh, mmio::kQueueDeviceLow};
                driver_.set_reg(mmio::kQueueSel, queue % (transport_.queue_count() + 1));
                if (which < 2)
                    driver_.set_reg(mmio::kQueueReady, which);
                else
                    driver_.set_reg(kQueueRegs[which - 2], which == 2 ? value % 512 : value);
                break;
            }
            case 9: {
                const auto queue = static_cast<uint16_t>(in.u8() % transport_.queue_count());
                const uint8_t kind = in.u8() % 4;
                if (!have_rings_) break;
                const Untracked untracked(*this);
                test::TestQueue& q = driver_.queue(queue);
                const auto head = static_cast<uint16_t>(in.u8() % q.size());
                if (kind == 0) q.set_descriptor(head, {kDeviceBufferBase, 8, desc_flags::kNext, q.size()});
                if (kind == 1) q.set_descriptor(head, {kDeviceBufferBase, 8, desc_flags::kNext, head});
                if (kind == 2) q.set_descriptor(head, {kDeviceRamBytes - 4, 64, desc_flags::kWrite, 0});
                if (kind == 3) {
                    q.set_avail_idx(static_cast<uint16_t>(q.used_idx() + q.size() + 1));
                } else {
                    q.publish(head);
                }
                break;
            }
            case 10: {
                release();
                const uint8_t queue = in.u8();
                auto release_flag = std::make_shared<std::atomic<bool>>(false);
                auto holding = std::make_shared<std::atomic<bool>>(false);
                hold_release_ = release_flag;
                loop_.run_sync([&] {
                    driver_.kick(queue);
                    // Runs after the loop turn that handles the kick, before the next.
                    loop_.post([release_flag, holding] {
                        holding->store(true);
                        while (!release_flag->load()) std::this_thread::sleep_for(std::chrono::microseconds(50));
                    });
                });
                held_ = true;
                test::eventually([&] { return holding->load(); }, std::chrono::milliseconds(2000));
                break;
            }
            default:  // 11
                release();
                break;
        }
    }

    GuestMemory& memory_;
    EventLoop& loop_;
    virtio::MmioTransport& transport_;
    test::TestDriver driver_;
    DirtyTracker tracker_;
    bool have_rings_ = false;
    bool status_written_ = false;
    bool held_ = false;
    const bool trace_ = std::getenv("NANOVM_FUZZ_TRACE") != nullptr;  // each op on stderr
    std::shared_ptr<std::atomic<bool>> hold_release_;
    uint64_t buffer_bytes_ = 0;
};

}  // namespace nanovm::fuzz
