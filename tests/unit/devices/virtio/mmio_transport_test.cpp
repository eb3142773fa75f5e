// The virtio-mmio transport (devices/virtio/mmio_transport.hpp) register by register,
// as virtio 1.2 §4.2.2 and the initialisation sequence of §3.1.1 define them, with
// an echo device behind it: identification, feature windows and negotiation, queue
// set-up, the status state machine and reset, config space, interrupts, and what a
// failing device does to itself (DEVICE_NEEDS_RESET) and not to its neighbours.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "devices/virtio/mmio_transport.hpp"
#include "tests/unit/devices/virtio/echo_device.hpp"
#include "tests/unit/devices/virtio/test_driver.hpp"
#include "tests/unit/vmm/event_loop_waits.hpp"

using namespace nanovm;
using namespace nanovm::virtio;

namespace {

using test::eventually;
using test::settle;

constexpr uint32_t kAckDriver = status::kAcknowledge | status::kDriver;
constexpr uint64_t kRingBase = 0x10000;  // TestDriver's default ring base

/// One echo device with queues of 16 and 8 entries on its own transport and memory.
struct TransportBench {
    explicit TransportBench(EventLoop& event_loop, uint64_t device_features = 0)
        : loop(event_loop), device({16, 8}, device_features) {}

    /// Posts `bytes` and an 8-byte writable buffer on queue 0, kicks, and checks the echo.
    void expect_round_trip(std::vector<uint8_t> bytes) {
        const uint16_t before = driver.queue(0).used_idx();
        const auto posted = driver.post(0, {test::TestBuffer::in(bytes), test::TestBuffer::out(8)});
        driver.kick(0);
        REQUIRE(driver.wait_used(0, static_cast<uint16_t>(before + 1)));
        const UsedElement used = driver.queue(0).used(before);
        CHECK(used.id == posted.head);
        CHECK(used.len == bytes.size());
        CHECK(driver.read_guest(posted.writable_gpas[0], bytes.size()) == bytes);
    }

    /// Zeroes the rings, as a driver allocating fresh ones after a reset would.
    void clear_rings() { memory.write_bytes(Gpa(kRingBase), std::vector<uint8_t>(0x10000, 0)); }

    EventLoop& loop;
    GuestMemory memory = GuestMemory::create(16 * MiB);
    test::EchoDevice device;
    MmioTransport transport{device, memory, loop};
    test::TestDriver driver{memory, transport};
};

/// ACKNOWLEDGE, DRIVER, the offered features and FEATURES_OK, as §3.1.1 steps 1-5.
void negotiate(test::TestDriver& driver) {
    driver.set_reg(mmio::kStatus, status::kAcknowledge);
    driver.set_reg(mmio::kStatus, kAckDriver);
    const uint64_t features = driver.device_features();
    driver.set_reg(mmio::kDriverFeaturesSel, 0);
    driver.set_reg(mmio::kDriverFeatures, static_cast<uint32_t>(features));
    driver.set_reg(mmio::kDriverFeaturesSel, 1);
    driver.set_reg(mmio::kDriverFeatures, static_cast<uint32_t>(features >> 32));
    driver.set_reg(mmio::kStatus, kAckDriver | status::kFeaturesOk);
}

/// Points the selected queue's rings at a layout that check_layout accepts.
void set_good_layout(test::TestDriver& driver, uint16_t size) {
    driver.set_reg(mmio::kQueueNum, size);
    driver.set_reg(mmio::kQueueDescLow, 0x10000);
    driver.set_reg(mmio::kQueueDriverLow, 0x11000);
    driver.set_reg(mmio::kQueueDeviceLow, 0x12000);
}

/// negotiate(), then queue 0 selected and laid out with `size` entries (not yet ready).
void negotiate_and_lay_out_queue0(test::TestDriver& driver, uint16_t size) {
    negotiate(driver);
    driver.set_reg(mmio::kQueueSel, 0);
    set_good_layout(driver, size);
}

}  // namespace

TEST_CASE("virtio-mmio: magic, version 2, device and vendor id", "[virtio][mmio]") {
    EventLoop loop;
    TransportBench b(loop);
    CHECK(b.driver.reg(mmio::kMagicValue) == 0x74726976);
    CHECK(b.driver.reg(mmio::kVersion) == 2);
    CHECK(b.driver.reg(mmio::kDeviceId) == test::EchoDevice::kEchoDeviceId);
    CHECK(b.driver.reg(mmio::kVendorId) == mmio::kVendor);
    CHECK(b.driver.reg(mmio::kShmLenLow) == 0xffffffff);  // no shared memory regions
    CHECK(b.driver.reg(mmio::kShmLenHigh) == 0xffffffff);
    CHECK(b.driver.reg(0x0f8) == 0);  // reserved
    CHECK(b.driver.reg(mmio::kStatus) == 0);
}

TEST_CASE("virtio-mmio: DeviceFeatures shows the offer in 32-bit windows chosen by DeviceFeaturesSel",
          "[virtio][mmio]") {
    EventLoop loop;
    TransportBench b(loop, (1ull << 0) | (1ull << 5));
    const uint64_t offered =
        (1ull << 0) | (1ull << 5) | feature::kVersion1 | feature::kRingEventIdx | feature::kRingIndirectDesc;
    CHECK(b.transport.offered_features() == offered);
    b.driver.set_reg(mmio::kDeviceFeaturesSel, 0);
    CHECK(b.driver.reg(mmio::kDeviceFeatures) == static_cast<uint32_t>(offered));
    b.driver.set_reg(mmio::kDeviceFeaturesSel, 1);
    CHECK(b.driver.reg(mmio::kDeviceFeatures) == 1);  // VIRTIO_F_VERSION_1 = bit 32
    b.driver.set_reg(mmio::kDeviceFeaturesSel, 2);
    CHECK(b.driver.reg(mmio::kDeviceFeatures) == 0);
    b.driver.set_reg(mmio::kDeviceFeaturesSel, 0xffffffff);
    CHECK(b.driver.reg(mmio::kDeviceFeatures) == 0);
}

TEST_CASE("virtio-mmio: DriverFeatures is written in windows and frozen once FEATURES_OK is set",
          "[virtio][mmio]") {
    EventLoop loop;
    TransportBench b(loop, 1ull << 5);
    b.driver.set_reg(mmio::kStatus, status::kAcknowledge);
    b.driver.set_reg(mmio::kStatus, kAckDriver);
    b.driver.set_reg(mmio::kDriverFeaturesSel, 0);
    b.driver.set_reg(mmio::kDriverFeatures, (1u << 5) | (1u << 29));
    b.driver.set_reg(mmio::kDriverFeaturesSel, 1);
    b.driver.set_reg(mmio::kDriverFeatures, 1);
    b.driver.set_reg(mmio::kDriverFeaturesSel, 2);
    b.driver.set_reg(mmio::kDriverFeatures, 0xffffffff);  // no such window: ignored
    const uint64_t accepted = (1ull << 5) | feature::kRingEventIdx | feature::kVersion1;
    CHECK(b.transport.state().driver_features == accepted);
    b.driver.set_reg(mmio::kStatus, kAckDriver | status::kFeaturesOk);
    REQUIRE((b.driver.reg(mmio::kStatus) & status::kFeaturesOk) != 0);
    b.driver.set_reg(mmio::kDriverFeaturesSel, 0);
    b.driver.set_reg(mmio::kDriverFeatures, 0);
    CHECK(b.transport.state().driver_features == accepted);
    // What was accepted reaches the queues.
    CHECK(b.transport.queue_states()[0].event_idx);
    CHECK_FALSE(b.transport.queue_states()[0].indirect);
}

TEST_CASE("virtio-mmio: FEATURES_OK is refused for features that were not offered", "[virtio][mmio]") {
    EventLoop loop;
    TransportBench b(loop, 1ull << 5);
    CHECK_FALSE(b.driver.bring_up(b.transport.offered_features() | (1ull << 6)));
    CHECK(b.driver.reg(mmio::kStatus) == kAckDriver);
    CHECK(b.device.activations == 0);
}

TEST_CASE("virtio-mmio: FEATURES_OK is refused without VIRTIO_F_VERSION_1", "[virtio][mmio]") {
    EventLoop loop;
    TransportBench b(loop);
    CHECK_FALSE(b.driver.bring_up(feature::kRingEventIdx | feature::kRingIndirectDesc));
    CHECK(b.driver.reg(mmio::kStatus) == kAckDriver);
    // The driver may try again with VERSION_1 (the features are not frozen yet).
    CHECK(b.driver.bring_up(feature::kVersion1));
}

TEST_CASE("virtio-mmio: DRIVER_OK without FEATURES_OK sets DEVICE_NEEDS_RESET and does not activate",
          "[virtio][mmio]") {
    EventLoop loop;
    TransportBench b(loop);
    b.driver.set_reg(mmio::kStatus, status::kAcknowledge);
    b.driver.set_reg(mmio::kStatus, kAckDriver);
    b.driver.set_reg(mmio::kStatus, kAckDriver | status::kDriverOk);
    CHECK(b.driver.reg(mmio::kStatus) == (kAckDriver | status::kDeviceNeedsReset));
    CHECK(b.device.activations == 0);
    CHECK(b.driver.reg(mmio::kInterruptStatus) == mmio::kInterruptConfigChange);
    CHECK(b.driver.reg(mmio::kConfigGeneration) == 1);
    CHECK(b.driver.take_interrupts() == 1);
    // Reset, and the proper sequence works.
    b.driver.set_reg(mmio::kStatus, 0);
    CHECK(b.device.resets == 0);  // never activated, nothing to reset
    REQUIRE(b.driver.bring_up());
    b.expect_round_trip({1, 2, 3});
}

TEST_CASE("virtio-mmio: Status writes that clear bits without a reset are ignored", "[virtio][mmio]") {
    EventLoop loop;
    TransportBench b(loop);
    REQUIRE(b.driver.bring_up());
    const uint32_t live = kAckDriver | status::kFeaturesOk | status::kDriverOk;
    b.driver.set_reg(mmio::kStatus, status::kAcknowledge);
    CHECK(b.driver.reg(mmio::kStatus) == live);
    b.driver.set_reg(mmio::kStatus, live & ~status::kFeaturesOk);
    CHECK(b.driver.reg(mmio::kStatus) == live);
    CHECK(b.device.resets == 0);
    b.expect_round_trip({4});
}

TEST_CASE("virtio-mmio: QueueNumMax per queue; an unknown QueueSel reads 0 and ignores writes", "[virtio][mmio]") {
    EventLoop loop;
    TransportBench b(loop);
    b.driver.set_reg(mmio::kQueueSel, 0);
    CHECK(b.driver.reg(mmio::kQueueNumMax) == 16);
    CHECK(b.driver.reg(mmio::kQueueNum) == 16);  // reset value: the max
    b.driver.set_reg(mmio::kQueueSel, 1);
    CHECK(b.driver.reg(mmio::kQueueNumMax) == 8);
    b.driver.set_reg(mmio::kQueueSel, 2);
    CHECK(b.driver.reg(mmio::kQueueNumMax) == 0);  // §4.2.3.2: no such queue
    set_good_layout(b.driver, 8);
    b.driver.set_reg(mmio::kQueueReady, 1);
    CHECK(b.driver.reg(mmio::kQueueReady) == 0);
    CHECK(b.driver.reg(mmio::kQueueDescLow) == 0);
    CHECK((b.driver.reg(mmio::kStatus) & status::kDeviceNeedsReset) == 0);
}

TEST_CASE("virtio-mmio: queue registers are ignored while the queue is ready or the device is live",
          "[virtio][mmio]") {
    EventLoop loop;
    TransportBench b(loop);
    negotiate_and_lay_out_queue0(b.driver, 8);
    b.driver.set_reg(mmio::kQueueReady, 1);
    REQUIRE(b.driver.reg(mmio::kQueueReady) == 1);
    const QueueState before = b.transport.queue_states()[0];
    const auto unchanged = [&] {
        const QueueState now = b.transport.queue_states()[0];
        return now.size == before.size && now.desc_table == before.desc_table &&
               now.avail_ring == before.avail_ring && now.used_ring == before.used_ring && now.ready;
    };
    const auto scribble = [&] {
        b.driver.set_reg(mmio::kQueueNum, 4);
        for (const uint32_t reg : {mmio::kQueueDescLow, mmio::kQueueDescHigh, mmio::kQueueDriverLow,
                                   mmio::kQueueDriverHigh, mmio::kQueueDeviceLow, mmio::kQueueDeviceHigh})
            b.driver.set_reg(reg, 0x40000);
    };
    scribble();
    CHECK(unchanged());
    // Queue 1 is not ready; once DRIVER_OK is set it cannot be changed or disabled either.
    b.driver.set_reg(mmio::kStatus, kAckDriver | status::kFeaturesOk | status::kDriverOk);
    b.driver.set_reg(mmio::kQueueReady, 0);
    CHECK(unchanged());
    b.driver.set_reg(mmio::kQueueSel, 1);
    b.driver.set_reg(mmio::kQueueNum, 4);
    CHECK(b.transport.queue_states()[1].size == 8);
}

TEST_CASE("virtio-mmio: a device in NEEDS_RESET keeps its queue layout and readiness until the driver resets it",
          "[virtio][mmio]") {
    // Issue 15: a failed device stops being live but stays activated (its in-flight
    // work still completes); QueueReady=0 then QueueNum=0 must not reach its queues.
    EventLoop loop;
    TransportBench b(loop);
    REQUIRE(b.driver.bring_up());
    b.device.throw_on_notify = true;
    b.driver.kick(0);
    REQUIRE(eventually([&] { return (b.transport.status() & status::kDeviceNeedsReset) != 0; }));
    const QueueState before = b.transport.queue_states()[0];
    b.driver.set_reg(mmio::kQueueSel, 0);
    b.driver.set_reg(mmio::kQueueReady, 0);
    b.driver.set_reg(mmio::kQueueNum, 0);
    b.driver.set_reg(mmio::kQueueDescLow, 0x40000);
    b.driver.set_reg(mmio::kQueueSel, 1);
    b.driver.set_reg(mmio::kQueueReady, 0);
    const QueueState now = b.transport.queue_states()[0];
    CHECK(now.ready);
    CHECK(now.size == before.size);
    CHECK(now.desc_table == before.desc_table);
    CHECK(b.transport.queue_states()[1].ready);
    CHECK(b.driver.reg(mmio::kQueueReady) == 1);
    // The reset frees the layout again.
    b.device.throw_on_notify = false;
    b.driver.set_reg(mmio::kStatus, 0);
    b.driver.set_reg(mmio::kQueueSel, 0);
    b.driver.set_reg(mmio::kQueueNum, 4);
    CHECK(b.transport.queue_states()[0].size == 4);
}

TEST_CASE("virtio-mmio: Status takes only the driver's bits: not DEVICE_NEEDS_RESET, not unknown ones",
          "[virtio][mmio][snapshot]") {
    // Found by fuzz/vsock_device: a driver wrote 0x41070fff over a live device's
    // status; the device looked failed while it worked, and the saved transport state
    // had bits load_state refuses (a snapshot of that VM could not be restored).
    EventLoop loop;
    TransportBench b(loop);
    REQUIRE(b.driver.bring_up());
    const uint32_t st = kAckDriver | status::kFeaturesOk | status::kDriverOk;
    b.driver.set_reg(mmio::kStatus, 0x41070fffu);
    CHECK(b.driver.reg(mmio::kStatus) == (st | status::kFailed));
    CHECK((b.transport.status() & status::kDeviceNeedsReset) == 0);
    b.expect_round_trip({1, 2});
    TransportBench restored(loop);  // guest RAM as the snapshot has it, then the registers
    const auto ram = b.memory.slice(Gpa(0), b.memory.ram_bytes());
    std::copy(ram.begin(), ram.end(), restored.memory.slice(Gpa(0), ram.size()).begin());
    restored.transport.load_state(b.transport.state(), b.transport.queue_states());
    settle(loop);  // the kick load_state replays finds nothing new
    CHECK(restored.transport.status() == (st | status::kFailed));
    CHECK(restored.device.activations == 1);
}

TEST_CASE("virtio-mmio: QueueReady with a bad layout sets DEVICE_NEEDS_RESET and interrupts", "[virtio][mmio]") {
    EventLoop loop;
    TransportBench b(loop);
    negotiate_and_lay_out_queue0(b.driver, 16);
    SECTION("size not a power of two") { b.driver.set_reg(mmio::kQueueNum, 12); }
    SECTION("size above QueueNumMax") { b.driver.set_reg(mmio::kQueueNum, 32); }
    SECTION("misaligned descriptor table") { b.driver.set_reg(mmio::kQueueDescLow, 0x10008); }
    SECTION("used ring outside guest RAM") { b.driver.set_reg(mmio::kQueueDeviceHigh, 1); }
    b.driver.set_reg(mmio::kQueueReady, 1);
    CHECK(b.driver.reg(mmio::kQueueReady) == 0);
    CHECK((b.driver.reg(mmio::kStatus) & status::kDeviceNeedsReset) != 0);
    CHECK(b.driver.reg(mmio::kInterruptStatus) == mmio::kInterruptConfigChange);
    CHECK(b.driver.take_interrupts() == 1);
    // DRIVER_OK on a failed device does not activate it.
    b.driver.set_reg(mmio::kStatus, kAckDriver | status::kFeaturesOk | status::kDriverOk);
    CHECK(b.device.activations == 0);
    REQUIRE(b.driver.bring_up());
    b.expect_round_trip({9, 8, 7});
}

TEST_CASE("virtio-mmio: register accesses that are not 32-bit and aligned are ignored", "[virtio][mmio]") {
    EventLoop loop;
    TransportBench b(loop);
    std::array<uint8_t, 8> buf;
    for (const size_t width : {1, 2, 8}) {
        buf.fill(0xee);
        b.transport.read(mmio::kMagicValue, std::span(buf).first(width));
        for (size_t i = 0; i < width; ++i) CHECK(buf[i] == 0);
    }
    buf.fill(0xee);
    b.transport.read(mmio::kMagicValue + 1, std::span(buf).first(4));  // unaligned
    CHECK(buf[0] == 0);
    const std::array<uint8_t, 4> ack{status::kAcknowledge, 0, 0, 0};
    b.transport.write(mmio::kStatus, std::span(ack).first(1));
    b.transport.write(mmio::kStatus, std::span(ack).first(2));
    b.transport.write(mmio::kStatus + 1, ack);
    CHECK(b.driver.reg(mmio::kStatus) == 0);
    b.transport.write(mmio::kStatus, ack);
    CHECK(b.driver.reg(mmio::kStatus) == status::kAcknowledge);
}

TEST_CASE("virtio-mmio: config space reads of every width and offset reach the device", "[virtio][mmio]") {
    EventLoop loop;
    TransportBench b(loop);
    for (const size_t width : {1, 2, 4, 8}) {
        for (const uint64_t offset : {0ull, 1ull, 3ull, 0x10ull, 0xef8ull}) {
            std::array<uint8_t, 8> buf;
            buf.fill(0xee);
            b.transport.read(mmio::kConfig + offset, std::span(buf).first(width));
            for (size_t i = 0; i < width; ++i) CHECK(buf[i] == static_cast<uint8_t>(offset + i));
        }
    }
}

TEST_CASE("virtio-mmio: InterruptAck clears only the acknowledged bits", "[virtio][mmio]") {
    EventLoop loop;
    TransportBench b(loop);
    REQUIRE(b.driver.bring_up());
    b.expect_round_trip({1});
    CHECK(b.driver.reg(mmio::kInterruptStatus) == mmio::kInterruptUsedRing);
    REQUIRE(b.device.link());
    b.device.link()->signal_config_change();
    CHECK(b.driver.reg(mmio::kConfigGeneration) == 1);
    CHECK(b.driver.reg(mmio::kInterruptStatus) == (mmio::kInterruptUsedRing | mmio::kInterruptConfigChange));
    CHECK(b.driver.take_interrupts() == 2);
    b.driver.set_reg(mmio::kInterruptAck, mmio::kInterruptUsedRing);
    CHECK(b.driver.reg(mmio::kInterruptStatus) == mmio::kInterruptConfigChange);
    b.driver.set_reg(mmio::kInterruptAck, mmio::kInterruptUsedRing);  // already clear: no change
    CHECK(b.driver.reg(mmio::kInterruptStatus) == mmio::kInterruptConfigChange);
    b.driver.set_reg(mmio::kInterruptAck, mmio::kInterruptConfigChange);
    CHECK(b.driver.reg(mmio::kInterruptStatus) == 0);
}

TEST_CASE("virtio-mmio: Status 0 resets the queues, the registers and the device", "[virtio][mmio]") {
    EventLoop loop;
    TransportBench b(loop);
    REQUIRE(b.driver.bring_up());
    b.expect_round_trip({1, 2});
    b.driver.set_reg(mmio::kQueueSel, 1);
    b.driver.set_reg(mmio::kStatus, 0);
    CHECK(b.device.resets == 1);
    CHECK(b.driver.reg(mmio::kStatus) == 0);
    const MmioTransportState st = b.transport.state();
    CHECK(st.driver_features == 0);
    CHECK(st.queue_sel == 0);
    CHECK(st.interrupt_status == 0);
    for (const QueueState& q : b.transport.queue_states()) {
        CHECK_FALSE(q.ready);
        CHECK(q.desc_table == 0);
        CHECK(q.avail_ring == 0);
        CHECK(q.used_ring == 0);
        CHECK(q.next_avail == 0);
        CHECK(q.next_used == 0);
        CHECK_FALSE(q.event_idx);
    }
    CHECK(b.transport.queue_states()[0].size == 16);
    // Kicks are not delivered until the driver is done again.
    b.driver.kick(0);
    settle(loop);
    CHECK(b.device.notifies == 1);
    b.clear_rings();
    REQUIRE(b.driver.bring_up());
    CHECK(b.device.activations == 2);
    b.expect_round_trip({3, 4});
}

TEST_CASE("virtio-mmio: kicks before DRIVER_OK do not reach the device", "[virtio][mmio]") {
    EventLoop loop;
    TransportBench b(loop);
    negotiate_and_lay_out_queue0(b.driver, 16);
    b.driver.set_reg(mmio::kQueueReady, 1);
    b.driver.kick(0);
    b.driver.kick(5);  // no such queue
    settle(loop);
    CHECK(b.device.notifies == 0);
}

TEST_CASE("virtio-mmio: a kick pending when DRIVER_OK is written never reaches the device before activate",
          "[virtio][mmio]") {
    EventLoop loop;
    TransportBench b(loop);
    negotiate_and_lay_out_queue0(b.driver, 16);
    b.driver.set_reg(mmio::kQueueReady, 1);
    // Hold the loop thread so the kick stays pending while DRIVER_OK is written.
    std::atomic<bool> holding{false}, release{false};
    loop.post([&] {
        holding = true;
        while (!release) std::this_thread::sleep_for(std::chrono::microseconds(100));
    });
    REQUIRE(eventually([&] { return holding.load(); }));
    b.driver.kick(0);  // a hostile driver kicks before DRIVER_OK (§3.1.1 forbids it)
    std::thread driver_ok([&] {
        b.driver.set_reg(mmio::kStatus, kAckDriver | status::kFeaturesOk | status::kDriverOk);
    });
    REQUIRE(eventually([&] { return (b.transport.status() & status::kDriverOk) != 0; }));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the activation is queued behind the hold
    release = true;
    driver_ok.join();
    settle(loop);
    CHECK(b.device.inactive_notifies == 0);
    CHECK(b.device.activations == 1);
    // The device works from here on (the early kick itself may be dropped).
    b.driver.set_reg(mmio::kStatus, 0);
    b.clear_rings();
    REQUIRE(b.driver.bring_up());
    b.expect_round_trip({1, 2, 3});
    CHECK(b.device.inactive_notifies == 0);
}

TEST_CASE("virtio-mmio: a QueueError in queue_notify fails that device only, until the driver resets it",
          "[virtio][mmio]") {
    EventLoop loop;
    TransportBench a(loop);
    TransportBench b(loop);
    REQUIRE(a.driver.bring_up());
    REQUIRE(b.driver.bring_up());

    SECTION("a malformed chain") {
        a.driver.queue(0).set_descriptor(0, {0x100000, 8, desc_flags::kNext, 0});  // loops
        a.driver.queue(0).publish(0);
        a.driver.kick(0);
    }
    SECTION("the device throws") {
        a.device.throw_on_notify = true;
        a.driver.kick(0);
    }
    REQUIRE(eventually([&] { return (a.transport.status() & status::kDeviceNeedsReset) != 0; }));
    CHECK((a.driver.reg(mmio::kInterruptStatus) & mmio::kInterruptConfigChange) != 0);
    CHECK(a.driver.reg(mmio::kConfigGeneration) == 1);
    CHECK(a.driver.take_interrupts() == 1);
    const int notifies = a.device.notifies;

    // The failed device gets no more kicks; its neighbour on the same loop still works.
    a.driver.kick(0);
    settle(loop);
    CHECK(a.device.notifies == notifies);
    b.expect_round_trip({5, 6, 7, 8});
    CHECK(b.driver.reg(mmio::kStatus) == (kAckDriver | status::kFeaturesOk | status::kDriverOk));

    // The driver resets the failed device (§2.1.2) and sets it up again.
    a.device.throw_on_notify = false;
    a.driver.set_reg(mmio::kStatus, 0);
    CHECK(a.device.resets == 1);
    a.clear_rings();
    REQUIRE(a.driver.bring_up());
    CHECK(a.driver.reg(mmio::kStatus) == (kAckDriver | status::kFeaturesOk | status::kDriverOk));
    a.expect_round_trip({1, 2, 3});
    b.expect_round_trip({4});
}

TEST_CASE("virtio-mmio: load_state continues a saved transport in a new one (snapshot restore)",
          "[virtio][mmio][snapshot]") {
    EventLoop loop;
    TransportBench b(loop);
    REQUIRE(b.driver.bring_up());
    b.expect_round_trip({1, 2, 3});
    b.expect_round_trip({4, 5});
    const MmioTransportState saved = b.transport.state();
    const std::vector<QueueState> queues = b.transport.queue_states();
    REQUIRE(queues[0].next_used == 2);

    // A new device and transport over the same guest memory, as a restored VMM has.
    test::EchoDevice device({16, 8});
    MmioTransport restored(device, b.memory, loop);
    restored.load_state(saved, queues);
    CHECK(restored.status() == saved.status);
    CHECK(restored.state().driver_features == saved.driver_features);
    CHECK(restored.queue_states()[0].next_avail == 2);
    CHECK(restored.queue_states()[1].desc_table == queues[1].desc_table);

    // The driver's next request is served by the restored device where the old one stopped.
    const auto posted = b.driver.post(0, {test::TestBuffer::in({9, 9, 9, 9}), test::TestBuffer::out(8)});
    const uint32_t queue0 = 0;
    restored.write(mmio::kQueueNotify, {reinterpret_cast<const uint8_t*>(&queue0), 4});
    REQUIRE(b.driver.wait_used(0, 3));
    CHECK(b.driver.queue(0).used(2).id == posted.head);
    CHECK(b.driver.read_guest(posted.writable_gpas[0], 4) == std::vector<uint8_t>{9, 9, 9, 9});
}

TEST_CASE("virtio-mmio: a kick the old VMM never read is replayed after load_state", "[virtio][mmio][snapshot]") {
    EventLoop loop;
    TransportBench b(loop);
    REQUIRE(b.driver.bring_up());
    b.expect_round_trip({1});
    // The driver posts a request and kicks, but the old VMM was paused before its device
    // thread read the ioeventfd: the request is in the ring only, and the driver (EVENT_IDX)
    // will not kick for it again.
    const auto posted = b.driver.post(0, {test::TestBuffer::in({7, 7, 7}), test::TestBuffer::out(8)});
    const MmioTransportState saved = b.transport.state();
    const std::vector<QueueState> queues = b.transport.queue_states();
    REQUIRE(queues[0].next_avail == 1);

    test::EchoDevice device({16, 8});
    MmioTransport restored(device, b.memory, loop);
    restored.load_state(saved, queues);
    REQUIRE(b.driver.wait_used(0, 2));
    CHECK(b.driver.queue(0).used(1).id == posted.head);
    CHECK(b.driver.read_guest(posted.writable_gpas[0], 3) == std::vector<uint8_t>{7, 7, 7});
}

TEST_CASE("virtio-mmio: load_state refuses saved state that does not fit, and stays reset", "[virtio][mmio][snapshot]") {
    EventLoop loop;
    TransportBench b(loop);
    REQUIRE(b.driver.bring_up());
    const MmioTransportState saved = b.transport.state();
    const std::vector<QueueState> queues = b.transport.queue_states();

    const auto refused = [&](MmioTransportState state, std::vector<QueueState> qs, const std::string& words) {
        test::EchoDevice device({16, 8});
        MmioTransport t(device, b.memory, loop);
        CHECK_THROWS_WITH(t.load_state(state, qs), Catch::Contains(words));
        CHECK(t.status() == 0);
        CHECK_FALSE(t.queue_states()[0].ready);
    };
    std::vector<QueueState> bad = queues;
    bad[0].size = 12;
    refused(saved, bad, "queue 0: size 12");
    bad = queues;
    bad[1].size = 32;  // QueueNumMax is 8
    refused(saved, bad, "queue 1: size 32");
    bad = queues;
    bad[0].used_ring = 16 * MiB - 8;  // runs past the end of guest RAM
    refused(saved, bad, "queue 0");
    refused(saved, {queues[0]}, "1 queues saved, the device has 2");
    MmioTransportState foreign = saved;
    foreign.driver_features |= 1ull << 50;
    refused(foreign, queues, "not within the offer");
    MmioTransportState unknown = saved;
    unknown.status |= 0x10;
    refused(unknown, queues, "unknown status bits");
}
