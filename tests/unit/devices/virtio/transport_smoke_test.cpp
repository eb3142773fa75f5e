// A device that echoes each chain's readable bytes into its writable buffers: shows
// the transport, queue, chain I/O and event loop working together.
#include <catch2/catch.hpp>

#include "devices/virtio/chain_io.hpp"
#include "tests/unit/devices/virtio/test_driver.hpp"

using namespace nanovm;
using namespace nanovm::virtio;

namespace {

class EchoDevice : public VirtioDevice {
public:
    uint32_t device_id() const override { return 0xffff; }
    std::string name() const override { return "echo"; }
    uint64_t device_features() const override { return 0; }
    std::vector<uint16_t> queue_max_sizes() const override { return {16}; }
    void read_config(uint64_t offset, std::span<uint8_t> data) const override {
        for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(offset + i);
    }
    void activate(ActiveDevice& active) override { active_ = &active; }
    void queue_notify(uint16_t q) override {
        Virtqueue& queue = active_->queues[q];
        while (auto chain = queue.pop(active_->memory)) {
            ChainReader in(active_->memory, *chain);
            ChainWriter out(active_->memory, *chain);
            std::vector<uint8_t> bytes(in.remaining());
            in.read(bytes);
            out.write(bytes);
            queue.push_used(active_->memory, chain->head, static_cast<uint32_t>(out.written()));
        }
        if (queue.needs_interrupt(active_->memory)) active_->link.signal_used();
    }
    void reset() noexcept override { active_ = nullptr; }
    ActiveDevice* active_ = nullptr;
};

}  // namespace

TEST_CASE("an echo device round-trips a chain through the mmio transport and the event loop") {
    GuestMemory memory = GuestMemory::create(16 * MiB);
    EventLoop loop;
    EchoDevice device;
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
