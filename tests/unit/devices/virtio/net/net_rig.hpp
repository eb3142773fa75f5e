// A virtio-net device on simulated guest memory whose backend is one end of an
// AF_UNIX SOCK_SEQPACKET socketpair (one frame per message, like a tap); the test
// plays the host network on the other end. Also builds test Ethernet frames.
#pragma once

#include <poll.h>
#include <sys/socket.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <optional>
#include <vector>

#include "devices/virtio/net/net_device.hpp"
#include "tests/unit/devices/virtio/test_driver.hpp"
#include "vmm/error.hpp"

namespace nanovm::test {

/// An Ethernet frame of `bytes` bytes (>= 14): broadcast destination, source
/// 02:00:00:00:00:01, EtherType 0x88b5 (IEEE local experimental), payload i + seed.
inline std::vector<uint8_t> test_frame(size_t bytes, uint8_t seed = 0) {
    std::vector<uint8_t> f(bytes);
    for (size_t i = 0; i < 6; ++i) f[i] = 0xff;
    const uint8_t src[6] = {0x02, 0, 0, 0, 0, 0x01};
    std::memcpy(f.data() + 6, src, 6);
    f[12] = 0x88;
    f[13] = 0xb5;
    for (size_t i = 14; i < bytes; ++i) f[i] = static_cast<uint8_t>(i + seed);
    return f;
}

/// `frame` behind a 12-byte virtio_net_hdr with the given flags.
inline std::vector<uint8_t> with_header(const std::vector<uint8_t>& frame, uint8_t flags = 0, uint8_t gso = 0) {
    std::vector<uint8_t> p(12, 0);
    p[0] = flags;
    p[1] = gso;
    p.insert(p.end(), frame.begin(), frame.end());
    return p;
}

/// Waits up to `timeout` for one message on `fd`; returns it, or nothing.
inline std::optional<std::vector<uint8_t>> recv_message(int fd, std::chrono::milliseconds timeout) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(timeout.count())) <= 0) return std::nullopt;
    std::vector<uint8_t> buf(70000);
    const ssize_t n = ::recv(fd, buf.data(), buf.size(), MSG_DONTWAIT);
    if (n < 0) return std::nullopt;
    buf.resize(static_cast<size_t>(n));
    return buf;
}

struct NetRig {
    GuestMemory memory = GuestMemory::create(32 * MiB);
    EventLoop loop;
    Fd host;  // the test's end: the "host network"
    virtio::net::NetDevice device;
    virtio::MmioTransport transport{device, memory, loop};
    TestDriver driver{memory, transport};

    explicit NetRig(std::optional<virtio::net::MacAddress> mac = virtio::net::MacAddress::parse("02:00:00:00:00:aa"),
                    int device_sndbuf = 0)
        : device(make_backend(host, device_sndbuf), {"test", mac}) {}

    static Fd make_backend(Fd& host_end, int sndbuf) {
        int fds[2];
        if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds) != 0)
            throw_errno("socketpair");
        host_end = Fd(fds[1]);
        if (sndbuf > 0) ::setsockopt(fds[0], SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
        return Fd(fds[0]);
    }

    /// The host sends `packet` (header + frame) towards the guest.
    void host_send(const std::vector<uint8_t>& packet) {
        if (::send(host.get(), packet.data(), packet.size(), MSG_DONTWAIT) != static_cast<ssize_t>(packet.size()))
            throw_errno("send");
    }
};

}  // namespace nanovm::test
