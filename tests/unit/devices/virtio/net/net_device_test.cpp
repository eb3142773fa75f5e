// virtio-net (virtio 1.2 §5.1) through the mmio transport and the event loop, against
// simulated guest memory, with a socketpair as the backend (tests/.../net_rig.hpp).
// The tap itself is exercised in tap_test.cpp.
#include <catch2/catch.hpp>

#include <sys/resource.h>

#include <thread>

#include "tests/unit/devices/virtio/net/net_rig.hpp"

using namespace nanovm;
using namespace nanovm::virtio;
using namespace nanovm::virtio::net;
using test::TestBuffer;
using namespace std::chrono_literals;

namespace {

constexpr uint16_t kRx = 0, kTx = 1;

std::vector<uint8_t> slice(const std::vector<uint8_t>& v, size_t from, size_t to) {
    return {v.begin() + static_cast<long>(from), v.begin() + static_cast<long>(to)};
}

std::vector<uint8_t> concat(std::vector<uint8_t> a, const std::vector<uint8_t>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
}

// The header the device must put in front of every received frame: all zero but
// num_buffers = 1 (§5.1.6.4.1).
const std::vector<uint8_t> kRxHeader = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0};

// CPU time (user + system) this process has used.
std::chrono::microseconds cpu_time() {
    rusage r{};
    ::getrusage(RUSAGE_SELF, &r);
    return std::chrono::seconds(r.ru_utime.tv_sec + r.ru_stime.tv_sec) +
           std::chrono::microseconds(r.ru_utime.tv_usec + r.ru_stime.tv_usec);
}

uint32_t config32(test::TestDriver& d, uint32_t offset) { return d.reg(mmio::kConfig + offset); }

}  // namespace

TEST_CASE("virtio-net: id 1; offers MAC and STATUS only; config space holds the MAC, link up, one queue pair",
          "[devices][virtio][net]") {
    test::NetRig rig(MacAddress::parse("02:11:22:33:44:55"));
    CHECK(rig.driver.reg(mmio::kDeviceId) == device_id::kNet);
    const uint64_t features = rig.driver.device_features();
    CHECK((features & 0xffffffull) == (net::feature::kMac | net::feature::kStatus));
    for (uint16_t q = 0; q < 2; ++q) {
        rig.driver.set_reg(mmio::kQueueSel, q);
        CHECK(rig.driver.reg(mmio::kQueueNumMax) == NetDevice::kQueueSize);
    }
    CHECK(rig.transport.queue_count() == 2);
    CHECK(config32(rig.driver, 0) == 0x33221102u);                 // mac[0..3]
    CHECK(config32(rig.driver, 4) == (0x5544u | (kStatusLinkUp << 16)));  // mac[4..5], status
    CHECK(config32(rig.driver, 8) == 1);                           // max_virtqueue_pairs, mtu = 0
    CHECK(config32(rig.driver, 12) == 0);
    uint8_t byte = 0xee;  // a one-byte read in the middle, as Linux's virtio_cread_bytes does
    rig.transport.read(mmio::kConfig + 5, {&byte, 1});
    CHECK(byte == 0x55);
}

TEST_CASE("virtio-net: without a MAC option the device gets a random locally administered one",
          "[devices][virtio][net]") {
    test::NetRig a(std::nullopt), b(std::nullopt);
    CHECK(a.device.mac().bytes[0] == 0x02);
    CHECK(a.device.mac() != b.device.mac());
}

TEST_CASE("virtio-net: a transmitted frame reaches the backend behind a zero header; used length 0",
          "[devices][virtio][net]") {
    test::NetRig rig;
    REQUIRE(rig.driver.bring_up());
    const auto frame = test::test_frame(1514);
    const auto packet = test::with_header(frame);
    // Header split over two descriptors, the frame over two more.
    const auto posted = rig.driver.post(kTx, {TestBuffer::in(slice(packet, 0, 5)), TestBuffer::in(slice(packet, 5, 40)),
                                              TestBuffer::in(slice(packet, 40, 700)),
                                              TestBuffer::in(slice(packet, 700, packet.size()))});
    rig.driver.kick(kTx);
    REQUIRE(rig.driver.wait_used(kTx, 1));
    CHECK(rig.driver.queue(kTx).used(0).id == posted.head);
    CHECK(rig.driver.queue(kTx).used(0).len == 0);
    const auto got = test::recv_message(rig.host.get(), 2s);
    REQUIRE(got);
    CHECK(*got == packet);
    CHECK(rig.driver.take_interrupts() >= 1);
    const NetState s = rig.device.save_state();
    CHECK(s.tx_frames == 1);
    CHECK(s.tx_bytes == 1514);
    CHECK(s.tx_dropped == 0);
}

TEST_CASE("virtio-net: malformed transmit chains are dropped with used length 0 and the device keeps working",
          "[devices][virtio][net]") {
    test::NetRig rig;
    REQUIRE(rig.driver.bring_up());
    const auto frame = test::test_frame(60);
    rig.driver.post(kTx, {TestBuffer::in(std::vector<uint8_t>(10, 0))});                       // shorter than a header
    rig.driver.post(kTx, {TestBuffer::in(std::vector<uint8_t>(12 + 13, 0))});                  // no Ethernet header
    rig.driver.post(kTx, {TestBuffer::in(test::with_header(frame, kHdrFlagNeedsCsum))});       // CSUM not negotiated
    rig.driver.post(kTx, {TestBuffer::in(test::with_header(frame, kHdrFlagDataValid))});       // never from a driver
    rig.driver.post(kTx, {TestBuffer::in(test::with_header(frame, 0, 1))});                    // GSO_TCPV4
    rig.driver.post(kTx, {TestBuffer::in(test::with_header(test::test_frame(kMaxFrameBytes + 1)))});  // too big
    rig.driver.post(kTx, {TestBuffer::out(1514)});                                             // nothing readable
    rig.driver.post(kTx, {TestBuffer::in(test::with_header(frame))});                          // fine
    rig.driver.kick(kTx);
    REQUIRE(rig.driver.wait_used(kTx, 8));
    for (uint16_t i = 0; i < 8; ++i) CHECK(rig.driver.queue(kTx).used(i).len == 0);
    CHECK((rig.transport.status() & status::kDeviceNeedsReset) == 0);
    const auto got = test::recv_message(rig.host.get(), 2s);
    REQUIRE(got);
    CHECK(*got == test::with_header(frame));
    CHECK_FALSE(test::recv_message(rig.host.get(), 50ms));
    CHECK(rig.device.save_state().tx_dropped == 7);
    CHECK(rig.device.save_state().tx_frames == 1);
}

TEST_CASE("virtio-net: the largest frame (65550 bytes) is sent whole", "[devices][virtio][net]") {
    test::NetRig rig;
    int big = 1 << 20;  // the host end must be able to queue it
    ::setsockopt(rig.host.get(), SOL_SOCKET, SO_RCVBUF, &big, sizeof(big));
    REQUIRE(rig.driver.bring_up());
    const auto packet = test::with_header(test::test_frame(kMaxFrameBytes));
    rig.driver.post(kTx, {TestBuffer::in(packet)});
    rig.driver.kick(kTx);
    REQUIRE(rig.driver.wait_used(kTx, 1));
    const auto got = test::recv_message(rig.host.get(), 2s);
    REQUIRE(got);
    CHECK(got->size() == kMaxPacketBytes);
    CHECK(*got == packet);
}

TEST_CASE("virtio-net: a frame from the backend lands in a receive chain behind a header with num_buffers 1",
          "[devices][virtio][net]") {
    test::NetRig rig;
    REQUIRE(rig.driver.bring_up());
    const auto posted = rig.driver.post(kRx, {TestBuffer::out(1526)});
    // Garbage where the header goes: the device must write all 12 bytes.
    rig.memory.write_bytes(Gpa(posted.writable_gpas[0]), std::vector<uint8_t>(12, 0xee));
    rig.driver.kick(kRx);
    const auto frame = test::test_frame(1000, 7);
    rig.host_send(test::with_header(frame, kHdrFlagDataValid));  // a tap may say "checksum verified"
    REQUIRE(rig.driver.wait_used(kRx, 1));
    CHECK(rig.driver.queue(kRx).used(0).id == posted.head);
    REQUIRE(rig.driver.queue(kRx).used(0).len == 12 + 1000);
    CHECK(rig.driver.read_guest(posted.writable_gpas[0], 1012) == concat(kRxHeader, frame));
    CHECK(rig.driver.take_interrupts() >= 1);
    const NetState s = rig.device.save_state();
    CHECK(s.rx_frames == 1);
    CHECK(s.rx_bytes == 1000);
}

TEST_CASE("virtio-net: a receive chain of small buffers gets the header and the frame across them",
          "[devices][virtio][net]") {
    test::NetRig rig;
    REQUIRE(rig.driver.bring_up());
    const auto posted =
        rig.driver.post(kRx, {TestBuffer::out(4), TestBuffer::out(10), TestBuffer::out(100), TestBuffer::out(2000)});
    rig.driver.kick(kRx);
    const auto frame = test::test_frame(300, 3);
    rig.host_send(test::with_header(frame));
    REQUIRE(rig.driver.wait_used(kRx, 1));
    REQUIRE(rig.driver.queue(kRx).used(0).len == 312);
    std::vector<uint8_t> got;
    const size_t sizes[] = {4, 10, 100, 198};
    for (size_t i = 0; i < 4; ++i) got = concat(got, rig.driver.read_guest(posted.writable_gpas[i], sizes[i]));
    CHECK(got == concat(kRxHeader, frame));
}

TEST_CASE("virtio-net: a frame larger than the receive chain is dropped; the chain takes the next frame",
          "[devices][virtio][net]") {
    test::NetRig rig;
    REQUIRE(rig.driver.bring_up());
    const auto posted = rig.driver.post(kRx, {TestBuffer::out(12 + 100)});
    rig.driver.kick(kRx);
    rig.host_send(test::with_header(test::test_frame(101)));
    rig.host_send(test::with_header(test::test_frame(kMaxFrameBytes)));
    const auto small = test::test_frame(60, 9);
    rig.host_send(test::with_header(small));
    REQUIRE(rig.driver.wait_used(kRx, 1));
    CHECK(rig.driver.queue(kRx).used(0).len == 72);
    CHECK(rig.driver.read_guest(posted.writable_gpas[0], 72) == concat(kRxHeader, small));
    CHECK(rig.device.save_state().rx_dropped == 2);
    CHECK(rig.device.save_state().rx_frames == 1);
    CHECK((rig.transport.status() & status::kDeviceNeedsReset) == 0);
}

TEST_CASE("virtio-net: received frames with checksum or GSO metadata are dropped (not negotiated)",
          "[devices][virtio][net]") {
    test::NetRig rig;
    REQUIRE(rig.driver.bring_up());
    rig.driver.post(kRx, {TestBuffer::out(1526)});
    rig.driver.kick(kRx);
    rig.host_send(test::with_header(test::test_frame(100), kHdrFlagNeedsCsum));
    rig.host_send(test::with_header(test::test_frame(100), 0, 1));
    rig.host_send(std::vector<uint8_t>(12 + 5, 0));  // no Ethernet header
    rig.host_send(test::with_header(test::test_frame(80)));
    REQUIRE(rig.driver.wait_used(kRx, 1));
    CHECK(rig.driver.queue(kRx).used(0).len == 92);
    CHECK(rig.device.save_state().rx_dropped == 3);
}

TEST_CASE("virtio-net: receive chains too small for a header are returned unused", "[devices][virtio][net]") {
    test::NetRig rig;
    REQUIRE(rig.driver.bring_up());
    const auto tiny = rig.driver.post(kRx, {TestBuffer::out(11)});
    const auto ro = rig.driver.post(kRx, {TestBuffer::in({1, 2, 3})});
    const auto good = rig.driver.post(kRx, {TestBuffer::out(1526)});
    rig.driver.kick(kRx);
    rig.host_send(test::with_header(test::test_frame(64)));
    REQUIRE(rig.driver.wait_used(kRx, 3));
    CHECK(rig.driver.queue(kRx).used(0).id == tiny.head);
    CHECK(rig.driver.queue(kRx).used(0).len == 0);
    CHECK(rig.driver.queue(kRx).used(1).id == ro.head);
    CHECK(rig.driver.queue(kRx).used(1).len == 0);
    CHECK(rig.driver.queue(kRx).used(2).id == good.head);
    CHECK(rig.driver.queue(kRx).used(2).len == 76);
}

TEST_CASE("virtio-net: with no receive buffers frames wait in the backend without a busy loop, then all arrive",
          "[devices][virtio][net]") {
    test::NetRig rig;
    REQUIRE(rig.driver.bring_up());
    std::vector<std::vector<uint8_t>> frames;
    for (uint8_t i = 0; i < 3; ++i) {
        frames.push_back(test::test_frame(200 + i, i));
        rig.host_send(test::with_header(frames.back()));
    }
    std::this_thread::sleep_for(50ms);  // the device finds no buffers and stops watching
    const auto before = cpu_time();
    std::this_thread::sleep_for(300ms);
    const auto spent = cpu_time() - before;
    CHECK(spent < 60ms);  // a level-triggered EPOLLIN loop would burn ~300 ms here
    CHECK(rig.driver.queue(kRx).used_idx() == 0);
    std::vector<uint64_t> gpas;
    for (int i = 0; i < 3; ++i) gpas.push_back(rig.driver.post(kRx, {TestBuffer::out(1526)}).writable_gpas[0]);
    rig.driver.kick(kRx);
    REQUIRE(rig.driver.wait_used(kRx, 3));
    for (uint16_t i = 0; i < 3; ++i) {
        CHECK(rig.driver.queue(kRx).used(i).len == 12 + frames[i].size());
        CHECK(rig.driver.read_guest(gpas[i], 12 + frames[i].size()) == concat(kRxHeader, frames[i]));
    }
    CHECK(rig.device.save_state().rx_dropped == 0);
}

TEST_CASE("virtio-net: receiving resumes when buffers are added while frames keep coming (EVENT_IDX and not)",
          "[devices][virtio][net]") {
    const bool event_idx = GENERATE(true, false);
    test::NetRig rig;
    uint64_t features = rig.driver.device_features();
    if (!event_idx) features &= ~virtio::feature::kRingEventIdx;
    REQUIRE(rig.driver.bring_up(features));
    uint16_t expected = 0;
    for (int round = 0; round < 20; ++round) {
        rig.driver.post(kRx, {TestBuffer::out(1526)});
        rig.driver.post(kRx, {TestBuffer::out(1526)});
        rig.driver.kick(kRx);
        rig.host_send(test::with_header(test::test_frame(100)));
        rig.host_send(test::with_header(test::test_frame(100)));
        expected = static_cast<uint16_t>(expected + 2);
        REQUIRE(rig.driver.wait_used(kRx, expected));
    }
}

TEST_CASE("virtio-net: when the backend is full, transmit waits for EPOLLOUT and loses nothing",
          "[devices][virtio][net]") {
    test::NetRig rig(MacAddress::parse("02:00:00:00:00:aa"), /*device_sndbuf=*/4096);
    REQUIRE(rig.driver.bring_up());
    constexpr uint16_t kFrames = 100;
    for (uint16_t i = 0; i < kFrames; ++i)
        rig.driver.post(kTx, {TestBuffer::in(test::with_header(test::test_frame(1000, static_cast<uint8_t>(i))))});
    rig.driver.kick(kTx);
    std::this_thread::sleep_for(100ms);
    const uint16_t stalled = rig.driver.queue(kTx).used_idx();
    CHECK(stalled < kFrames);  // the socket took only a few
    for (uint16_t i = 0; i < kFrames; ++i) {
        const auto got = test::recv_message(rig.host.get(), 2s);
        REQUIRE(got);
        CHECK(*got == test::with_header(test::test_frame(1000, static_cast<uint8_t>(i))));
    }
    REQUIRE(rig.driver.wait_used(kTx, kFrames));
    CHECK(rig.device.save_state().tx_frames == kFrames);
    CHECK(rig.device.save_state().tx_dropped == 0);
}

TEST_CASE("virtio-net: when the backend closes the link goes down and transmit chains are completed",
          "[devices][virtio][net]") {
    test::NetRig rig;
    REQUIRE(rig.driver.bring_up());
    rig.driver.post(kRx, {TestBuffer::out(1526)});
    rig.driver.kick(kRx);
    rig.host.reset();
    const auto end = std::chrono::steady_clock::now() + 2s;
    while (!(rig.driver.reg(mmio::kInterruptStatus) & mmio::kInterruptConfigChange) &&
           std::chrono::steady_clock::now() < end)
        std::this_thread::sleep_for(1ms);
    REQUIRE((rig.driver.reg(mmio::kInterruptStatus) & mmio::kInterruptConfigChange) != 0);
    CHECK_FALSE(rig.device.link_up());
    CHECK((config32(rig.driver, 4) >> 16) == 0);  // status: LINK_UP clear
    CHECK((rig.transport.status() & status::kDeviceNeedsReset) == 0);
    rig.driver.post(kTx, {TestBuffer::in(test::with_header(test::test_frame(60)))});
    rig.driver.kick(kTx);
    REQUIRE(rig.driver.wait_used(kTx, 1));
    CHECK(rig.device.save_state().tx_dropped == 1);
}

TEST_CASE("virtio-net: after a device reset nothing is received until the driver brings it up again",
          "[devices][virtio][net]") {
    test::NetRig rig;
    REQUIRE(rig.driver.bring_up());
    rig.driver.set_reg(mmio::kStatus, 0);
    const auto frame = test::test_frame(90, 5);
    rig.host_send(test::with_header(frame));
    std::this_thread::sleep_for(50ms);
    REQUIRE(rig.driver.bring_up());
    const auto posted = rig.driver.post(kRx, {TestBuffer::out(1526)});
    rig.driver.kick(kRx);
    REQUIRE(rig.driver.wait_used(kRx, 1));
    CHECK(rig.driver.read_guest(posted.writable_gpas[0], 102) == concat(kRxHeader, frame));
}

TEST_CASE("virtio-net: a malformed receive ring fails the device and it stops watching the backend",
          "[devices][virtio][net]") {
    test::NetRig rig;
    REQUIRE(rig.driver.bring_up());
    rig.driver.queue(kRx).set_descriptor(0, {0x100000, 1526, desc_flags::kWrite | desc_flags::kNext, 999});
    rig.driver.queue(kRx).publish(0);
    rig.driver.kick(kRx);
    rig.host_send(test::with_header(test::test_frame(100)));
    const auto end = std::chrono::steady_clock::now() + 2s;
    while (!(rig.transport.status() & status::kDeviceNeedsReset) && std::chrono::steady_clock::now() < end)
        std::this_thread::sleep_for(1ms);
    REQUIRE((rig.transport.status() & status::kDeviceNeedsReset) != 0);
    const auto before = cpu_time();
    std::this_thread::sleep_for(200ms);
    CHECK(cpu_time() - before < 40ms);  // the unread frame does not wake the loop again and again
}

TEST_CASE("virtio-net: save_state holds the MAC and counters; load_state restores them", "[devices][virtio][net]") {
    test::NetRig rig;
    NetState s;
    s.mac = MacAddress::parse("02:de:ad:be:ef:01");
    s.rx_frames = 1;
    s.rx_bytes = 2;
    s.rx_dropped = 3;
    s.tx_frames = 4;
    s.tx_bytes = 5;
    s.tx_dropped = 6;
    rig.device.load_state(s);
    const NetState t = rig.device.save_state();
    CHECK(t.mac == s.mac);
    CHECK(t.rx_frames == 1);
    CHECK(t.rx_bytes == 2);
    CHECK(t.rx_dropped == 3);
    CHECK(t.tx_frames == 4);
    CHECK(t.tx_bytes == 5);
    CHECK(t.tx_dropped == 6);
    CHECK(config32(rig.driver, 0) == 0xbeadde02u);
}

namespace {

// Publishes on `queue` one chain whose indirect table has one descriptor per piece
// (writable pieces when `writable`). Returns the GPA of each piece.
std::vector<uint64_t> post_indirect(test::NetRig& rig, uint16_t queue, const std::vector<std::vector<uint8_t>>& pieces,
                                    bool writable) {
    const uint64_t table = rig.driver.alloc(16 * pieces.size());
    std::vector<uint64_t> gpas;
    for (size_t i = 0; i < pieces.size(); ++i) {
        const uint64_t gpa = rig.driver.alloc(pieces[i].size(), pieces[i].data());
        gpas.push_back(gpa);
        Descriptor d{gpa, static_cast<uint32_t>(pieces[i].size()), 0, 0};
        if (writable) d.flags |= desc_flags::kWrite;
        if (i + 1 < pieces.size()) {
            d.flags |= desc_flags::kNext;
            d.next = static_cast<uint16_t>(i + 1);
        }
        rig.memory.write(Gpa(table + 16 * i), d);
    }
    rig.driver.queue(queue).set_descriptor(100, {table, static_cast<uint32_t>(16 * pieces.size()),
                                                 desc_flags::kIndirect, 0});
    rig.driver.queue(queue).publish(100);
    return gpas;
}

}  // namespace

// The longest chain the parser passes: the indirect descriptor + 1023 in its table.
TEST_CASE("virtio-net: a transmit chain of 1023 buffers (the writev limit with our header) is sent whole",
          "[devices][virtio][net]") {
    test::NetRig rig;
    REQUIRE(rig.driver.bring_up());
    const auto packet = test::with_header(test::test_frame(1 + 1022 * 2));
    std::vector<std::vector<uint8_t>> pieces{slice(packet, 0, 13)};  // the header and one frame byte
    for (size_t at = 13; at < packet.size(); at += 2) pieces.push_back(slice(packet, at, at + 2));
    REQUIRE(pieces.size() == kMaxChainDescriptors - 1);
    post_indirect(rig, kTx, pieces, false);
    rig.driver.kick(kTx);
    REQUIRE(rig.driver.wait_used(kTx, 1));
    const auto got = test::recv_message(rig.host.get(), 2s);
    REQUIRE(got);
    CHECK(*got == packet);
}

TEST_CASE("virtio-net: a receive chain of 1023 two-byte buffers takes a frame across them",
          "[devices][virtio][net]") {
    test::NetRig rig;
    REQUIRE(rig.driver.bring_up());
    const auto gpas = post_indirect(rig, kRx, std::vector<std::vector<uint8_t>>(1023, {0, 0}), true);
    rig.driver.kick(kRx);
    const auto frame = test::test_frame(2000, 4);
    rig.host_send(test::with_header(frame));
    REQUIRE(rig.driver.wait_used(kRx, 1));
    REQUIRE(rig.driver.queue(kRx).used(0).len == 2012);
    std::vector<uint8_t> got;
    for (size_t i = 0; i < 1006; ++i) got = concat(got, rig.driver.read_guest(gpas[i], 2));
    CHECK(got == concat(kRxHeader, frame));
}

TEST_CASE("virtio-net: more transmit chains than one turn's budget are all sent, in order",
          "[devices][virtio][net]") {
    test::NetRig rig;
    int big = 4 << 20;
    ::setsockopt(rig.host.get(), SOL_SOCKET, SO_RCVBUF, &big, sizeof(big));
    REQUIRE(rig.driver.bring_up());
    constexpr uint16_t kFrames = NetDevice::kQueueSize - 1;
    static_assert(kFrames > NetDevice::kTxBudget);
    for (uint16_t i = 0; i < kFrames; ++i)
        rig.driver.post(kTx, {TestBuffer::in(test::with_header(test::test_frame(60, static_cast<uint8_t>(i))))});
    rig.driver.kick(kTx);
    for (uint16_t i = 0; i < kFrames; ++i) {
        const auto got = test::recv_message(rig.host.get(), 2s);
        REQUIRE(got);
        REQUIRE(*got == test::with_header(test::test_frame(60, static_cast<uint8_t>(i))));
    }
    REQUIRE(rig.driver.wait_used(kTx, kFrames));
}

TEST_CASE("virtio-net: transmit chains parked on a full backend are completed when the backend closes",
          "[devices][virtio][net]") {
    test::NetRig rig(MacAddress::parse("02:00:00:00:00:aa"), /*device_sndbuf=*/4096);
    REQUIRE(rig.driver.bring_up(rig.driver.device_features() & ~virtio::feature::kRingEventIdx));
    for (uint16_t i = 0; i < 50; ++i) rig.driver.post(kTx, {TestBuffer::in(test::with_header(test::test_frame(1000)))});
    rig.driver.kick(kTx);
    std::this_thread::sleep_for(100ms);
    REQUIRE(rig.driver.queue(kTx).used_idx() < 50);
    rig.host.reset();
    REQUIRE(rig.driver.wait_used(kTx, 50));
    CHECK_FALSE(rig.device.link_up());
    CHECK(rig.device.save_state().tx_frames + rig.device.save_state().tx_dropped == 50);
}
