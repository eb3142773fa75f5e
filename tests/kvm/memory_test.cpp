// Guest memory seen from both sides: guest writes land in GuestMemory, the dirty log
// names exactly the written pages, and GPAs outside RAM reach the MMIO bus.
#include <catch2/catch.hpp>

#include <cstdint>
#include <sys/eventfd.h>
#include <unistd.h>

#include <set>
#include <vector>

#include "devices/bus.hpp"
#include "tests/kvm/probe.hpp"
#include "vmm/kvm.hpp"
#include "vmm/machine.hpp"
#include "vmm/vm.hpp"

using namespace nanovm;

namespace {

// Pages set in a dirty bitmap (bit i = page i of the slot), as GPAs.
std::set<uint64_t> dirty_pages(const std::vector<uint64_t>& bitmap) {
    std::set<uint64_t> dirty;
    for (uint64_t word = 0; word < bitmap.size(); ++word)
        for (uint64_t bit = 0; bit < 64; ++bit)
            if (bitmap[word] >> bit & 1) dirty.insert((word * 64 + bit) * kPageSize);
    return dirty;
}

}  // namespace

TEST_CASE("guest writes to 5 pages of a 16 MiB slot show in GuestMemory and exactly in the dirty log",
          "[kvm][memory]") {
    const Kvm kvm = Kvm::open();
    Vm vm(kvm);
    vm.set_tss_addr();
    GuestMemory memory = GuestMemory::create(16 * MiB);
    vm.map_memory(memory, /*log_dirty_pages=*/true);
    const std::vector<uint8_t> code = {
        0xe6, 0x10,                    // out 0x10, al  (started: the VMM clears the log)
        0xb8, 0xef, 0xbe, 0xad, 0xde,  // mov eax, 0xdeadbeef
        0xa3, 0x00, 0x50, 0x00, 0x00,  // mov [0x00005000], eax
        0xa3, 0x00, 0x30, 0x12, 0x00,  // mov [0x00123000], eax
        0xa3, 0x00, 0x00, 0x40, 0x00,  // mov [0x00400000], eax
        0xa3, 0x00, 0xc0, 0xab, 0x00,  // mov [0x00abc000], eax
        0xa3, 0xfc, 0xff, 0xff, 0x00,  // mov [0x00fffffc], eax  (last dword of the slot)
        0xe6, 0x11,                    // out 0x11, al  (done: the VMM reads the log)
        0xf4,                          // hlt
    };
    memory.write_bytes(Gpa(0x1000), code);
    Vcpu vcpu = vm.create_vcpu(0);
    test::enter_flat32(vcpu, 0x1000);
    kvm_run* run = vcpu.run_data();

    REQUIRE(vcpu.run());
    REQUIRE(run->exit_reason == KVM_EXIT_IO);
    REQUIRE(run->io.port == 0x10);
    // KVM marks a page dirty when a read fault maps it writable: the code page, on its
    // first fetch. Clearing the log now write-protects everything again.
    vm.get_dirty_log(0, 16 * MiB);

    REQUIRE(vcpu.run());
    REQUIRE(run->exit_reason == KVM_EXIT_IO);
    REQUIRE(run->io.port == 0x11);
    const std::vector<uint64_t> bitmap = vm.get_dirty_log(0, 16 * MiB);
    REQUIRE(bitmap.size() == 16 * MiB / kPageSize / 64);
    CHECK(dirty_pages(bitmap) == std::set<uint64_t>{0x5000, 0x123000, 0x400000, 0xabc000, 0xfff000});
    for (uint64_t gpa : {0x5000, 0x123000, 0x400000, 0xabc000, 0xfffffc})
        CHECK(memory.read<uint32_t>(Gpa(gpa)) == 0xdeadbeef);

    REQUIRE(vcpu.run());
    CHECK(run->exit_reason == KVM_EXIT_HLT);
    // KVM_GET_DIRTY_LOG cleared the log, and nothing was written since.
    CHECK(dirty_pages(vm.get_dirty_log(0, 16 * MiB)).empty());
}

TEST_CASE("a Machine with log_dirty_pages registers its memslots for dirty logging", "[kvm][memory]") {
    const Kvm kvm = Kvm::open();
    Machine machine(kvm, GuestMemory::create(16 * MiB), {.vcpus = 1, .irqchip = false, .log_dirty_pages = true});
    const std::vector<uint8_t> code = {
        0xb8, 0xef, 0xbe, 0xad, 0xde,  // mov eax, 0xdeadbeef
        0xa3, 0x00, 0x00, 0x80, 0x00,  // mov [0x00800000], eax
        0xf4,                          // hlt
    };
    machine.memory().write_bytes(Gpa(0x1000), code);
    test::enter_flat32(machine.vcpu(0), 0x1000);
    test::RecordingPio pio;
    test::RecordingMmio mmio;
    const StopReason reason = test::run_bounded(machine, pio, mmio);
    INFO(reason.describe());
    REQUIRE(reason.kind == StopReason::Kind::halted);
    CHECK(machine.memory().read<uint32_t>(Gpa(0x800000)) == 0xdeadbeef);
    CHECK(dirty_pages(machine.vm().get_dirty_log(0, 16 * MiB)).count(0x800000) == 1);
}

namespace {

// An MMIO device that answers reads with a fixed value and records writes.
class ScratchDevice : public BusDevice {
public:
    void read(uint64_t offset, std::span<uint8_t> data) override {
        reads.push_back(offset);
        const uint32_t value = 0x11223344;
        for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i < 4 ? value >> (8 * i) : 0);
    }
    void write(uint64_t offset, std::span<const uint8_t> data) override {
        writes.push_back({offset, true, {data.begin(), data.end()}});
    }
    std::vector<uint64_t> reads;
    std::vector<test::Access> writes;
};

}  // namespace

TEST_CASE("MMIO outside RAM reaches the MMIO bus; unclaimed reads return all ones", "[kvm][mmio]") {
    const Kvm kvm = Kvm::open();
    Machine machine(kvm, GuestMemory::create(16 * MiB), {.vcpus = 1, .irqchip = false});
    const std::vector<uint8_t> code = {
        0xa1, 0x00, 0x00, 0x00, 0xd0,              // mov eax, [0xd0000000]
        0xa3, 0x10, 0x00, 0x00, 0xd0,              // mov [0xd0000010], eax
        0xc6, 0x05, 0x20, 0x00, 0x00, 0xd0, 0x5a,  // mov byte [0xd0000020], 0x5a
        0xa1, 0x00, 0x00, 0x00, 0xe0,              // mov eax, [0xe0000000]  (nobody there)
        0xa3, 0x30, 0x00, 0x00, 0xd0,              // mov [0xd0000030], eax
        0xf4,                                      // hlt
    };
    machine.memory().write_bytes(Gpa(0x1000), code);
    test::enter_flat32(machine.vcpu(0), 0x1000);
    ScratchDevice device;
    MmioBus mmio;
    mmio.add(Gpa(0xd0000000), 0x1000, device, "scratch");
    test::RecordingPio pio;

    const StopReason reason = test::run_bounded(machine, pio, mmio);
    INFO(reason.describe());
    REQUIRE(reason.kind == StopReason::Kind::halted);
    CHECK(device.reads == std::vector<uint64_t>{0x0});
    REQUIRE(device.writes.size() == 3);
    CHECK(device.writes[0].addr == 0x10);
    CHECK(device.writes[0].data.size() == 4);
    CHECK(device.writes[0].value() == 0x11223344);
    CHECK(device.writes[1].addr == 0x20);
    CHECK(device.writes[1].data == std::vector<uint8_t>{0x5a});
    CHECK(device.writes[2].addr == 0x30);
    CHECK(device.writes[2].value() == 0xffffffff);
}

TEST_CASE("a port write matched by an ioeventfd signals the eventfd without a VMM exit", "[kvm][ioeventfd]") {
    const Kvm kvm = Kvm::open();
    Machine machine(kvm, GuestMemory::create(1 * MiB), {.vcpus = 1, .irqchip = false});
    const std::vector<uint8_t> code = {
        0xba, 0x00, 0x07,  // mov dx, 0x700
        0xb0, 0x01,        // mov al, 1
        0xee,              // out dx, al   (ioeventfd)
        0xe6, 0x10,        // out 0x10, al (VMM)
        0xf4,              // hlt
    };
    machine.memory().write_bytes(Gpa(0x1000), code);
    test::enter_real_mode(machine.vcpu(0), 0x1000);
    Fd event(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    REQUIRE(event.valid());
    machine.vm().add_ioeventfd(event.get(), {IoEventAddress::Space::pio, 0x700, 1});
    test::RecordingPio pio;
    test::RecordingMmio mmio;

    const StopReason reason = test::run_bounded(machine, pio, mmio);
    INFO(reason.describe());
    REQUIRE(reason.kind == StopReason::Kind::halted);
    const auto io = pio.accesses();
    REQUIRE(io.size() == 1);
    CHECK(io[0].addr == 0x10);
    uint64_t count = 0;
    REQUIRE(::read(event.get(), &count, sizeof(count)) == static_cast<ssize_t>(sizeof(count)));
    CHECK(count == 1);
    machine.vm().remove_ioeventfd(event.get(), {IoEventAddress::Space::pio, 0x700, 1});
}
