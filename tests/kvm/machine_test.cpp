// Machine: vCPUs on their own threads, running at once, stopped and paused from
// another thread.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "tests/kvm/probe.hpp"
#include "vmm/kvm.hpp"
#include "vmm/machine.hpp"

using namespace nanovm;
using namespace std::chrono_literals;

namespace {

// Polls `condition` until it holds or `limit` passes.
template <typename F>
bool eventually(F condition, std::chrono::milliseconds limit = 30s) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < deadline) {
        if (condition()) return true;
        std::this_thread::sleep_for(1ms);
    }
    return condition();
}

}  // namespace

TEST_CASE("two vCPUs run at once, each with its own real-mode state, and write their own memory",
          "[kvm][machine][smp]") {
    const Kvm kvm = Kvm::open();
    Machine machine(kvm, GuestMemory::create(1 * MiB), {.vcpus = 2, .irqchip = false});
    // Each vCPU flags that it runs, then waits for the other's flag: if the vCPUs did
    // not run concurrently, neither would finish (the watchdog would stop them).
    const std::vector<uint8_t> vcpu0 = {
        0xc6, 0x06, 0x00, 0x30, 0x01,  // mov byte [0x3000], 1      (vCPU 0 runs)
        0x80, 0x3e, 0x01, 0x30, 0x01,  // wait: cmp byte [0x3001], 1
        0x75, 0xf9,                    // jne wait
        0xc6, 0x06, 0x00, 0x50, 0xaa,  // mov byte [0x5000], 0xaa   (its own memory)
        0xf4,                          // hlt
    };
    const std::vector<uint8_t> vcpu1 = {
        0xc6, 0x06, 0x01, 0x30, 0x01,  // mov byte [0x3001], 1      (vCPU 1 runs)
        0x80, 0x3e, 0x00, 0x30, 0x01,  // wait: cmp byte [0x3000], 1
        0x75, 0xf9,                    // jne wait
        0xc6, 0x06, 0x00, 0x60, 0xbb,  // mov byte [0x6000], 0xbb
        0xf4,                          // hlt
    };
    machine.memory().write_bytes(Gpa(0x1000), vcpu0);
    machine.memory().write_bytes(Gpa(0x2000), vcpu1);
    test::enter_real_mode(machine.vcpu(0), 0x1000);
    test::enter_real_mode(machine.vcpu(1), 0x2000);
    test::RecordingPio pio;
    test::RecordingMmio mmio;

    const StopReason reason = test::run_bounded(machine, pio, mmio);
    INFO(reason.describe());
    REQUIRE(reason.kind == StopReason::Kind::halted);
    CHECK(machine.memory().read<uint8_t>(Gpa(0x5000)) == 0xaa);
    CHECK(machine.memory().read<uint8_t>(Gpa(0x6000)) == 0xbb);
    CHECK(machine.memory().read<uint8_t>(Gpa(0x6001)) == 0);  // nothing else written
}

TEST_CASE("a spinning vCPU is stopped from another thread within a bounded time", "[kvm][machine][stop]") {
    const Kvm kvm = Kvm::open();
    Machine machine(kvm, GuestMemory::create(1 * MiB), {.vcpus = 2, .irqchip = false});
    const std::vector<uint8_t> spin = {
        0xeb, 0xfe,  // jmp $
    };
    machine.memory().write_bytes(Gpa(0x1000), spin);
    test::enter_real_mode(machine.vcpu(0), 0x1000);
    test::enter_real_mode(machine.vcpu(1), 0x1000);
    test::RecordingPio pio;
    test::RecordingMmio mmio;

    std::atomic<std::chrono::steady_clock::time_point::rep> requested_at{0};
    std::thread stopper([&] {
        REQUIRE(eventually([&] { return machine.running(); }));
        std::this_thread::sleep_for(200ms);  // let both vCPUs get deep into the loop
        requested_at = std::chrono::steady_clock::now().time_since_epoch().count();
        machine.request_stop("test");
    });
    const StopReason reason = machine.run(pio, mmio);
    const auto returned_at = std::chrono::steady_clock::now();
    stopper.join();
    CHECK(reason.kind == StopReason::Kind::requested);
    CHECK(reason.detail == "test");
    CHECK_FALSE(machine.running());
    const auto latency = returned_at - std::chrono::steady_clock::time_point(
                                           std::chrono::steady_clock::duration(requested_at.load()));
    INFO("stop latency " << std::chrono::duration_cast<std::chrono::microseconds>(latency).count() << " us");
    CHECK(latency < 2s);
}

TEST_CASE("pause stops a counting vCPU with stable state; resume lets it count on", "[kvm][machine][pause]") {
    const Kvm kvm = Kvm::open();
    Machine machine(kvm, GuestMemory::create(1 * MiB), {.vcpus = 1, .irqchip = false});
    const std::vector<uint8_t> count = {
        0x66, 0xff, 0x06, 0x00, 0x30,  // loop: inc dword [0x3000]
        0xeb, 0xf9,                    // jmp loop
    };
    machine.memory().write_bytes(Gpa(0x1000), count);
    test::enter_real_mode(machine.vcpu(0), 0x1000);
    test::RecordingPio pio;
    test::RecordingMmio mmio;
    const auto counter = [&] { return machine.memory().read<uint32_t>(Gpa(0x3000)); };

    StopReason reason;
    std::thread runner([&] { reason = test::run_bounded(machine, pio, mmio, 120s); });

    const bool counted = eventually([&] { return counter() > 1000; });
    machine.pause();
    const uint32_t at_pause = counter();
    std::this_thread::sleep_for(100ms);
    const uint32_t later = counter();
    const uint64_t rip = machine.vcpu(0).regs().rip;  // vCPU ioctls work: it is out of KVM_RUN
    machine.resume();
    const bool counted_on = eventually([&] { return counter() > later + 1000; });
    machine.pause();  // pausing twice in one run works as well
    machine.resume();
    machine.request_stop("test");
    runner.join();

    CHECK(counted);
    CHECK(at_pause == later);
    CHECK(rip < count.size());
    CHECK(counted_on);
    CHECK(reason.kind == StopReason::Kind::requested);
}

TEST_CASE("a stop requested before run() makes run() return at once", "[kvm][machine][stop]") {
    const Kvm kvm = Kvm::open();
    Machine machine(kvm, GuestMemory::create(1 * MiB), {.vcpus = 1, .irqchip = false});
    machine.memory().write_bytes(Gpa(0x1000), std::vector<uint8_t>{0xeb, 0xfe});  // jmp $
    test::enter_real_mode(machine.vcpu(0), 0x1000);
    test::RecordingPio pio;
    test::RecordingMmio mmio;
    machine.request_stop("early");
    const StopReason reason = test::run_bounded(machine, pio, mmio, 30s);
    CHECK(reason.kind == StopReason::Kind::requested);
    CHECK(reason.detail == "early");
}

namespace {

// Port and MMIO reads that answer 1, 2, 3, ... (each kind its own count).
class CountingReads : public PortIoHandler, public MmioHandler {
public:
    std::atomic<uint32_t> port_reads{0}, mmio_reads{0};
    void pio_read(uint16_t, std::span<uint8_t> data) override { put(++port_reads, data); }
    void pio_write(uint16_t, std::span<const uint8_t>) override {}
    void mmio_read(Gpa, std::span<uint8_t> data) override { put(++mmio_reads, data); }
    void mmio_write(Gpa, std::span<const uint8_t>) override {}

private:
    static void put(uint32_t value, std::span<uint8_t> data) {
        for (size_t i = 0; i < data.size(); ++i) data[i] = i < 4 ? static_cast<uint8_t>(value >> (8 * i)) : 0;
    }
};

}  // namespace

// KVM finishes an IN or an MMIO read (the value into EAX, RIP past it) only in the
// next KVM_RUN (KVM API doc 5, the note under KVM_EXIT_MMIO). A vCPU paused right
// after such an exit must have finished it: otherwise a snapshot would hold RIP at the
// read with the value lost, and the restored guest would read the device again.
TEST_CASE("a paused vCPU has consumed every port and MMIO read it exited for", "[kvm][machine][pause]") {
    const Kvm kvm = Kvm::open();
    Machine machine(kvm, GuestMemory::create(1 * MiB), {.vcpus = 1, .irqchip = false});
    const std::vector<uint8_t> reads = {
        0xba, 0xf0, 0x00, 0x00, 0x00,  //  0: mov edx, 0xf0
        0xed,                          //  5: loop: in eax, dx
        0xa3, 0x00, 0x30, 0x00, 0x00,  //  6: mov [0x3000], eax
        0xa1, 0x00, 0x00, 0x00, 0xd0,  // 11: mov eax, [0xd0000000]   (not RAM: MMIO)
        0xa3, 0x04, 0x30, 0x00, 0x00,  // 16: mov [0x3004], eax
        0xeb, 0xee,                    // 21: jmp loop
    };
    constexpr uint64_t kAfterIn = 0x1000 + 6, kAfterMmioRead = 0x1000 + 16;
    machine.memory().write_bytes(Gpa(0x1000), reads);
    test::enter_flat32(machine.vcpu(0), 0x1000);
    CountingReads devices;

    StopReason reason;
    std::thread runner([&] { reason = machine.run(devices, devices); });
    REQUIRE(eventually([&] { return devices.mmio_reads.load() > 10; }));
    // Every exit of this guest is a read, so nearly every pause lands right after one.
    uint32_t unconsumed = 0, pauses = 0;
    for (; pauses < 200; ++pauses) {
        machine.pause();
        const kvm_regs regs = machine.vcpu(0).regs();
        const uint32_t eax = static_cast<uint32_t>(regs.rax);
        const uint32_t port_seen = regs.rip == kAfterIn ? eax : machine.memory().read<uint32_t>(Gpa(0x3000));
        const uint32_t mmio_seen =
            regs.rip == kAfterMmioRead ? eax : machine.memory().read<uint32_t>(Gpa(0x3004));
        if (port_seen != devices.port_reads.load() || mmio_seen != devices.mmio_reads.load()) {
            UNSCOPED_INFO("pause " << pauses << ": rip 0x" << std::hex << regs.rip << std::dec << ", port "
                                   << port_seen << " of " << devices.port_reads.load() << ", mmio " << mmio_seen
                                   << " of " << devices.mmio_reads.load());
            ++unconsumed;
        }
        machine.resume();
        std::this_thread::sleep_for(1ms);
    }
    machine.request_stop("test");
    runner.join();
    CHECK(pauses == 200);
    CHECK(unconsumed == 0);
    CHECK(reason.kind == StopReason::Kind::requested);
}
