// libFuzzer harness for virtio-net (devices/virtio/net/net_device.hpp) behind its mmio
// transport, its backend one end of an AF_UNIX SOCK_SEQPACKET socketpair standing in
// for the tap (one frame per message; a 4 KiB send buffer, so that transmit blocks and
// resumes on EPOLLOUT): a hostile driver's register writes, resets, receive buffers
// and transmit chains (fuzz/device_ops.hpp) interleaved with host frames arriving,
// the host reading what the guest sent, and the tap going away. Invariants: those of
// device_ops.hpp, plus every frame the device hands the host is a header and a frame
// of at most kMaxPacketBytes, with the header the device wrote itself (all zero).
//
// Input format: device_ops.hpp's ops; host events (op % 16 = 12 + n):
//   n = 0  a frame from the host: u16 length (mod 2048), that many bytes (the first 12
//          are the backend's virtio_net_hdr)
//   n = 1  the host reads every frame the device sent
//   n = 2  post a transmit chain: u8 split (1-3 readable buffers), u16 frame length
//          (mod 1600) after a zero header; the frame's bytes follow
//   n = 3  the tap goes away (the host end closes: EOF / EPOLLHUP for the device)
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <vector>

#include "devices/virtio/net/net_device.hpp"
#include "fuzz/device_ops.hpp"

using namespace nanovm;
using namespace nanovm::virtio;
using nanovm::fuzz::fuzz_check;
using nanovm::fuzz::FuzzInput;

namespace {

void read_host_frames(int fd) {
    std::vector<uint8_t> frame(net::kMaxPacketBytes + 16);
    for (;;) {
        const ssize_t n = ::recv(fd, frame.data(), frame.size(), MSG_DONTWAIT | MSG_TRUNC);
        if (n < 0) return;
        fuzz_check(static_cast<size_t>(n) <= net::kMaxPacketBytes, "a transmitted frame is at most kMaxPacketBytes");
        fuzz_check(static_cast<size_t>(n) >= sizeof(net::VirtioNetHdr), "a transmitted frame has its header");
        const std::vector<uint8_t> zero(sizeof(net::VirtioNetHdr), 0);
        fuzz_check(std::equal(zero.begin(), zero.end(), frame.begin()), "the device writes the header: all zero");
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const fuzz::DeviceRig rig = fuzz::device_rig();
    GuestMemory& memory = rig.memory;
    EventLoop& loop = rig.loop;

    int fds[2];
    fuzz_check(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds) == 0, "socketpair");
    Fd host(fds[1]);
    const int sndbuf = 4096;
    ::setsockopt(fds[0], SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));

    FuzzInput in(data, size);
    net::NetDevice device(Fd(fds[0]), net::NetDeviceOptions{"fuzz", net::MacAddress{{0x52, 0x54, 0, 0x12, 0x34, 0x56}}});
    {
        MmioTransport transport(device, memory, loop);
        fuzz::DeviceOps ops(memory, loop, transport);
        ops.run(in, [&](uint8_t event, FuzzInput& input) {
            switch (event) {
                case 0: {
                    const auto frame = input.bytes(input.u16() % 2048);
                    if (host) [[maybe_unused]] ssize_t n = ::send(host.get(), frame.data(), frame.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
                    break;
                }
                case 1:
                    if (host) read_host_frames(host.get());
                    break;
                case 2: {
                    const int split = input.u8() % 3 + 1;
                    const uint16_t len = input.u16() % 1600;
                    const auto frame = input.bytes(len);
                    std::vector<uint8_t> packet(sizeof(net::VirtioNetHdr), 0);
                    packet.insert(packet.end(), frame.begin(), frame.end());
                    std::vector<test::TestBuffer> buffers;
                    const size_t piece = packet.size() / split + 1;
                    for (size_t at = 0; at < packet.size(); at += piece)
                        buffers.push_back(test::TestBuffer::in(
                            {packet.begin() + at, packet.begin() + std::min(packet.size(), at + piece)}));
                    ops.post(net::kTransmitq, buffers);
                    break;
                }
                default:
                    if (host) read_host_frames(host.get());
                    host.reset();
                    break;
            }
        });
        if (host) read_host_frames(host.get());
    }
    return 0;
}
