// The legacy PC devices driven by probe guests: the 8250 prints, the i8042 resets,
// the control port's announcement decides what the reset means.
#include <catch2/catch.hpp>

#include <mutex>
#include <string>
#include <vector>

#include "devices/bus.hpp"
#include "devices/irq_line.hpp"
#include "devices/legacy/legacy_devices.hpp"
#include "tests/kvm/probe.hpp"
#include "vmm/kvm.hpp"
#include "vmm/machine.hpp"

using namespace nanovm;

namespace {

// A machine with the in-kernel irqchip, the legacy devices on its I/O bus, and the
// console captured in a string.
struct Board {
    explicit Board(const Kvm& kvm)
        : machine(kvm, GuestMemory::create(1 * MiB), {.vcpus = 1, .irqchip = true}),
          com1_irq(machine.vm(), Serial::kCom1Irq),
          legacy(pio, com1_irq, [this](std::span<const uint8_t> bytes) {
              std::lock_guard lock(mutex);
              console.append(bytes.begin(), bytes.end());
          },
                 [this] { machine.request_stop(StopReason{StopReason::Kind::reset, {}, "i8042 reset"}); }) {}

    StopReason run_real_mode(const std::vector<uint8_t>& code) {
        machine.memory().write_bytes(Gpa(0x1000), code);
        test::enter_real_mode(machine.vcpu(0), 0x1000);
        return test::run_bounded(machine, pio, mmio);
    }
    GuestOutcome outcome(const StopReason& reason) {
        return guest_outcome(reason, legacy.control_port().announcement());
    }
    std::string output() {
        std::lock_guard lock(mutex);
        return console;
    }

    Machine machine;
    IoBus pio;
    MmioBus mmio;
    KvmIrqLine com1_irq;
    std::mutex mutex;
    std::string console;
    LegacyDevices legacy;
};

}  // namespace

TEST_CASE("a probe writing \"hi\\n\" to the 8250 at 0x3f8 shows up on the console, then poweroff",
          "[kvm][devices][serial]") {
    const Kvm kvm = Kvm::open();
    Board board(kvm);
    const StopReason reason = board.run_real_mode({
        0xba, 0xf8, 0x03,  // mov dx, 0x3f8
        0xb0, 0x68,        // mov al, 'h'
        0xee,              // out dx, al
        0xb0, 0x69,        // mov al, 'i'
        0xee,              // out dx, al
        0xb0, 0x0a,        // mov al, '\n'
        0xee,              // out dx, al
        0xba, 0xf0, 0x05,  // mov dx, 0x5f0   (nanovm control port)
        0xb0, 0x01,        // mov al, 1       ("poweroff follows")
        0xee,              // out dx, al
        0xb0, 0xfe,        // mov al, 0xfe
        0xe6, 0x64,        // out 0x64, al    (i8042: pulse reset)
        0xf4,              // hlt
        0xeb, 0xfd,        // jmp hlt
    });
    INFO(reason.describe());
    CHECK(reason.kind == StopReason::Kind::reset);
    CHECK(board.output() == "hi\n");
    CHECK(board.outcome(reason) == GuestOutcome::poweroff);
}

TEST_CASE("an announced reboot followed by an i8042 reset is a reboot", "[kvm][devices][control]") {
    const Kvm kvm = Kvm::open();
    Board board(kvm);
    const StopReason reason = board.run_real_mode({
        0xba, 0xf0, 0x05,  // mov dx, 0x5f0
        0xb0, 0x02,        // mov al, 2       ("reboot follows")
        0xee,              // out dx, al
        0xb0, 0xfe,        // mov al, 0xfe
        0xe6, 0x64,        // out 0x64, al
        0xf4,              // hlt
        0xeb, 0xfd,        // jmp hlt
    });
    INFO(reason.describe());
    CHECK(reason.kind == StopReason::Kind::reset);
    CHECK(board.outcome(reason) == GuestOutcome::reboot);
}

TEST_CASE("an i8042 reset without announcement is a crash", "[kvm][devices][control]") {
    const Kvm kvm = Kvm::open();
    Board board(kvm);
    const StopReason reason = board.run_real_mode({
        0xb0, 0xfe,  // mov al, 0xfe
        0xe6, 0x64,  // out 0x64, al
        0xf4,        // hlt
        0xeb, 0xfd,  // jmp hlt
    });
    INFO(reason.describe());
    CHECK(reason.kind == StopReason::Kind::reset);
    CHECK(board.outcome(reason) == GuestOutcome::crash);
}

TEST_CASE("a triple fault stops the machine and, unannounced, is a crash", "[kvm][devices][control]") {
    const Kvm kvm = Kvm::open();
    Board board(kvm);
    const std::vector<uint8_t> code = {
        0x0f, 0x0b,  // ud2: #UD with an empty IDT -> #GP -> #DF -> shutdown
    };
    board.machine.memory().write_bytes(Gpa(0x1000), code);
    test::enter_flat32(board.machine.vcpu(0), 0x1000, /*idt_limit=*/0);
    const StopReason reason = test::run_bounded(board.machine, board.pio, board.mmio);
    INFO(reason.describe());
    CHECK(reason.kind == StopReason::Kind::triple_fault);
    CHECK(reason.vcpu == 0u);
    CHECK(board.outcome(reason) == GuestOutcome::crash);
}

TEST_CASE("the guest reads the control port signature, the CMOS RTC and 0xff from nowhere",
          "[kvm][devices][rtc]") {
    const Kvm kvm = Kvm::open();
    Board board(kvm);
    const StopReason reason = board.run_real_mode({
        0xba, 0xf0, 0x05,        // mov dx, 0x5f0
        0xec,                    // in al, dx            (control port: 'N')
        0xa2, 0x00, 0x30,        // mov [0x3000], al
        0xb0, 0x0a,              // mov al, 0x0a
        0xe6, 0x70,              // out 0x70, al         (RTC index: status A)
        0xe4, 0x71,              // in al, 0x71
        0xa2, 0x01, 0x30,        // mov [0x3001], al
        0xb0, 0x0b,              // mov al, 0x0b
        0xe6, 0x70,              // out 0x70, al         (status B)
        0xe4, 0x71,              // in al, 0x71
        0xa2, 0x02, 0x30,        // mov [0x3002], al
        0xb0, 0x09,              // mov al, 0x09
        0xe6, 0x70,              // out 0x70, al         (year)
        0xe4, 0x71,              // in al, 0x71
        0xa2, 0x03, 0x30,        // mov [0x3003], al
        0xe4, 0x80,              // in al, 0x80          (POST port: nothing there)
        0xa2, 0x04, 0x30,        // mov [0x3004], al
        0xb0, 0xfe,              // mov al, 0xfe
        0xe6, 0x64,              // out 0x64, al
        0xf4,                    // hlt
        0xeb, 0xfd,              // jmp hlt
    });
    INFO(reason.describe());
    REQUIRE(reason.kind == StopReason::Kind::reset);
    const GuestMemory& memory = board.machine.memory();
    CHECK(memory.read<uint8_t>(Gpa(0x3000)) == 'N');
    CHECK((memory.read<uint8_t>(Gpa(0x3001)) & 0x80) == 0);  // never "update in progress"
    CHECK(memory.read<uint8_t>(Gpa(0x3002)) == 0x02);         // 24-hour, BCD
    const uint8_t year = memory.read<uint8_t>(Gpa(0x3003));
    CHECK((year >> 4) <= 9);  // a BCD byte
    CHECK((year & 0xf) <= 9);
    CHECK(memory.read<uint8_t>(Gpa(0x3004)) == 0xff);
}
