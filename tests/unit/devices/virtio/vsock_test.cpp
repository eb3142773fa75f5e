// virtio-vsock against simulated guest memory: FakeVsockGuest plays the guest's vsock
// driver, real Unix sockets play the host programs.
#include <catch2/catch.hpp>

#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "tests/unit/devices/virtio/vsock_rig.hpp"

using namespace nanovm;
using namespace nanovm::virtio;
using namespace nanovm::virtio::vsock;
using namespace nanovm::test;
using namespace nanovm::test::vsockrig;
using namespace std::chrono_literals;

TEST_CASE("vsock config space holds the guest CID and the device offers three queues", "[vsock]") {
    VsockRig rig;
    CHECK(rig.driver.reg(mmio::kDeviceId) == device_id::kVsock);
    CHECK(rig.driver.reg(mmio::kConfig) == FakeVsockGuest::kGuestCid);
    CHECK(rig.driver.reg(mmio::kConfig + 4) == 0);
    CHECK(rig.transport.queue_count() == 3);
    CHECK((rig.driver.device_features() & kFeatureStream) != 0);
}

TEST_CASE("host CONNECT reaches the guest listener as REQUEST; RESPONSE answers OK <port>; bytes flow both ways",
          "[vsock]") {
    VsockRig rig;
    Fd host = host_connect(rig.device.socket_path());
    send_all(host.get(), "CONNECT 1234\n");
    const auto request = rig.guest.next();
    REQUIRE(request);
    const PacketHeader& h = request->header;
    CHECK(h.op == op::kRequest);
    CHECK(h.type == kTypeStream);
    CHECK(h.src_cid == kHostCid);
    CHECK(h.dst_cid == FakeVsockGuest::kGuestCid);
    CHECK(h.dst_port == 1234);
    CHECK(h.src_port >= kFirstLocalPort);
    CHECK(h.buf_alloc == 256 * 1024);
    CHECK(h.len == 0);

    rig.guest.send(FakeVsockGuest::header(op::kResponse, 1234, h.src_port));
    CHECK(read_line(host.get()) == fmt::format("OK {}\n", h.src_port));

    send_all(host.get(), "hello from the host");
    auto data = rig.guest.next();
    REQUIRE(data);
    CHECK(data->header.op == op::kRw);
    CHECK(data->header.src_port == h.src_port);
    CHECK(data->header.dst_port == 1234);
    CHECK(text_of(data->payload) == "hello from the host");

    rig.guest.send(FakeVsockGuest::header(op::kRw, 1234, h.src_port), bytes_of("hello from the guest"));
    CHECK(read_some(host.get(), 20) == "hello from the guest");
    CHECK(rig.device.stream_count() == 1);

    // Two host programs get two distinct host ports.
    HostStream second = connect_from_host(rig, 1234);
    CHECK(second.host_port != h.src_port);
    CHECK(rig.device.stream_count() == 2);
}

TEST_CASE("host bytes written right after the CONNECT line reach the guest after RESPONSE", "[vsock]") {
    VsockRig rig;
    Fd host = host_connect(rig.device.socket_path());
    send_all(host.get(), "CONNECT 77\nearly bytes");
    const auto request = rig.guest.next();
    REQUIRE(request);
    REQUIRE(request->header.op == op::kRequest);
    rig.guest.send(FakeVsockGuest::header(op::kResponse, 77, request->header.src_port));
    CHECK(read_line(host.get()) == fmt::format("OK {}\n", request->header.src_port));
    const auto data = next_non_credit(rig.guest);
    REQUIRE(data);
    CHECK(text_of(data->payload) == "early bytes");
}

TEST_CASE("a malformed CONNECT line closes the host connection without bothering the guest", "[vsock]") {
    VsockRig rig;
    for (const char* line : {"CONNECT\n", "CONNECT -1\n", "CONNECT 99999999999\n", "HELLO 5\n",
                             "CONNECT 12345678901234567890123456789\n"}) {
        Fd host = host_connect(rig.device.socket_path());
        send_all(host.get(), line);
        INFO(line);
        CHECK(host_sees_close(host.get()));
    }
    CHECK_FALSE(rig.guest.next(100ms));
}

TEST_CASE("guest RST to a host CONNECT closes the host socket", "[vsock]") {
    VsockRig rig;
    Fd host = host_connect(rig.device.socket_path());
    send_all(host.get(), "CONNECT 9\n");
    const auto request = rig.guest.next();
    REQUIRE(request);
    rig.guest.send(FakeVsockGuest::header(op::kRst, 9, request->header.src_port));
    CHECK(host_sees_eof(host.get()));
    CHECK(eventually([&] { return rig.device.stream_count() == 0; }));
    CHECK_FALSE(rig.guest.next(50ms));  // RST is never answered with RST
}

TEST_CASE("a host CONNECT the guest never answers is reset after the connect timeout", "[vsock]") {
    VsockOptions options;
    options.connect_timeout = 100ms;
    VsockRig rig(options);
    Fd host = host_connect(rig.device.socket_path());
    send_all(host.get(), "CONNECT 9\n");
    const auto request = rig.guest.next();
    REQUIRE(request);
    CHECK(host_sees_eof(host.get(), 2s));
    const auto rst = rig.guest.next();
    REQUIRE(rst);
    CHECK(rst->header.op == op::kRst);
    CHECK(rst->header.src_port == request->header.src_port);
}

TEST_CASE("guest connect to CID 2 reaches the Unix listener at <path>_<port>; bytes flow both ways", "[vsock]") {
    VsockRig rig;
    Fd listener = host_listen(rig.path(6000));
    // The header split over two descriptors (20 + 24 bytes) parses the same.
    rig.guest.send(FakeVsockGuest::header(op::kRequest, 40000, 6000), {}, true, false, 20);
    const auto response = rig.guest.next();
    REQUIRE(response);
    CHECK(response->header.op == op::kResponse);
    CHECK(response->header.src_cid == kHostCid);
    CHECK(response->header.src_port == 6000);
    CHECK(response->header.dst_port == 40000);
    Fd host = host_accept(listener.get());
    REQUIRE(host);

    rig.guest.send(FakeVsockGuest::header(op::kRw, 40000, 6000), bytes_of("ping"), true, false, 30);
    CHECK(read_some(host.get(), 4) == "ping");
    send_all(host.get(), "pong");
    const auto data = next_non_credit(rig.guest);
    REQUIRE(data);
    CHECK(data->header.op == op::kRw);
    CHECK(text_of(data->payload) == "pong");
}

TEST_CASE("guest connect to a port nobody listens on is answered with RST", "[vsock]") {
    VsockRig rig;
    rig.guest.send(FakeVsockGuest::header(op::kRequest, 40001, 6001));
    const auto rst = rig.guest.next();
    REQUIRE(rst);
    CHECK(rst->header.op == op::kRst);
    CHECK(rst->header.src_port == 6001);
    CHECK(rst->header.dst_port == 40001);
    CHECK(rig.device.stream_count() == 0);
}

TEST_CASE("credit: the device never sends more than the guest's buf_alloc and resumes on CREDIT_UPDATE", "[vsock]") {
    VsockRig rig;
    constexpr uint32_t kGuestBuf = 64 * 1024;
    constexpr size_t kTotal = 1 * MiB;
    HostStream s = connect_from_host(rig, 5000, kGuestBuf);
    std::string sent(kTotal, '\0');
    for (size_t i = 0; i < kTotal; ++i) sent[i] = static_cast<char>((i * 7 + i / 4096) & 0xff);
    std::thread writer([&] { send_all(s.fd.get(), sent); });

    std::string received;
    uint32_t fwd_cnt = 0;  // what the guest consumed and told the device
    bool saw_credit_request = false;
    // Phase 1: without a CREDIT_UPDATE the device stops at exactly 64 KiB.
    const auto take = [&](const RxPacket& p) {
        if (p.header.op == op::kCreditRequest) saw_credit_request = true;
        if (p.header.op == op::kRw) received.append(p.payload.begin(), p.payload.end());
        REQUIRE(received.size() <= kGuestBuf);
    };
    while (received.size() < kGuestBuf) {
        const auto p = rig.guest.next();
        REQUIRE(p);
        take(*p);
    }
    while (const auto p = rig.guest.next(300ms)) take(*p);  // and nothing more comes
    CHECK(received.size() == kGuestBuf);
    CHECK(saw_credit_request);
    // Phase 2: the guest consumes and says so; in flight never exceeds its buf_alloc.
    while (received.size() < kTotal) {
        if (received.size() != fwd_cnt) {
            fwd_cnt = static_cast<uint32_t>(received.size());
            rig.guest.send(FakeVsockGuest::header(op::kCreditUpdate, 5000, s.host_port, kGuestBuf, fwd_cnt));
        }
        const auto p = rig.guest.next();
        REQUIRE(p);
        if (p->header.op == op::kRw) received.append(p->payload.begin(), p->payload.end());
        REQUIRE(received.size() - fwd_cnt <= kGuestBuf);
    }
    writer.join();
    CHECK(received == sent);
}

TEST_CASE("a guest ignoring the credit it was given is reset (the VMM buffers at most buf_alloc)", "[vsock]") {
    VsockOptions options;
    options.stream_buf_alloc = 64 * 1024;
    VsockRig rig(options);
    HostStream s = connect_from_host(rig, 5000);  // the host program never reads
    const std::vector<uint8_t> chunk(kMaxPacketPayload, 0xab);
    std::optional<RxPacket> rst;
    for (int i = 0; i < 64 && !rst; ++i) {  // up to 4 MiB, far past socket buffer + credit
        rig.guest.send(FakeVsockGuest::header(op::kRw, 5000, s.host_port), chunk);
        for (RxPacket& p : rig.guest.poll())
            if (p.header.op == op::kRst) rst = std::move(p);
    }
    if (!rst) rst = next_non_credit(rig.guest);
    REQUIRE(rst);
    CHECK(rst->header.op == op::kRst);
    CHECK(rst->header.src_port == s.host_port);
    CHECK(eventually([&] { return rig.device.stream_count() == 0; }));
}

TEST_CASE("host data waits in the VMM while the host socket is full and is never dropped or reordered", "[vsock]") {
    VsockRig rig;
    Fd listener = host_listen(rig.path(7000));
    Fd host = connect_from_guest(rig, listener.get(), 41000, 7000);
    // The guest sends 2 MiB, respecting the device's credit; the host reads late.
    constexpr size_t kTotal = 2 * MiB;
    std::vector<uint8_t> sent(kTotal);
    for (size_t i = 0; i < kTotal; ++i) sent[i] = static_cast<uint8_t>(i * 13 + i / 65536);
    uint32_t dev_buf = 256 * 1024, dev_fwd = 0, tx_cnt = 0;
    size_t offset = 0;
    std::string received;
    std::thread reader([&] {
        std::this_thread::sleep_for(200ms);  // let the socket fill up and the device queue
        received = read_some(host.get(), kTotal, 5s);
    });
    while (offset < kTotal) {
        for (RxPacket& p : rig.guest.poll()) {
            REQUIRE(p.header.op != op::kRst);
            dev_buf = p.header.buf_alloc;
            dev_fwd = p.header.fwd_cnt;
        }
        const uint32_t in_flight = tx_cnt - dev_fwd;
        const size_t n = std::min<size_t>({kTotal - offset, kMaxPacketPayload, dev_buf - in_flight});
        if (n == 0) {
            std::this_thread::sleep_for(100us);
            continue;
        }
        rig.guest.send(FakeVsockGuest::header(op::kRw, 41000, 7000), {sent.data() + offset, n});
        offset += n;
        tx_cnt += static_cast<uint32_t>(n);
    }
    reader.join();
    CHECK(received.size() == kTotal);
    CHECK(std::equal(sent.begin(), sent.end(), received.begin(), received.end(),
                     [](uint8_t a, char b) { return a == static_cast<uint8_t>(b); }));
}

TEST_CASE("malformed tx packets are answered with RST or dropped, and the device keeps working", "[vsock]") {
    VsockRig rig;
    const auto expect_rst = [&](uint32_t guest_port, uint32_t host_port) {
        const auto p = rig.guest.next();
        REQUIRE(p);
        CHECK(p->header.op == op::kRst);
        CHECK(p->header.src_port == host_port);
        CHECK(p->header.dst_port == guest_port);
    };
    const std::vector<uint8_t> ten(10, 1);
    auto h = FakeVsockGuest::header(op::kRw, 50, 60);
    h.len = 100;  // but 10 bytes present
    rig.guest.send(h, ten, true, true);
    expect_rst(50, 60);
    h.len = 5;  // fewer than present
    rig.guest.send(h, ten, true, true);
    expect_rst(50, 60);
    const std::vector<uint8_t> big(kMaxPacketPayload + 1, 2);
    rig.guest.send(FakeVsockGuest::header(op::kRw, 51, 61), big);  // len > 64 KiB
    expect_rst(51, 61);
    h = FakeVsockGuest::header(op::kRequest, 52, 62);
    h.type = kTypeSeqpacket;
    rig.guest.send(h);
    expect_rst(52, 62);
    rig.guest.send(FakeVsockGuest::header(99, 53, 63));  // unknown op
    expect_rst(53, 63);
    rig.guest.send(FakeVsockGuest::header(op::kInvalid, 53, 63));
    expect_rst(53, 63);
    rig.guest.send(FakeVsockGuest::header(op::kCreditUpdate, 54, 64), ten);  // payload on a control packet
    expect_rst(54, 64);
    rig.guest.send(FakeVsockGuest::header(op::kRw, 55, 65), ten);  // no such stream
    expect_rst(55, 65);
    rig.guest.send(FakeVsockGuest::header(op::kShutdown, 56, 66, 0, 0, shutdown::kBoth));
    expect_rst(56, 66);

    // Dropped without an answer: not from this guest, not to the host, a bad RST.
    h = FakeVsockGuest::header(op::kRequest, 57, 67);
    h.dst_cid = 5;
    rig.guest.send(h);
    h = FakeVsockGuest::header(op::kRequest, 57, 67);
    h.src_cid = 4;
    rig.guest.send(h);
    h = FakeVsockGuest::header(op::kRst, 57, 67);
    h.type = kTypeSeqpacket;
    rig.guest.send(h);
    rig.guest.send(FakeVsockGuest::header(op::kRst, 57, 67));  // RST for no stream: nothing
    CHECK_FALSE(rig.guest.next(100ms));

    CHECK_FALSE(rig.needs_reset());
    Fd listener = host_listen(rig.path(6100));
    Fd host = connect_from_guest(rig, listener.get(), 58, 6100);
    CHECK(rig.device.stream_count() == 1);
}

TEST_CASE("a malformed packet on a live stream resets it and closes the host socket", "[vsock]") {
    VsockRig rig;
    HostStream s = connect_from_host(rig, 5000);
    auto h = FakeVsockGuest::header(op::kRw, 5000, s.host_port);
    h.len = 1000;
    rig.guest.send(h, bytes_of("short"), true, true);
    const auto rst = next_non_credit(rig.guest);
    REQUIRE(rst);
    CHECK(rst->header.op == op::kRst);
    CHECK(host_sees_eof(s.fd.get()));
    CHECK(rig.device.stream_count() == 0);
}

TEST_CASE("a tx chain shorter than a header puts the device in NEEDS_RESET; a driver reset recovers it", "[vsock]") {
    VsockRig rig;
    const std::vector<uint8_t> stub(20, 0);
    rig.guest.send_raw(stub);
    CHECK(eventually([&] { return rig.needs_reset(); }));
    // The driver resets and brings the device up again: it works.
    FakeVsockGuest again(rig.memory, rig.driver);
    CHECK_FALSE(rig.needs_reset());
    Fd listener = host_listen(rig.path(6150));
    again.send(FakeVsockGuest::header(op::kRequest, 40, 6150));
    const auto response = again.next();
    REQUIRE(response);
    CHECK(response->header.op == op::kResponse);
}

TEST_CASE("a failed device leaves host connections waiting and serves them after the driver's reset", "[vsock]") {
    VsockRig rig;
    const std::vector<uint8_t> stub(20, 0);
    rig.guest.send_raw(stub);
    REQUIRE(eventually([&] { return rig.needs_reset(); }));
    Fd host = host_connect(rig.device.socket_path());
    send_all(host.get(), "CONNECT 5000\n");
    CHECK_FALSE(readable(host.get(), 100ms));  // neither served nor closed
    FakeVsockGuest again(rig.memory, rig.driver);
    const auto request = again.next();
    REQUIRE(request);
    CHECK(request->header.op == op::kRequest);
    CHECK(request->header.dst_port == 5000);
}

TEST_CASE("an rx buffer too small for a header puts the device in NEEDS_RESET", "[vsock]") {
    test::TempDir dir{"vsock"};
    GuestMemory memory = GuestMemory::create(16 * MiB);
    EventLoop loop;
    VsockDevice device(loop, with_path({}, dir.path()));
    MmioTransport transport(device, memory, loop);
    test::TestDriver driver(memory, transport);
    REQUIRE(driver.bring_up());
    driver.post(kRxQueue, {test::TestBuffer::out(16)});
    driver.kick(kRxQueue);
    // A connect to a missing listener needs an RST: it goes into the 16-byte buffer.
    const auto request = FakeVsockGuest::header(op::kRequest, 1, 2);
    std::vector<uint8_t> bytes(sizeof(request));
    std::memcpy(bytes.data(), &request, sizeof(request));
    driver.post(kTxQueue, {test::TestBuffer::in(bytes)});
    driver.kick(kTxQueue);
    CHECK(eventually([&] { return (transport.status() & status::kDeviceNeedsReset) != 0; }));
}

TEST_CASE("transport reset: the event reaches the guest, host connections close, the listener stays", "[vsock]") {
    VsockRig rig;
    HostStream from_host = connect_from_host(rig, 5000);
    Fd listener = host_listen(rig.path(6200));
    Fd from_guest = connect_from_guest(rig, listener.get(), 42000, 6200);
    REQUIRE(rig.device.stream_count() == 2);

    rig.device.send_transport_reset();
    std::vector<uint32_t> events;
    CHECK(eventually([&] {
        for (uint32_t id : rig.guest.take_events()) events.push_back(id);
        return !events.empty();
    }));
    CHECK(events == std::vector<uint32_t>{kEventTransportReset});
    CHECK(rig.device.stream_count() == 0);
    CHECK(host_sees_eof(from_host.fd.get()));
    CHECK(host_sees_eof(from_guest.get()));
    CHECK_FALSE(rig.guest.next(50ms));  // no RSTs: the guest drops its streams itself

    HostStream again = connect_from_host(rig, 5000);
    CHECK(rig.device.stream_count() == 1);
}

TEST_CASE("transport reset waits for an event buffer when the guest has none posted", "[vsock]") {
    VsockRig rig({}, 4096, 0);
    rig.device.send_transport_reset();
    CHECK(rig.device.save_state().transport_reset_pending);
    std::this_thread::sleep_for(20ms);
    CHECK(rig.guest.take_events().empty());
    rig.guest.post_event_buffer();
    std::vector<uint32_t> events;
    CHECK(eventually([&] {
        for (uint32_t id : rig.guest.take_events()) events.push_back(id);
        return !events.empty();
    }));
    CHECK(events == std::vector<uint32_t>{kEventTransportReset});
    CHECK_FALSE(rig.device.save_state().transport_reset_pending);
}

TEST_CASE("a host CONNECT made while the guest handles a transport reset reaches it only after the reset",
          "[vsock]") {
    VsockRig rig;
    rig.device.send_transport_reset();  // as after a restore: the event is in the guest's buffer
    Fd host = host_connect(rig.device.socket_path());
    send_all(host.get(), "CONNECT 5000\n");
    // The guest has not handed the event back: a REQUEST now could be accepted and
    // then reset by the guest's own handling of the event.
    CHECK_FALSE(rig.guest.next(150ms));
    std::vector<uint32_t> events;
    CHECK(eventually([&] {
        for (uint32_t id : rig.guest.take_events()) events.push_back(id);  // handled: re-posted + kicked
        return !events.empty();
    }));
    CHECK(events == std::vector<uint32_t>{kEventTransportReset});
    const auto request = rig.guest.next();
    REQUIRE(request);
    CHECK(request->header.op == op::kRequest);
    CHECK(request->header.dst_port == 5000);
    rig.guest.send(FakeVsockGuest::header(op::kResponse, 5000, request->header.src_port));
    CHECK(read_line(host.get()) == fmt::format("OK {}\n", request->header.src_port));
}

TEST_CASE("a guest that never hands back the transport reset event still gets host CONNECTs (after 1 s)",
          "[vsock]") {
    VsockRig rig;
    rig.device.send_transport_reset();
    Fd host = host_connect(rig.device.socket_path());
    send_all(host.get(), "CONNECT 5000\n");
    CHECK_FALSE(rig.guest.next(300ms));  // held
    const auto request = rig.guest.next(5s);
    REQUIRE(request);
    CHECK(request->header.op == op::kRequest);
    CHECK(request->header.dst_port == 5000);
}

TEST_CASE("host closing its socket: the guest sees SHUTDOWN both ways, then RST if it stays silent", "[vsock]") {
    VsockOptions options;
    options.shutdown_timeout = 100ms;
    VsockRig rig(options);
    HostStream s = connect_from_host(rig, 5000);
    send_all(s.fd.get(), "goodbye");
    s.fd.reset();
    auto p = next_non_credit(rig.guest);
    REQUIRE(p);
    CHECK(p->header.op == op::kRw);  // bytes written before the close still arrive first
    CHECK(text_of(p->payload) == "goodbye");
    p = next_non_credit(rig.guest);
    REQUIRE(p);
    CHECK(p->header.op == op::kShutdown);
    CHECK(p->header.flags == shutdown::kBoth);
    p = next_non_credit(rig.guest, 2s);
    REQUIRE(p);
    CHECK(p->header.op == op::kRst);
    CHECK(rig.device.stream_count() == 0);
}

TEST_CASE("host closing its socket: the guest's RST answer to SHUTDOWN ends the stream", "[vsock]") {
    VsockRig rig;
    HostStream s = connect_from_host(rig, 5000);
    s.fd.reset();
    const auto p = next_non_credit(rig.guest);
    REQUIRE(p);
    CHECK(p->header.op == op::kShutdown);
    CHECK(p->header.flags == shutdown::kBoth);
    rig.guest.send(FakeVsockGuest::header(op::kRst, 5000, s.host_port));
    CHECK(eventually([&] { return rig.device.stream_count() == 0; }));
    CHECK_FALSE(rig.guest.next(50ms));
}

TEST_CASE("host socket dropped while the guest sends: the guest gets RST", "[vsock]") {
    VsockRig rig;
    Fd listener = host_listen(rig.path(6300));
    Fd host = connect_from_guest(rig, listener.get(), 43000, 6300);
    host.reset();
    rig.guest.send(FakeVsockGuest::header(op::kRw, 43000, 6300), bytes_of("anyone there?"));
    std::optional<RxPacket> p;
    do {
        p = next_non_credit(rig.guest);
    } while (p && p->header.op == op::kShutdown);
    REQUIRE(p);
    CHECK(p->header.op == op::kRst);
    CHECK(p->header.src_port == 6300);
    CHECK(eventually([&] { return rig.device.stream_count() == 0; }));
}

TEST_CASE("half-close: host SHUT_WR becomes SHUTDOWN SEND; guest SHUTDOWN SEND becomes EOF on the host", "[vsock]") {
    VsockRig rig;
    HostStream s = connect_from_host(rig, 5000);
    send_all(s.fd.get(), "last words");
    ::shutdown(s.fd.get(), SHUT_WR);
    auto p = next_non_credit(rig.guest);
    REQUIRE(p);
    CHECK(text_of(p->payload) == "last words");
    p = next_non_credit(rig.guest);
    REQUIRE(p);
    CHECK(p->header.op == op::kShutdown);
    CHECK(p->header.flags == shutdown::kSend);
    // The other direction still works.
    rig.guest.send(FakeVsockGuest::header(op::kRw, 5000, s.host_port), bytes_of("reply"));
    CHECK(read_some(s.fd.get(), 5) == "reply");
    rig.guest.send(FakeVsockGuest::header(op::kShutdown, 5000, s.host_port, 256 * 1024, 10, shutdown::kSend));
    CHECK(host_sees_eof(s.fd.get()));
    // Both directions are done now: the device says so, the guest answers RST.
    p = next_non_credit(rig.guest);
    REQUIRE(p);
    CHECK(p->header.op == op::kShutdown);
    CHECK(p->header.flags == shutdown::kBoth);
    rig.guest.send(FakeVsockGuest::header(op::kRst, 5000, s.host_port));
    CHECK(eventually([&] { return rig.device.stream_count() == 0; }));
}

TEST_CASE("guest close (SHUTDOWN both): its last bytes reach the host, then the device answers RST", "[vsock]") {
    VsockRig rig;
    Fd listener = host_listen(rig.path(6400));
    Fd host = connect_from_guest(rig, listener.get(), 44000, 6400);
    rig.guest.send(FakeVsockGuest::header(op::kRw, 44000, 6400), bytes_of("bye"));
    rig.guest.send(FakeVsockGuest::header(op::kShutdown, 44000, 6400, 256 * 1024, 0, shutdown::kBoth));
    const auto p = next_non_credit(rig.guest);
    REQUIRE(p);
    CHECK(p->header.op == op::kRst);
    CHECK(read_some(host.get(), 3) == "bye");
    CHECK(host_sees_eof(host.get()));
    CHECK(rig.device.stream_count() == 0);
}

TEST_CASE("CREDIT_REQUEST is answered with CREDIT_UPDATE carrying the device's buf_alloc and fwd_cnt", "[vsock]") {
    VsockRig rig;
    Fd listener = host_listen(rig.path(6500));
    Fd host = connect_from_guest(rig, listener.get(), 45000, 6500);
    rig.guest.send(FakeVsockGuest::header(op::kRw, 45000, 6500), bytes_of("12345"));
    CHECK(read_some(host.get(), 5) == "12345");
    rig.guest.send(FakeVsockGuest::header(op::kCreditRequest, 45000, 6500));
    const auto p = rig.guest.next();
    REQUIRE(p);
    CHECK(p->header.op == op::kCreditUpdate);
    CHECK(p->header.buf_alloc == 256 * 1024);
    CHECK(p->header.fwd_cnt == 5);
}

TEST_CASE("the stream cap refuses further guest connects and host connections", "[vsock]") {
    VsockOptions options;
    options.max_streams = 4;
    VsockRig rig(options);
    Fd listener = host_listen(rig.path(6600));
    std::vector<Fd> hosts;
    for (uint32_t port = 1; port <= 4; ++port) hosts.push_back(connect_from_guest(rig, listener.get(), port, 6600));
    rig.guest.send(FakeVsockGuest::header(op::kRequest, 5, 6600));
    const auto rst = rig.guest.next();
    REQUIRE(rst);
    CHECK(rst->header.op == op::kRst);
    Fd refused = host_connect(rig.device.socket_path());
    CHECK(host_sees_eof(refused.get()));
    CHECK(rig.device.stream_count() == 4);
}

TEST_CASE("vsock state keeps the CID and the host port allocator", "[vsock]") {
    VsockRig rig;
    HostStream s = connect_from_host(rig, 5000);
    CHECK(s.host_port == kFirstLocalPort);
    VsockState state = rig.device.save_state();
    CHECK(state.guest_cid == FakeVsockGuest::kGuestCid);
    CHECK(state.next_local_port == kFirstLocalPort + 1);
    CHECK_FALSE(state.transport_reset_pending);
    state.next_local_port = 5000;
    rig.device.load_state(state);
    HostStream t = connect_from_host(rig, 5000);
    CHECK(t.host_port == 5000);
    state.guest_cid = 2;
    CHECK_THROWS_AS(rig.device.load_state(state), Error);
}

TEST_CASE("the vsock socket path: a dead VMM's stale socket is replaced, a live one is refused", "[vsock]") {
    test::TempDir dir{"vsock"};
    EventLoop loop;
    const VsockOptions options = with_path({}, dir.path());
    { Fd stale = host_listen(options.uds_path); }  // closed: the file stays behind
    VsockDevice device(loop, options);
    Fd client = host_connect(options.uds_path);   // the new listener answers
    CHECK(client);
    CHECK_THROWS_AS(VsockDevice(loop, options), Error);
    VsockOptions bad = options;
    bad.guest_cid = 2;
    bad.uds_path = dir.path() + "/other.sock";
    CHECK_THROWS_AS(VsockDevice(loop, bad), Error);
    bad.guest_cid = 3;
    bad.uds_path = std::string(100, 'x');
    CHECK_THROWS_AS(VsockDevice(loop, bad), Error);
}
