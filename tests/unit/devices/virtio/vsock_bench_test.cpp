// Rough vsock device throughput against the fake guest (hidden: run with
// `unit_tests "[.vsock-bench]"`). One stream, host -> guest and guest -> host, with
// 4 KiB (Linux's default) and 64 KiB rx buffers. The fake guest's copies count in the
// figures, so they are a floor for the device, not a guest's throughput.
#include <catch2/catch.hpp>

#include <chrono>
#include <thread>

#include "tests/unit/devices/virtio/vsock_rig.hpp"

using namespace nanovm;
using namespace nanovm::virtio::vsock;
using namespace nanovm::test;
using namespace nanovm::test::vsockrig;
using namespace std::chrono_literals;

namespace {

constexpr size_t kBytes = 256 * MiB;
constexpr uint32_t kGuestBuf = 256 * 1024;

double mib_per_s(size_t bytes, std::chrono::steady_clock::duration d) {
    return static_cast<double>(bytes) / MiB / std::chrono::duration<double>(d).count();
}

double host_to_guest(uint32_t rx_payload) {
    VsockRig rig({}, rx_payload);
    HostStream s = connect_from_host(rig, 5000, kGuestBuf);
    const auto start = std::chrono::steady_clock::now();
    std::thread writer([&] {
        const std::string chunk(1 * MiB, 'x');
        for (size_t sent = 0; sent < kBytes; sent += chunk.size()) send_all(s.fd.get(), chunk);
    });
    size_t received = 0;
    uint32_t told = 0;
    while (received < kBytes) {
        for (const RxPacket& p : rig.guest.poll())
            if (p.header.op == op::kRw) received += p.payload.size();
        if (received - told >= kGuestBuf / 2) {
            told = static_cast<uint32_t>(received);
            rig.guest.send(FakeVsockGuest::header(op::kCreditUpdate, 5000, s.host_port, kGuestBuf, told));
        }
    }
    const auto elapsed = std::chrono::steady_clock::now() - start;
    writer.join();
    return mib_per_s(kBytes, elapsed);
}

double guest_to_host() {
    VsockRig rig;
    Fd listener = host_listen(rig.path(7000));
    Fd host = connect_from_guest(rig, listener.get(), 41000, 7000);
    const auto start = std::chrono::steady_clock::now();
    std::thread reader([&] {
        std::vector<char> buf(1 * MiB);
        for (size_t got = 0; got < kBytes;) {
            const ssize_t n = ::recv(host.get(), buf.data(), buf.size(), 0);
            if (n <= 0) break;
            got += static_cast<size_t>(n);
        }
    });
    const std::vector<uint8_t> chunk(kMaxPacketPayload, 'y');
    uint32_t dev_buf = 256 * 1024, dev_fwd = 0, tx_cnt = 0;
    size_t sent = 0;
    while (sent < kBytes) {
        for (const RxPacket& p : rig.guest.poll()) {
            dev_buf = p.header.buf_alloc;
            dev_fwd = p.header.fwd_cnt;
        }
        const uint32_t free = dev_buf - (tx_cnt - dev_fwd);
        if (free < chunk.size() || rig.guest.tx_slots_free() == 0) continue;
        rig.guest.send(FakeVsockGuest::header(op::kRw, 41000, 7000), chunk);
        sent += chunk.size();
        tx_cnt += static_cast<uint32_t>(chunk.size());
    }
    reader.join();
    return mib_per_s(kBytes, std::chrono::steady_clock::now() - start);
}

}  // namespace

TEST_CASE("vsock throughput against the fake guest", "[.vsock-bench]") {
    const double h2g_4k = host_to_guest(4096);
    const double h2g_64k = host_to_guest(64 * 1024);
    const double g2h = guest_to_host();
    WARN(fmt::format("host->guest {:.0f} MiB/s (4 KiB rx buffers), {:.0f} MiB/s (64 KiB); guest->host {:.0f} MiB/s "
                     "(64 KiB packets)",
                     h2g_4k, h2g_64k, g2h));
}
