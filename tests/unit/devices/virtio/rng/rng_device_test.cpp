// virtio-rng (virtio 1.2 §5.4) through the mmio transport and the event loop, against
// simulated guest memory.
#include <catch2/catch.hpp>

#include <algorithm>

#include "devices/virtio/rng/rng_device.hpp"
#include "tests/unit/devices/virtio/test_driver.hpp"

using namespace nanovm;
using namespace nanovm::virtio;

namespace {

struct RngRig {
    GuestMemory memory = GuestMemory::create(16 * MiB);
    EventLoop loop;
    RngDevice device;
    MmioTransport transport{device, memory, loop};
    test::TestDriver driver{memory, transport};
};

bool all_zero(const std::vector<uint8_t>& bytes) {
    return std::all_of(bytes.begin(), bytes.end(), [](uint8_t b) { return b == 0; });
}

}  // namespace

TEST_CASE("virtio-rng: id 4, no features of its own, config space reads zero", "[devices][virtio][rng]") {
    RngRig rig;
    CHECK(rig.driver.reg(mmio::kDeviceId) == device_id::kRng);
    CHECK((rig.driver.device_features() & 0xffffff) == 0);
    CHECK(rig.driver.reg(mmio::kConfig) == 0);
}

TEST_CASE("virtio-rng: a writable buffer is filled with random bytes, used length = its size",
          "[devices][virtio][rng]") {
    RngRig rig;
    REQUIRE(rig.driver.bring_up());
    const auto posted = rig.driver.post(0, {test::TestBuffer::out(64)});
    rig.driver.kick(0);
    REQUIRE(rig.driver.wait_used(0, 1));
    CHECK(rig.driver.queue(0).used(0).id == posted.head);
    CHECK(rig.driver.queue(0).used(0).len == 64);
    CHECK_FALSE(all_zero(rig.driver.read_guest(posted.writable_gpas[0], 64)));
    CHECK(rig.driver.take_interrupts() == 1);
    CHECK(rig.device.save_state().requests == 1);
    CHECK(rig.device.save_state().bytes == 64);
}

TEST_CASE("virtio-rng: two requests get different bytes", "[devices][virtio][rng]") {
    RngRig rig;
    REQUIRE(rig.driver.bring_up());
    const auto a = rig.driver.post(0, {test::TestBuffer::out(32)});
    const auto b = rig.driver.post(0, {test::TestBuffer::out(32)});
    rig.driver.kick(0);
    REQUIRE(rig.driver.wait_used(0, 2));
    CHECK(rig.driver.read_guest(a.writable_gpas[0], 32) != rig.driver.read_guest(b.writable_gpas[0], 32));
}

TEST_CASE("virtio-rng: a chain of several writable buffers is filled front to back", "[devices][virtio][rng]") {
    RngRig rig;
    REQUIRE(rig.driver.bring_up());
    const auto posted = rig.driver.post(
        0, {test::TestBuffer::in({1, 2, 3}), test::TestBuffer::out(7), test::TestBuffer::out(100),
            test::TestBuffer::out(1)});
    rig.driver.kick(0);
    REQUIRE(rig.driver.wait_used(0, 1));
    CHECK(rig.driver.queue(0).used(0).len == 108);
    CHECK_FALSE(all_zero(rig.driver.read_guest(posted.writable_gpas[1], 100)));
}

TEST_CASE("virtio-rng: one request gets at most 64 KiB", "[devices][virtio][rng]") {
    RngRig rig;
    REQUIRE(rig.driver.bring_up());
    const auto posted = rig.driver.post(0, {test::TestBuffer::out(200 * 1024)});
    rig.driver.kick(0);
    REQUIRE(rig.driver.wait_used(0, 1));
    CHECK(rig.driver.queue(0).used(0).len == RngDevice::kMaxRequestBytes);
    // Nothing past the bound was touched.
    CHECK(all_zero(rig.driver.read_guest(posted.writable_gpas[0] + RngDevice::kMaxRequestBytes, 4096)));
}

TEST_CASE("virtio-rng: a read-only chain is returned with used length 0 and the device keeps working",
          "[devices][virtio][rng]") {
    RngRig rig;
    REQUIRE(rig.driver.bring_up());
    const auto ro = rig.driver.post(0, {test::TestBuffer::in({1, 2, 3, 4})});
    rig.driver.kick(0);
    REQUIRE(rig.driver.wait_used(0, 1));
    CHECK(rig.driver.queue(0).used(0).id == ro.head);
    CHECK(rig.driver.queue(0).used(0).len == 0);
    CHECK((rig.transport.status() & status::kDeviceNeedsReset) == 0);
    rig.driver.post(0, {test::TestBuffer::out(16)});
    rig.driver.kick(0);
    REQUIRE(rig.driver.wait_used(0, 2));
    CHECK(rig.driver.queue(0).used(1).len == 16);
}

TEST_CASE("virtio-rng: state round-trips through save_state/load_state", "[devices][virtio][rng]") {
    RngDevice device;
    device.load_state({7, 4096});
    CHECK(device.save_state().requests == 7);
    CHECK(device.save_state().bytes == 4096);
}
