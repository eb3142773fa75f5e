// Many concurrent vsock streams through one device: half opened by host programs
// (CONNECT), half by the guest (to <path>_8000), each carrying 1 MiB each way; the
// fake guest keeps to the device's credit and gives its own, like Linux does.
// Each direction of a stream is a 4-byte id then 1 MiB from a generator seeded by the
// id; receivers learn the id from the stream and check count and FNV-1a checksum.
#include <fcntl.h>

#include <catch2/catch.hpp>

#include <map>
#include <set>
#include <thread>
#include <vector>

#include "tests/unit/devices/virtio/vsock_rig.hpp"

using namespace nanovm;
using namespace nanovm::virtio::vsock;
using namespace nanovm::test;
using namespace nanovm::test::vsockrig;
using namespace std::chrono_literals;

namespace {

constexpr int kStreams = 64;
constexpr size_t kPayload = 1 * MiB;
constexpr size_t kStreamBytes = 4 + kPayload;  // id prefix + payload
constexpr uint32_t kGuestBufAlloc = 256 * 1024;
constexpr uint32_t kGuestListenPort = 5000;
constexpr uint32_t kHostListenPort = 8000;

// The bytes one direction of a stream carries: little-endian id, then xorshift bytes.
class Sender {
public:
    explicit Sender(uint32_t id) : id_(id), state_(id * 2654435761u + 12345u) {}
    size_t fill(uint8_t* out, size_t max) {
        const size_t n = std::min(max, kStreamBytes - produced_);
        for (size_t i = 0; i < n; ++i, ++produced_)
            out[i] = produced_ < 4 ? static_cast<uint8_t>(id_ >> (8 * produced_)) : next();
        return n;
    }
    bool done() const { return produced_ == kStreamBytes; }
    uint8_t next() {
        state_ ^= state_ << 13;
        state_ ^= state_ >> 17;
        state_ ^= state_ << 5;
        return static_cast<uint8_t>(state_);
    }

private:
    uint32_t id_;
    uint32_t state_;
    size_t produced_ = 0;
};

struct Receiver {
    uint32_t id = 0;
    size_t count = 0;
    uint64_t fnv = 1469598103934665603ull;
    void feed(const uint8_t* bytes, size_t n) {
        for (size_t i = 0; i < n; ++i, ++count) {
            if (count < 4) {
                id |= uint32_t{bytes[i]} << (8 * count);
            } else {
                fnv = (fnv ^ bytes[i]) * 1099511628211ull;
            }
        }
    }
};

uint64_t expected_checksum(uint32_t id) {
    Sender s(id);
    Receiver r;
    std::vector<uint8_t> buf(64 * 1024);
    while (!s.done()) r.feed(buf.data(), s.fill(buf.data(), buf.size()));
    return r.fnv;
}

// The host programs: 32 CONNECTs to the guest, 32 accepted guest connects; each
// sends its 1 MiB, shuts its write side, reads to EOF, closes.
struct HostSide {
    std::map<uint32_t, Receiver> received;  // by sender id
    std::string error;

    void run(const std::string& vm_socket, int listener) {
        struct Conn {
            Fd fd;
            Sender out;
            Receiver in;
            std::vector<uint8_t> pending;
            size_t pending_at = 0;
            bool shut = false, eof = false;
        };
        std::vector<Conn> conns;
        for (uint32_t i = 0; i < kStreams / 2; ++i) {
            conns.push_back({host_connect(vm_socket), Sender(i), {}, {}, 0, false, false});
            send_all(conns.back().fd.get(), fmt::format("CONNECT {}\n", kGuestListenPort));
        }
        for (uint32_t i = kStreams / 2; i < kStreams; ++i) {
            Fd fd = host_accept(listener);
            if (!fd) return void(error = "guest connect never arrived");
            conns.push_back({std::move(fd), Sender(i), {}, {}, 0, false, false});
        }
        for (uint32_t i = 0; i < kStreams / 2; ++i)
            if (read_line(conns[i].fd.get()).rfind("OK ", 0) != 0) return void(error = "no OK line");
        for (Conn& c : conns) ::fcntl(c.fd.get(), F_SETFL, O_NONBLOCK);

        const auto end = std::chrono::steady_clock::now() + 30s;
        size_t open = conns.size();
        std::vector<uint8_t> buf(64 * 1024);
        while (open > 0) {
            if (std::chrono::steady_clock::now() > end) return void(error = "host side timed out");
            std::vector<pollfd> fds;
            std::vector<Conn*> which;
            for (Conn& c : conns) {
                if (!c.fd) continue;
                fds.push_back({c.fd.get(), static_cast<short>(POLLIN | (c.shut ? 0 : POLLOUT)), 0});
                which.push_back(&c);
            }
            ::poll(fds.data(), fds.size(), 100);
            for (size_t k = 0; k < fds.size(); ++k) {
                Conn& c = *which[k];
                if (fds[k].revents & (POLLIN | POLLHUP | POLLERR)) {
                    const ssize_t n = ::recv(c.fd.get(), buf.data(), buf.size(), 0);
                    if (n > 0) c.in.feed(buf.data(), static_cast<size_t>(n));
                    if (n == 0) c.eof = true;
                    if (n < 0 && errno != EAGAIN) return void(error = fmt::format("host recv: {}", strerror(errno)));
                }
                if (!c.shut && (fds[k].revents & POLLOUT)) {
                    if (c.pending_at == c.pending.size()) {
                        c.pending.resize(64 * 1024);
                        c.pending.resize(c.out.fill(c.pending.data(), c.pending.size()));
                        c.pending_at = 0;
                    }
                    const ssize_t n = ::send(c.fd.get(), c.pending.data() + c.pending_at,
                                             c.pending.size() - c.pending_at, MSG_NOSIGNAL);
                    if (n > 0) c.pending_at += static_cast<size_t>(n);
                    if (n < 0 && errno != EAGAIN) return void(error = fmt::format("host send: {}", strerror(errno)));
                    if (c.out.done() && c.pending_at == c.pending.size()) {
                        ::shutdown(c.fd.get(), SHUT_WR);
                        c.shut = true;
                    }
                }
                if (c.shut && c.eof) {
                    received[c.in.id] = c.in;
                    c.fd.reset();
                    --open;
                }
            }
        }
    }
};

// The guest's sockets, as Linux's virtio transport would keep them.
struct GuestStream {
    uint32_t guest_port = 0, host_port = 0;
    bool established = false;
    Sender out{0};
    bool shut_sent = false;
    Receiver in;
    uint32_t fwd_cnt = 0, fwd_told = 0;  // bytes consumed / last told to the device
    uint32_t peer_buf = 0, peer_fwd = 0, tx_cnt = 0;
    uint32_t peer_shutdown = 0;
    bool closed = false;
};

}  // namespace

TEST_CASE("64 concurrent vsock streams carry 1 MiB each way with matching checksums", "[vsock]") {
    VsockRig rig({}, 64 * 1024);  // 64 KiB rx buffers, like a tuned guest
    Fd listener = host_listen(rig.path(kHostListenPort));
    HostSide host;
    std::thread host_thread([&] { host.run(rig.device.socket_path(), listener.get()); });
    // An exception below must reach Catch with its message, not abort on a joinable
    // thread: the host side ends by itself (done, or its 30 s timeout).
    struct Joiner {
        std::thread& t;
        ~Joiner() {
            if (t.joinable()) t.join();
        }
    } joiner{host_thread};

    std::map<std::pair<uint32_t, uint32_t>, GuestStream> streams;  // (guest port, host port)
    uint32_t next_guest_id = 1000;
    const auto add = [&](uint32_t guest_port, uint32_t host_port) -> GuestStream& {
        GuestStream& s = streams[{guest_port, host_port}];
        s.guest_port = guest_port;
        s.host_port = host_port;
        s.out = Sender(next_guest_id++);
        return s;
    };
    for (uint32_t k = 0; k < kStreams / 2; ++k) {
        add(40000 + k, kHostListenPort);
        rig.guest.send(FakeVsockGuest::header(op::kRequest, 40000 + k, kHostListenPort, kGuestBufAlloc), {}, false);
    }
    rig.guest.kick_tx();

    std::string failure;
    std::vector<uint8_t> chunk(kMaxPacketPayload);
    const auto end = std::chrono::steady_clock::now() + 30s;
    const auto all_closed = [&] {
        return streams.size() == kStreams &&
               std::all_of(streams.begin(), streams.end(), [](const auto& kv) { return kv.second.closed; });
    };
    while (!all_closed() && failure.empty()) {
        if (std::chrono::steady_clock::now() > end) {
            failure = "guest side timed out";
            break;
        }
        bool progress = false;
        for (RxPacket& p : rig.guest.poll()) {
            progress = true;
            const PacketHeader& h = p.header;
            if (h.op == op::kRequest) {
                GuestStream& s = add(h.dst_port, h.src_port);
                s.established = true;
                s.peer_buf = h.buf_alloc;
                s.peer_fwd = h.fwd_cnt;
                rig.guest.send(FakeVsockGuest::header(op::kResponse, h.dst_port, h.src_port, kGuestBufAlloc), {},
                               false);
                continue;
            }
            const auto it = streams.find({h.dst_port, h.src_port});
            if (it == streams.end() || it->second.closed) {
                failure = fmt::format("packet op {} for unknown stream {}:{}", h.op, h.dst_port, h.src_port);
                break;
            }
            GuestStream& s = it->second;
            s.peer_buf = h.buf_alloc;
            s.peer_fwd = h.fwd_cnt;
            switch (h.op) {
                case op::kResponse: s.established = true; break;
                case op::kRw:
                    if (s.in.count + h.len > kStreamBytes || static_cast<uint32_t>(s.fwd_cnt - s.fwd_told) + h.len >
                                                                   kGuestBufAlloc) {
                        failure = "device exceeded the guest's credit or the stream's length";
                    }
                    s.in.feed(p.payload.data(), p.payload.size());
                    s.fwd_cnt += h.len;  // consumed at once
                    break;
                case op::kCreditRequest:
                    rig.guest.send(FakeVsockGuest::header(op::kCreditUpdate, s.guest_port, s.host_port,
                                                          kGuestBufAlloc, s.fwd_cnt),
                                   {}, false);
                    s.fwd_told = s.fwd_cnt;
                    break;
                case op::kShutdown:
                    s.peer_shutdown |= h.flags;
                    if (s.peer_shutdown == shutdown::kBoth) {  // Linux answers a full shutdown with RST
                        rig.guest.send(FakeVsockGuest::header(op::kRst, s.guest_port, s.host_port), {}, false);
                        s.closed = true;
                    }
                    break;
                case op::kCreditUpdate: break;
                default: failure = fmt::format("unexpected op {} on stream {}:{}", h.op, h.dst_port, h.src_port);
            }
        }
        // One packet per stream per round, within the device's credit.
        for (auto& [key, s] : streams) {
            if (!s.established || s.closed) continue;
            if (rig.guest.tx_slots_free() < 2) break;
            if (s.fwd_cnt - s.fwd_told >= kGuestBufAlloc / 4) {
                rig.guest.send(FakeVsockGuest::header(op::kCreditUpdate, s.guest_port, s.host_port, kGuestBufAlloc,
                                                      s.fwd_cnt),
                               {}, false);
                s.fwd_told = s.fwd_cnt;
                progress = true;
            }
            if (s.shut_sent) continue;
            const uint32_t free = s.peer_buf - static_cast<uint32_t>(s.tx_cnt - s.peer_fwd);
            const size_t n = s.out.fill(chunk.data(), std::min<size_t>(free, chunk.size()));
            if (n > 0) {
                rig.guest.send(FakeVsockGuest::header(op::kRw, s.guest_port, s.host_port, kGuestBufAlloc, s.fwd_cnt),
                               {chunk.data(), n}, false);
                s.tx_cnt += static_cast<uint32_t>(n);
                s.fwd_told = s.fwd_cnt;
                progress = true;
            }
            if (s.out.done()) {
                rig.guest.send(FakeVsockGuest::header(op::kShutdown, s.guest_port, s.host_port, kGuestBufAlloc,
                                                      s.fwd_cnt, shutdown::kSend),
                               {}, false);
                s.shut_sent = true;
            }
        }
        rig.guest.kick_tx();
        if (!progress) std::this_thread::sleep_for(50us);
    }
    host_thread.join();
    REQUIRE(failure.empty());
    REQUIRE(host.error.empty());

    // Every stream's bytes arrived whole, once, in order, on the matching stream.
    std::set<uint32_t> guest_got;
    for (const auto& [key, s] : streams) {
        CHECK(s.in.count == kStreamBytes);
        CHECK(s.in.id < kStreams);
        CHECK(s.in.fnv == expected_checksum(s.in.id));
        guest_got.insert(s.in.id);
    }
    CHECK(guest_got.size() == kStreams);
    REQUIRE(host.received.size() == kStreams);
    for (const auto& [id, r] : host.received) {
        CHECK(r.count == kStreamBytes);
        CHECK(r.fnv == expected_checksum(id));
    }
    CHECK(eventually([&] { return rig.device.stream_count() == 0; }));
}
