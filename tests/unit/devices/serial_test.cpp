#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "devices/legacy/serial.hpp"
#include "tests/unit/devices/fake_irq_line.hpp"

using namespace nanovm;

namespace {

constexpr uint8_t RBR = 0, THR = 0, DLL = 0, IER = 1, DLM = 1, IIR = 2, FCR = 2, LCR = 3, MCR = 4, LSR = 5, MSR = 6,
                  SCR = 7;
constexpr uint8_t kOut2 = 0x08, kLoop = 0x10;

struct Uart {
    test::FakeIrqLine irq;
    std::string output;
    Serial serial{irq, [this](std::span<const uint8_t> b) { output.append(b.begin(), b.end()); }};

    uint8_t in(uint8_t reg) {
        uint8_t v = 0;
        serial.read(reg, std::span<uint8_t>(&v, 1));
        return v;
    }
    void out(uint8_t reg, uint8_t value) { serial.write(reg, std::span<const uint8_t>(&value, 1)); }
    size_t receive(const std::string& s) {
        return serial.receive(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(s.data()), s.size()));
    }
};

}  // namespace

TEST_CASE("8250: bytes written to THR reach the console; THR is always empty", "[devices][serial]") {
    Uart u;
    for (char c : std::string("hi\n")) u.out(THR, static_cast<uint8_t>(c));
    CHECK(u.output == "hi\n");
    CHECK((u.in(LSR) & 0x60) == 0x60);  // THRE | TEMT
    CHECK((u.in(LSR) & 0x01) == 0);     // no data ready
}

TEST_CASE("8250: passes Linux's probe (IER holds 4 bits, FIFO shows as 16550A, scratch register)",
          "[devices][serial]") {
    Uart u;
    u.out(IER, 0x00);
    CHECK((u.in(IER) & 0x0f) == 0);
    u.out(IER, 0x0f);
    CHECK((u.in(IER) & 0x0f) == 0x0f);
    u.out(IER, 0x40);  // XScale UUE bit: must not stick
    CHECK(u.in(IER) == 0);
    u.out(FCR, 0x01);
    CHECK((u.in(IIR) & 0xe0) == 0xc0);  // FIFOs enabled, not a 64-byte 16750
    u.out(FCR, 0x00);
    CHECK((u.in(IIR) & 0xc0) == 0);
    u.out(SCR, 0xa5);
    CHECK(u.in(SCR) == 0xa5);
}

TEST_CASE("8250: DLAB switches offsets 0 and 1 to the divisor latch", "[devices][serial]") {
    Uart u;
    u.out(LCR, 0x83);
    u.out(DLL, 0x01);
    u.out(DLM, 0x00);
    CHECK(u.in(DLL) == 0x01);
    CHECK(u.in(DLM) == 0x00);
    CHECK(u.output.empty());  // the DLL write was not a THR write
    u.out(LCR, 0x03);
    CHECK(u.in(LCR) == 0x03);
    CHECK(u.in(IER) == 0);
}

TEST_CASE("8250: enabling the THRE interrupt raises it at once; reading IIR acknowledges it",
          "[devices][serial]") {
    Uart u;
    u.out(MCR, kOut2);
    CHECK_FALSE(u.irq.level);
    u.out(IER, 0x02);
    CHECK(u.irq.level);
    CHECK(u.in(IIR) == 0x02);  // THR empty, no FIFO bits
    CHECK_FALSE(u.irq.level);
    CHECK(u.in(IIR) == 0x01);  // acknowledged
    // A THR write empties THR again: a new THRE interrupt, a new rising edge.
    const int edges = u.irq.rising_edges;
    u.out(THR, 'x');
    CHECK(u.irq.level);
    CHECK(u.irq.rising_edges == edges + 1);
    u.out(IER, 0x00);
    CHECK_FALSE(u.irq.level);
}

TEST_CASE("8250: the IRQ line needs MCR.OUT2 (the PC's interrupt gate)", "[devices][serial]") {
    Uart u;
    u.out(IER, 0x02);
    CHECK((u.in(IIR) & 0x01) == 0);  // pending...
    u.out(IER, 0x00);
    u.out(IER, 0x02);
    CHECK_FALSE(u.irq.level);  // ...but OUT2 is clear
    u.out(MCR, kOut2);
    CHECK(u.irq.level);
}

TEST_CASE("8250: host input waits in a backlog until the guest listens, then raises data-ready",
          "[devices][serial]") {
    Uart u;
    CHECK(u.receive("echo hi\n") == 8);
    CHECK((u.in(LSR) & 0x01) == 0);  // not listening yet: nothing in the FIFO
    u.out(FCR, 0x07);                // the driver resets its FIFOs while starting...
    CHECK(u.in(RBR) == 0);           // ...and drains RBR "for luck": nothing is lost
    u.out(MCR, kOut2 | 0x03);
    u.out(IER, 0x01);  // now it listens
    CHECK(u.irq.level);
    CHECK(u.in(IIR) == 0xc4);  // data available, FIFOs on
    std::string got;
    while (u.in(LSR) & 0x01) got.push_back(static_cast<char>(u.in(RBR)));
    CHECK(got == "echo hi\n");
    CHECK_FALSE(u.irq.level);
    CHECK(u.in(IIR) == 0xc1);
}

TEST_CASE("8250: more input than the FIFO flows through it; the backlog is bounded", "[devices][serial]") {
    Uart u;
    u.out(MCR, kOut2);
    u.out(IER, 0x01);
    const std::string big(Serial::kRxCapacity + 100, 'a');
    CHECK(u.receive(big) == Serial::kRxCapacity);  // the backlog is full...
    CHECK(u.serial.rx_space() == Serial::kFifoSize);  // ...until 16 bytes move on into the FIFO
    size_t read = 0;
    while (u.in(LSR) & 0x01) {
        u.in(RBR);
        ++read;
    }
    CHECK(read == Serial::kRxCapacity);
    CHECK(u.serial.rx_space() == Serial::kRxCapacity);
}

TEST_CASE("8250: loopback sends THR to RBR, wires MCR to MSR and keeps the IRQ quiet", "[devices][serial]") {
    Uart u;
    u.out(MCR, kLoop | kOut2);
    u.out(IER, 0x01);
    u.out(THR, 'z');
    CHECK(u.output.empty());
    CHECK((u.in(LSR) & 0x01) == 1);
    CHECK(u.in(RBR) == 'z');
    CHECK_FALSE(u.irq.level);
    // MSR: RTS->CTS, DTR->DSR, OUT1->RI, OUT2->DCD
    u.in(MSR);
    u.out(MCR, kLoop | 0x0f);
    CHECK((u.in(MSR) & 0xf0) == 0xf0);
    u.out(MCR, kLoop);
    const uint8_t msr = u.in(MSR);
    CHECK((msr & 0xf0) == 0);
    CHECK((msr & 0x0f) == 0x0f);  // DCTS, DDSR, TERI (RI fell), DDCD
    CHECK((u.in(MSR) & 0x0f) == 0);  // deltas clear on read
    u.out(MCR, 0);
    CHECK((u.in(MSR) & 0xb0) == 0xb0);  // out of loopback: CTS, DSR, DCD
}

TEST_CASE("8250: an FCR reset keeps unread input, and the backlog stays bounded", "[devices][serial]") {
    Uart u;
    u.out(MCR, kOut2);
    u.out(IER, 0x01);
    CHECK(u.receive(std::string(Serial::kRxCapacity, 'b')) == Serial::kRxCapacity);
    CHECK(u.serial.rx_space() == Serial::kFifoSize);  // 16 bytes moved on into the FIFO
    CHECK(u.receive(std::string(Serial::kFifoSize, 'c')) == Serial::kFifoSize);
    u.out(IER, 0x00);  // the guest stops listening...
    u.out(FCR, 0x07);  // ...and resets the FIFO: its 16 bytes go back to the backlog
    CHECK(u.serial.rx_space() == 0);  // over capacity: no space (not a wrapped size_t)
    CHECK(u.receive("more") == 0);
    u.out(IER, 0x01);
    size_t read = 0;
    while (u.in(LSR) & 0x01) {
        u.in(RBR);
        ++read;
    }
    CHECK(read == Serial::kRxCapacity + Serial::kFifoSize);  // nothing lost
    CHECK(u.serial.rx_space() == Serial::kRxCapacity);
}

TEST_CASE("8250: loopback bytes are discarded by an FCR clear; host memory stays bounded", "[devices][serial]") {
    // Issue 15: an FCR clear moved loopback bytes into the host input backlog, which
    // nothing drained in loopback mode: ~16 bytes of VMM memory per round, forever,
    // and the console's input blocked meanwhile.
    Uart u;
    u.out(MCR, kLoop | kOut2);
    u.out(IER, 0x01);
    for (int round = 0; round < 10000; ++round) {
        for (int i = 0; i < 16; ++i) u.out(THR, 'L');
        u.out(FCR, 0x02);
    }
    CHECK(u.serial.buffered_bytes() == 0);
    CHECK(u.serial.rx_space() == Serial::kRxCapacity);
    CHECK((u.in(LSR) & 0x01) == 0);  // the clear emptied the FIFO, as on the real part
    // Host input typed meanwhile still arrives once the guest leaves loopback.
    CHECK(u.receive("hi") == 2);
    for (int i = 0; i < 16; ++i) u.out(THR, 'L');  // loopback bytes mixed with...
    u.out(MCR, kOut2);                               // ...host bytes after loopback ends
    CHECK(u.in(RBR) == 'L');
    u.out(FCR, 0x02);  // drops the 15 loopback bytes left, keeps the host's
    std::string got;
    while (u.in(LSR) & 0x01) got += static_cast<char>(u.in(RBR));
    CHECK(got == "hi");
    CHECK(u.serial.buffered_bytes() == 0);
}
