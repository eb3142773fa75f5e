// Test rig for virtio-vsock: a device on an mmio transport driven by FakeVsockGuest,
// with its socket path in a temporary directory, and blocking Unix-socket helpers
// that play the host programs.
#pragma once

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>

#include <fmt/format.h>

#include "devices/virtio/vsock/vsock_device.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/unit/devices/virtio/vsock_guest.hpp"
#include "tests/unit/vmm/event_loop_waits.hpp"

// A namespace of its own: device rigs in one test binary must not share helper names.
namespace nanovm::test::vsockrig {

using namespace std::chrono_literals;
using namespace nanovm::virtio;         // test-only header: the spec's names unqualified
using namespace nanovm::virtio::vsock;

inline VsockOptions with_path(VsockOptions options, const std::string& dir) {
    options.guest_cid = FakeVsockGuest::kGuestCid;
    options.uds_path = dir + "/vm.sock";
    return options;
}

// One device on a transport, driven by a fake guest; host sockets under a temp dir.
struct VsockRig {
    test::TempDir dir{"vsock"};
    GuestMemory memory = GuestMemory::create(64 * MiB);
    EventLoop loop;
    VsockDevice device;
    MmioTransport transport;
    test::TestDriver driver;
    FakeVsockGuest guest;

    explicit VsockRig(VsockOptions options = {}, uint32_t rx_payload = 4096, uint16_t event_buffers = 4)
        : device(loop, with_path(options, dir.path())), transport(device, memory, loop), driver(memory, transport),
          guest(memory, driver, rx_payload, event_buffers) {}
    std::string path(uint32_t port) const { return fmt::format("{}_{}", device.socket_path(), port); }
    bool needs_reset() { return (transport.status() & status::kDeviceNeedsReset) != 0; }
};

inline sockaddr_un address_of(const std::string& path) {
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::memcpy(a.sun_path, path.data(), path.size());
    return a;
}

inline Fd host_connect(const std::string& path) {
    Fd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    const sockaddr_un a = address_of(path);
    if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&a), sizeof(a)) != 0)
        throw std::runtime_error("connect " + path);
    return fd;
}

inline Fd host_listen(const std::string& path) {
    Fd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    const sockaddr_un a = address_of(path);
    if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&a), sizeof(a)) != 0 || ::listen(fd.get(), 128) != 0)
        throw std::runtime_error("listen " + path);
    return fd;
}

inline bool readable(int fd, std::chrono::milliseconds timeout) {
    pollfd p{fd, POLLIN, 0};
    return ::poll(&p, 1, static_cast<int>(timeout.count())) == 1;
}

inline Fd host_accept(int listener) {
    if (!readable(listener, 5s)) return {};
    return Fd(::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC));
}

inline void send_all(int fd, std::string_view bytes) {
    while (!bytes.empty()) {
        const ssize_t n = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
        if (n <= 0) throw std::runtime_error("host write failed");
        bytes.remove_prefix(static_cast<size_t>(n));
    }
}

// Reads up to `want` bytes (fewer at EOF or after `timeout` without data).
inline std::string read_some(int fd, size_t want, std::chrono::milliseconds timeout = 5s) {
    std::string out;
    while (out.size() < want && readable(fd, timeout)) {
        char buf[4096];
        const ssize_t n = ::recv(fd, buf, std::min(sizeof(buf), want - out.size()), 0);
        if (n <= 0) break;
        out.append(buf, static_cast<size_t>(n));
    }
    return out;
}

inline std::string read_line(int fd) {
    std::string line;
    while (line.empty() || line.back() != '\n') {
        const std::string c = read_some(fd, 1);
        if (c.empty()) break;
        line += c;
    }
    return line;
}

// True if the host socket reads EOF (0) within the timeout.
inline bool host_sees_eof(int fd, std::chrono::milliseconds timeout = 5s) {
    if (!readable(fd, timeout)) return false;
    char c;
    return ::recv(fd, &c, 1, MSG_DONTWAIT) == 0;
}

// True if the host socket reads EOF or ECONNRESET (closed with our bytes unread).
inline bool host_sees_close(int fd, std::chrono::milliseconds timeout = 5s) {
    if (!readable(fd, timeout)) return false;
    char c;
    const ssize_t n = ::recv(fd, &c, 1, MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno == ECONNRESET);
}

inline std::span<const uint8_t> bytes_of(std::string_view s) {
    return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}
inline std::string text_of(const std::vector<uint8_t>& v) { return {v.begin(), v.end()}; }

// Next packet that is not a credit message.
inline std::optional<RxPacket> next_non_credit(FakeVsockGuest& guest, std::chrono::milliseconds timeout = 5s) {
    for (;;) {
        auto p = guest.next(timeout);
        if (!p || (p->header.op != op::kCreditUpdate && p->header.op != op::kCreditRequest)) return p;
    }
}

struct HostStream {
    Fd fd;
    uint32_t host_port = 0;
};

// A host program's CONNECT to `guest_port`, accepted by the fake guest's listener.
inline HostStream connect_from_host(VsockRig& rig, uint32_t guest_port, uint32_t guest_buf_alloc = 256 * 1024) {
    HostStream s{host_connect(rig.device.socket_path()), 0};
    send_all(s.fd.get(), fmt::format("CONNECT {}\n", guest_port));
    const auto request = rig.guest.next();
    REQUIRE(request);
    REQUIRE(request->header.op == op::kRequest);
    REQUIRE(request->header.dst_port == guest_port);
    s.host_port = request->header.src_port;
    rig.guest.send(FakeVsockGuest::header(op::kResponse, guest_port, s.host_port, guest_buf_alloc));
    REQUIRE(read_line(s.fd.get()) == fmt::format("OK {}\n", s.host_port));
    return s;
}

// A guest connect from `guest_port` to host port `host_port`, accepted on `listener`.
inline Fd connect_from_guest(VsockRig& rig, int listener, uint32_t guest_port, uint32_t host_port) {
    rig.guest.send(FakeVsockGuest::header(op::kRequest, guest_port, host_port));
    const auto response = rig.guest.next();
    REQUIRE(response);
    REQUIRE(response->header.op == op::kResponse);
    REQUIRE(response->header.src_port == host_port);
    REQUIRE(response->header.dst_port == guest_port);
    Fd fd = host_accept(listener);
    REQUIRE(fd);
    return fd;
}

}  // namespace nanovm::test::vsockrig
