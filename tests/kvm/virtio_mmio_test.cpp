// A probe guest reads the virtio-mmio registers of a device placed by MmioDevices:
// the accesses leave KVM as MMIO exits, cross the MMIO bus and reach the transport.
#include <catch2/catch.hpp>

#include "devices/bus.hpp"
#include "devices/virtio/mmio_devices.hpp"
#include "tests/kvm/probe.hpp"
#include "vmm/event_loop.hpp"
#include "vmm/kvm.hpp"
#include "vmm/machine.hpp"

using namespace nanovm;
using namespace nanovm::virtio;

namespace {

class IdleDevice : public VirtioDevice {
public:
    uint32_t device_id() const override { return device_id::kRng; }
    std::string name() const override { return "probe-device"; }
    uint64_t device_features() const override { return 1ull << 3; }
    std::vector<uint16_t> queue_max_sizes() const override { return {64, 128}; }
    void read_config(uint64_t offset, std::span<uint8_t> data) const override {
        for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(0xa0 + offset + i);
    }
    void activate(ActiveDevice&) override {}
    void queue_notify(uint16_t) override {}
    void reset() noexcept override {}
};

// Stops the machine on any port write (the probe's "done").
class StopOnOut : public PortIoHandler {
public:
    explicit StopOnOut(Machine& m) : machine_(m) {}
    void pio_read(uint16_t, std::span<uint8_t> data) override { std::fill(data.begin(), data.end(), 0xff); }
    void pio_write(uint16_t, std::span<const uint8_t>) override { machine_.request_stop("probe done"); }

private:
    Machine& machine_;
};

}  // namespace

TEST_CASE("a probe's reads of virtio-mmio registers reach the device model (magic, version, ids, queue sizes, config)",
          "[kvm][virtio]") {
    const Kvm kvm = Kvm::open();
    Machine machine(kvm, GuestMemory::create(16 * MiB), {.vcpus = 1, .irqchip = true});
    EventLoop loop;
    MmioBus mmio;
    MmioDevices devices(machine.vm(), machine.memory(), mmio, loop);
    devices.add(std::make_unique<IdleDevice>());
    devices.add(std::make_unique<IdleDevice>());
    CHECK(devices.kernel_cmdline() ==
          "virtio_mmio.device=4K@0xd0000000:5 virtio_mmio.device=4K@0xd0001000:6");

    // Second device (0xd0001000): copy registers to RAM at 0x8000.., then out 0x10.
    const std::vector<uint8_t> code = {
        0xa1, 0x00, 0x10, 0x00, 0xd0,              // mov eax, [0xd0001000]   MagicValue
        0xa3, 0x00, 0x80, 0x00, 0x00,              // mov [0x8000], eax
        0xa1, 0x04, 0x10, 0x00, 0xd0,              // mov eax, [0xd0001004]   Version
        0xa3, 0x04, 0x80, 0x00, 0x00,              // mov [0x8004], eax
        0xa1, 0x08, 0x10, 0x00, 0xd0,              // mov eax, [0xd0001008]   DeviceID
        0xa3, 0x08, 0x80, 0x00, 0x00,              // mov [0x8008], eax
        0xc7, 0x05, 0x30, 0x10, 0x00, 0xd0, 0x01, 0x00, 0x00, 0x00,  // mov dword [0xd0001030], 1  QueueSel
        0xa1, 0x34, 0x10, 0x00, 0xd0,              // mov eax, [0xd0001034]   QueueNumMax
        0xa3, 0x0c, 0x80, 0x00, 0x00,              // mov [0x800c], eax
        0xa1, 0x00, 0x11, 0x00, 0xd0,              // mov eax, [0xd0001100]   config bytes 0..3
        0xa3, 0x10, 0x80, 0x00, 0x00,              // mov [0x8010], eax
        0xc7, 0x05, 0x70, 0x10, 0x00, 0xd0, 0x01, 0x00, 0x00, 0x00,  // mov dword [0xd0001070], 1  Status = ACK
        0xe6, 0x10,                                // out 0x10, al
        0xf4, 0xeb, 0xfd,                          // hlt; jmp hlt
    };
    machine.memory().write_bytes(Gpa(0x1000), code);
    test::enter_flat32(machine.vcpu(0), 0x1000);
    StopOnOut pio(machine);
    const StopReason reason = test::run_bounded(machine, pio, mmio);
    INFO(reason.describe());
    REQUIRE(reason.kind == StopReason::Kind::requested);
    CHECK(machine.memory().read<uint32_t>(Gpa(0x8000)) == 0x74726976);
    CHECK(machine.memory().read<uint32_t>(Gpa(0x8004)) == 2);
    CHECK(machine.memory().read<uint32_t>(Gpa(0x8008)) == device_id::kRng);
    CHECK(machine.memory().read<uint32_t>(Gpa(0x800c)) == 128);
    CHECK(machine.memory().read<uint32_t>(Gpa(0x8010)) == 0xa3a2a1a0);
    CHECK(devices.transport(1).status() == status::kAcknowledge);
    CHECK(devices.transport(0).status() == 0);
}
