// A device that echoes each chain's readable bytes into its writable buffers: shows
// the transport, queue, chain I/O and event loop working together.
#include <catch2/catch.hpp>

#include "devices/virtio/mmio_devices.hpp"
#include "tests/unit/devices/virtio/echo_device.hpp"
#include "tests/unit/devices/virtio/test_driver.hpp"

using namespace nanovm;
using namespace nanovm::virtio;

TEST_CASE("an echo device round-trips a chain through the mmio transport and the event loop") {
    GuestMemory memory = GuestMemory::create(16 * MiB);
    EventLoop loop;
    test::EchoDevice device;
    MmioTransport transport(device, memory, loop);
    test::TestDriver driver(memory, transport);
    CHECK(driver.reg(mmio::kMagicValue) == mmio::kMagic);
    CHECK(driver.reg(mmio::kVersion) == 2);
    CHECK(driver.reg(mmio::kDeviceId) == 0xffff);
    REQUIRE(driver.bring_up());
    CHECK((transport.status() & status::kDriverOk) != 0);
    const auto posted = driver.post(0, {test::TestBuffer::in({1, 2, 3, 4, 5}), test::TestBuffer::out(8)});
    driver.kick(0);
    REQUIRE(driver.wait_used(0, 1));
    const UsedElement used = driver.queue(0).used(0);
    CHECK(used.id == posted.head);
    CHECK(used.len == 5);
    CHECK(driver.read_guest(posted.writable_gpas[0], 5) == std::vector<uint8_t>{1, 2, 3, 4, 5});
    CHECK(driver.take_interrupts() == 1);
    CHECK((driver.reg(mmio::kInterruptStatus) & mmio::kInterruptUsedRing) != 0);
}

TEST_CASE("virtio-mmio devices are declared on the kernel command line at 4 KiB windows from 0xd0000000, GSI 5 up") {
    CHECK(virtio_mmio_cmdline(0).empty());
    CHECK(virtio_mmio_cmdline(3) ==
          "virtio_mmio.device=4K@0xd0000000:5 virtio_mmio.device=4K@0xd0001000:6 virtio_mmio.device=4K@0xd0002000:7");
    CHECK_THROWS_AS(virtio_mmio_cmdline(kMaxVirtioDevices + 1), Error);
}
