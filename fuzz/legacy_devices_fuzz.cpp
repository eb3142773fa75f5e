// libFuzzer harness for the legacy PC devices on their I/O port bus
// (devices/legacy/legacy_devices.hpp): the 8250 UART, the i8042, the CMOS RTC and the
// nanovm control port, driven by a hostile guest's port reads and writes of any
// width, host console input arriving at the UART, and replays of the guest's last
// writes many times over (as a loop in the guest would: this is what grows state
// that only a long run reaches, like issue 15's loopback backlog). Invariants: the
// UART holds at most kRxCapacity + kFifoSize bytes for the guest, and the heap grows
// by at most kMaxHeapGrowth over an input (AddressSanitizer's allocator count), so
// no guest pattern makes the VMM's memory grow without bound.
//
// Input format (little endian; zeros past the end): up to kMaxOps ops, each u8 op
// and its operands, by op % 4:
//   0 port write  u8 port (kPorts[p % n], or 0x3f8 + (p & 7) for p >= 0xf0), u8 width
//                 (1, 2 or 4), u32 value
//   1 port read   u8 port, u8 width
//   2 host input  u8 len, len bytes to the UART (Serial::receive)
//   3 replay      u8 k (1-32), u16 times (mod 4096): the last k port writes again,
//                 in order, that many times (at most kMaxReplayed writes per input)
#include <sanitizer/allocator_interface.h>

#include <cstdint>
#include <deque>
#include <vector>

#include "devices/bus.hpp"
#include "devices/legacy/legacy_devices.hpp"
#include "fuzz/fuzz_input.hpp"
#include "fuzz/fuzz_support.hpp"
#include "tests/unit/devices/fake_irq_line.hpp"

using namespace nanovm;
using nanovm::fuzz::fuzz_check;
using nanovm::fuzz::FuzzInput;

namespace {

constexpr int kMaxOps = 256;
constexpr size_t kMaxHeapGrowth = 256 * 1024;
constexpr uint64_t kMaxReplayed = 20'000;
constexpr uint16_t kPorts[] = {0x3f8, 0x3f9, 0x3fa, 0x3fb, 0x3fc, 0x3fd, 0x3fe, 0x3ff, 0x60,
                               0x64,  0x70,  0x71,  0x5f0, 0x80,  0x61,  0x3f7, 0x400};

struct PortWrite {
    uint16_t port;
    uint8_t width;
    uint32_t value;
};

uint16_t pick_port(uint8_t p) {
    return p >= 0xf0 ? static_cast<uint16_t>(0x3f8 + (p & 7)) : kPorts[p % std::size(kPorts)];
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const size_t heap_before = __sanitizer_get_current_allocated_bytes();
    FuzzInput in(data, size);
    IoBus bus;
    test::FakeIrqLine irq;
    uint64_t console_bytes = 0;
    int resets = 0;
    {
        LegacyDevices devices(
            bus, irq, [&](std::span<const uint8_t> bytes) { console_bytes += bytes.size(); }, [&] { ++resets; });
        std::deque<PortWrite> recent;  // the last 32 port writes
        uint64_t replayed = 0;
        const auto write = [&](const PortWrite& w) {
            bus.pio_write(w.port, std::span(reinterpret_cast<const uint8_t*>(&w.value), w.width));
        };
        for (int op = 0; op < kMaxOps && !in.empty(); ++op) {
            switch (in.u8() % 4) {
                case 0: {
                    const uint16_t port = pick_port(in.u8());
                    static constexpr uint8_t kWidths[] = {1, 2, 4};
                    const PortWrite w{port, kWidths[in.u8() % 3], in.u32()};
                    write(w);
                    recent.push_back(w);
                    if (recent.size() > 32) recent.pop_front();
                    break;
                }
                case 1: {
                    const uint16_t port = pick_port(in.u8());
                    uint32_t value = 0;
                    static constexpr uint8_t kWidths[] = {1, 2, 4};
                    bus.pio_read(port, std::span(reinterpret_cast<uint8_t*>(&value), kWidths[in.u8() % 3]));
                    break;
                }
                case 2: {
                    const auto bytes = in.bytes(in.u8());
                    devices.com1().receive(bytes);
                    break;
                }
                default: {
                    const size_t k = std::min<size_t>(in.u8() % 32 + 1, recent.size());
                    const unsigned times = in.u16() % 4096;
                    const std::vector<PortWrite> last(recent.end() - static_cast<std::ptrdiff_t>(k), recent.end());
                    for (unsigned t = 0; t < times && replayed < kMaxReplayed; ++t, replayed += k)
                        for (const PortWrite& w : last) write(w);
                    break;
                }
            }
            fuzz_check(devices.com1().buffered_bytes() <= Serial::kRxCapacity + Serial::kFifoSize,
                       "the UART holds at most kRxCapacity + kFifoSize bytes");
            const size_t heap_now = __sanitizer_get_current_allocated_bytes();
            fuzz_check(heap_now < heap_before || heap_now - heap_before <= kMaxHeapGrowth,
                       "the heap grows by at most kMaxHeapGrowth over an input");
        }
    }
    return 0;
}
