// libFuzzer harness for virtio-rng (devices/virtio/rng/rng_device.hpp) behind its mmio
// transport: a hostile driver's register writes, resets and request chains
// (fuzz/device_ops.hpp), the device filling them from getrandom. Invariants: those of
// device_ops.hpp, plus no request gets more than kMaxRequestBytes of entropy.
//
// Input format: device_ops.hpp's ops; host events (op % 16 = 12 + n):
//   n = 0..3  post a request: u8 buffers (1-4), each u8 b: length (b + 1) * 16
//             bytes, device-writable unless b is 0xff (a readable buffer: no entropy
//             goes there)
#include <cstdint>
#include <vector>

#include "devices/virtio/rng/rng_device.hpp"
#include "fuzz/device_ops.hpp"

using namespace nanovm;
using namespace nanovm::virtio;
using nanovm::fuzz::fuzz_check;
using nanovm::fuzz::FuzzInput;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const fuzz::DeviceRig rig = fuzz::device_rig();
    GuestMemory& memory = rig.memory;
    EventLoop& loop = rig.loop;

    FuzzInput in(data, size);
    RngDevice device;
    {
        MmioTransport transport(device, memory, loop);
        fuzz::DeviceOps ops(memory, loop, transport);
        ops.run(in, [&](uint8_t, FuzzInput& input) {
            std::vector<test::TestBuffer> buffers;
            for (int n = input.u8() % 4 + 1; n > 0; --n) {
                const uint8_t b = input.u8();
                if (b == 0xff)
                    buffers.push_back(test::TestBuffer::in(std::vector<uint8_t>(16, 0x5a)));
                else
                    buffers.push_back(test::TestBuffer::out((b + 1u) * 16));
            }
            ops.post(0, buffers);
        });
    }
    const RngState counters = device.save_state();
    fuzz_check(counters.bytes <= counters.requests * RngDevice::kMaxRequestBytes,
               "no request gets more than kMaxRequestBytes");
    return 0;
}
