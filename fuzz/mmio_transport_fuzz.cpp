// libFuzzer harness for the virtio-mmio transport (devices/virtio/mmio_transport.hpp):
// a hostile driver's sequence of register reads and writes, queue kicks, guest-memory
// writes and config-space accesses against an echo device (tests/unit/devices/
// virtio/echo_device.hpp) on a real EventLoop. Besides "no crash, no sanitizer
// report" it checks the state machine's promises after every step: DRIVER_OK only
// with FEATURES_OK, accepted features a subset of the offer with VERSION_1, the
// device never activated twice without a reset nor kicked while inactive, and reset
// once more when the transport goes away. Kicks through op 0 (a raw QueueNotify
// write) do not wait for the loop, so thread timing varies between runs: a crash may
// need `-runs=1000` on its input to show again.
//
// Input format (little endian; past the end everything reads as zero; see
// fuzz/make_seeds.py):
//   u8 device_features           the echo device's own feature bits 0-7
//   then up to kMaxOps ops, each u8 op and its operands, by op % 8:
//     0 write register   reg, u8 width, u32 value
//     1 read register    reg, u8 width
//     2 kick             u8 queue (QueueNotify write, then the loop settles)
//     3 write RAM        u32 gpa (mod RAM size), u8 len, len bytes
//     4 bring up         u8 how (bit 0: features from a u64 that follows, else all
//                        offered), u8 queue size (0 = QueueNumMax): §3.1.1 through TestDriver
//     5 post chain       u8 queue, u8 buffers (1-4), each u8 b: bit 7 writable, length
//                        (b & 0x7f) * 8; readable contents follow
//     6 config access    u16 offset, u8 width, bit 7 of width: write (u64 value follows)
//     7 device side      u8: bit 0 toggles "throw in queue_notify", bit 1 signals a
//                        config change
//   reg = u8 r: r < 0xf0 picks a register from kRegisters, else a raw u16 offset & 0xfff
//   width = kWidths[w % 4]: 4, 1, 2 or 8 bytes
#include <array>
#include <cstdint>
#include <optional>
#include <vector>

#include "devices/virtio/mmio_transport.hpp"
#include "fuzz/fuzz_input.hpp"
#include "fuzz/fuzz_support.hpp"
#include "tests/unit/devices/virtio/echo_device.hpp"
#include "tests/unit/devices/virtio/test_driver.hpp"
#include "tests/unit/vmm/event_loop_waits.hpp"

using namespace nanovm;
using namespace nanovm::virtio;
using nanovm::fuzz::fuzz_check;
using nanovm::fuzz::FuzzInput;

namespace {

constexpr uint64_t kRamBytes = 4 * MiB;
constexpr uint64_t kRingBase = 0x10000;
constexpr uint64_t kBufferBase = 1 * MiB;  // posts stay below 2 MiB: kMaxOps * 4 * 1 KiB
constexpr int kMaxOps = 256;

constexpr std::array<uint32_t, 31> kRegisters = {
    mmio::kMagicValue,      mmio::kVersion,          mmio::kDeviceId,        mmio::kVendorId,
    mmio::kDeviceFeatures,  mmio::kDeviceFeaturesSel, mmio::kDriverFeatures, mmio::kDriverFeaturesSel,
    mmio::kQueueSel,        mmio::kQueueNumMax,      mmio::kQueueNum,        mmio::kQueueReady,
    mmio::kQueueNotify,     mmio::kInterruptStatus,  mmio::kInterruptAck,    mmio::kStatus,
    mmio::kQueueDescLow,    mmio::kQueueDescHigh,    mmio::kQueueDriverLow,  mmio::kQueueDriverHigh,
    mmio::kQueueDeviceLow,  mmio::kQueueDeviceHigh,  mmio::kShmSel,          mmio::kShmLenLow,
    mmio::kShmLenHigh,      mmio::kShmBaseLow,       mmio::kShmBaseHigh,     mmio::kQueueReset,
    mmio::kConfigGeneration, mmio::kConfig,          mmio::kConfig + 4,
};
constexpr std::array<size_t, 4> kWidths = {4, 1, 2, 8};

uint32_t read_register_offset(FuzzInput& in) {
    const uint8_t r = in.u8();
    return r < 0xf0 ? kRegisters[r % kRegisters.size()] : in.u16() & 0xfffu;
}

/// The transport's promises that hold between any two driver accesses.
void check_state(const MmioTransport& transport, const test::EchoDevice& device) {
    const uint32_t st = transport.status();
    fuzz_check(!(st & status::kDriverOk) || (st & status::kFeaturesOk), "DRIVER_OK only with FEATURES_OK");
    if (st & status::kFeaturesOk) {
        const uint64_t accepted = transport.state().driver_features;
        fuzz_check((accepted & ~transport.offered_features()) == 0, "accepted features were offered");
        fuzz_check((accepted & feature::kVersion1) != 0, "accepted features include VERSION_1");
    }
    const int active = device.activations - device.resets;
    fuzz_check(active == 0 || active == 1, "the device is activated at most once between resets");
    fuzz_check(device.inactive_notifies == 0, "no queue kick reaches the device before activate or after reset");
}

void run_ops(FuzzInput& in, GuestMemory& memory, EventLoop& loop, MmioTransport& transport,
             test::EchoDevice& device) {
    test::TestDriver driver(memory, transport, kRingBase, kBufferBase);
    bool have_rings = false;  // the driver laid out rings (TestDriver::queue is usable)
    for (int op = 0; op < kMaxOps && !in.empty(); ++op) {
        switch (in.u8() % 8) {
            case 0: {
                const uint32_t offset = read_register_offset(in);
                const size_t width = kWidths[in.u8() % 4];
                const uint64_t value = in.u32() * 0x100000001ull;
                transport.write(offset, std::span(reinterpret_cast<const uint8_t*>(&value), width));
                break;
            }
            case 1: {
                const uint32_t offset = read_register_offset(in);
                const size_t width = kWidths[in.u8() % 4];
                uint64_t value = ~0ull;
                transport.read(offset, std::span(reinterpret_cast<uint8_t*>(&value), width));
                if (offset == mmio::kMagicValue && width == 4)
                    fuzz_check(static_cast<uint32_t>(value) == mmio::kMagic, "MagicValue reads \"virt\"");
                break;
            }
            case 2:
                driver.kick(in.u8());
                test::settle(loop);
                break;
            case 3: {
                const uint64_t gpa = in.u32() % kRamBytes;
                const auto bytes = in.bytes(in.u8());
                if (memory.contains(Gpa(gpa), bytes.size())) memory.write_bytes(Gpa(gpa), bytes);
                break;
            }
            case 4: {
                const uint8_t how = in.u8();
                const std::optional<uint64_t> features = (how & 1) ? std::optional(in.u64()) : std::nullopt;
                const uint8_t queue_size = in.u8();
                if (driver.bring_up(features, queue_size)) have_rings = true;
                break;
            }
            case 5: {
                const uint16_t queue = in.u8() % transport.queue_count();
                std::vector<test::TestBuffer> buffers;
                for (int n = in.u8() % 4 + 1; n > 0; --n) {
                    const uint8_t b = in.u8();
                    const uint32_t len = (b & 0x7fu) * 8;
                    if (b & 0x80) {
                        buffers.push_back(test::TestBuffer::out(len == 0 ? 8 : len));
                    } else {
                        const auto bytes = in.bytes(len);
                        buffers.push_back(test::TestBuffer::in({bytes.begin(), bytes.end()}));
                    }
                }
                if (have_rings) driver.post(queue, buffers);
                break;
            }
            case 6: {
                const uint64_t offset = mmio::kConfig + in.u16() % (mmio::kWindowSize - mmio::kConfig);
                const uint8_t w = in.u8();
                const size_t width = kWidths[w % 4];
                uint64_t value = (w & 0x80) ? in.u64() : 0;
                if (w & 0x80) {
                    transport.write(offset, std::span(reinterpret_cast<const uint8_t*>(&value), width));
                } else {
                    transport.read(offset, std::span(reinterpret_cast<uint8_t*>(&value), width));
                }
                break;
            }
            default: {
                const uint8_t what = in.u8();
                if (what & 1) device.throw_on_notify = !device.throw_on_notify;
                if (what & 2) {
                    if (DeviceLink* link = device.link()) link->signal_config_change();
                }
                break;
            }
        }
        check_state(transport, device);
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static GuestMemory memory = GuestMemory::create(kRamBytes);
    static EventLoop loop;
    fuzz::discard_guest_ram(memory);  // 4 MiB: cheap, and every input starts from zeros

    FuzzInput in(data, size);
    test::EchoDevice device({16, 8}, in.u8());
    {
        MmioTransport transport(device, memory, loop);
        run_ops(in, memory, loop, transport, device);
    }
    fuzz_check(device.activations == device.resets, "a transport going away resets its active device");
    return 0;
}
