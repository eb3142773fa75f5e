#include "devices/virtio/vsock/vsock_device.hpp"

#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>

#include <fmt/format.h>

#include "devices/virtio/chain_io.hpp"
#include "devices/virtio/vsock/host_protocol.hpp"
#include "devices/virtio/vsock/packet.hpp"
#include "devices/virtio/vsock/unix_socket.hpp"
#include "vmm/error.hpp"

namespace nanovm::virtio::vsock {

namespace {

// Events watched on a stream's host socket: edge-triggered, so a socket the device
// is not reading (no credit, no rx buffer) does not wake the loop again and again.
constexpr uint32_t kStreamEvents = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
constexpr uint32_t kHandshakeEvents = EPOLLIN | EPOLLRDHUP | EPOLLET;
// RSTs for streams that no longer exist, waiting for rx buffers. Past this many the
// guest is not posting buffers while sending bad packets: further RSTs are dropped.
constexpr size_t kMaxPendingRsts = 1024;
// How long host REQUESTs wait for the driver to hand back a transport reset event.
constexpr std::chrono::milliseconds kResetAckTimeout{1000};
// "_4294967295": what the longest guest port adds to the socket path.
constexpr size_t kPortSuffixBytes = 11;
constexpr size_t kMaxSocketPath = sizeof(sockaddr_un::sun_path) - 1 - kPortSuffixBytes;

int64_t monotonic_ns() {
    timespec ts{};
    ::clock_gettime(CLOCK_MONOTONIC, &ts);
    return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

void check_cid(uint64_t cid) {
    if (cid < kMinGuestCid || cid > kMaxGuestCid)
        throw Error(fmt::format("vsock guest CID {} is outside [{}, {:#x}]", cid, kMinGuestCid, kMaxGuestCid));
}

}  // namespace

VsockDevice::VsockDevice(EventLoop& loop, VsockOptions options)
    : loop_(loop), options_(std::move(options)), guest_cid_(options_.guest_cid) {
    check_cid(options_.guest_cid);
    if (options_.stream_buf_alloc < 4096)
        throw Error(fmt::format("vsock stream buffer of {} bytes is below 4096", options_.stream_buf_alloc));
    if (options_.uds_path.empty() || options_.uds_path.size() > kMaxSocketPath)
        throw Error(fmt::format("vsock socket path '{}': empty or longer than {} bytes", options_.uds_path,
                                kMaxSocketPath));
    timer_ = Fd(::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC));
    if (!timer_) throw_errno("timerfd_create");
    listener_ = listen_unix(options_.uds_path);
}

VsockDevice::~VsockDevice() {
    loop_.run_sync([this] { reset(); });
    ::unlink(options_.uds_path.c_str());
}

std::string VsockDevice::name() const { return fmt::format("virtio-vsock cid {}", guest_cid_.load()); }

void VsockDevice::read_config(uint64_t offset, std::span<uint8_t> data) const {
    const VsockConfig config{guest_cid_.load()};
    const auto* bytes = reinterpret_cast<const uint8_t*>(&config);
    for (size_t i = 0; i < data.size() && offset + i < sizeof(config); ++i) data[i] = bytes[offset + i];
}

void VsockDevice::log_guest(const std::string& message) {
    uint64_t suppressed = 0;
    if (!log_limit_.allow(suppressed)) return;
    if (suppressed) log_line(fmt::format("{}: {} similar messages suppressed", name(), suppressed));
    log_line(fmt::format("{}: {}", name(), message));
}

template <typename F>
void VsockDevice::guarded(F&& work) noexcept {
    if (!live()) return quiesce();
    try {
        work();
    } catch (const std::exception& e) {
        active_->link.fail(e.what());
        quiesce();
    }
}

void VsockDevice::quiesce() noexcept {
    // A failed device serves nothing until the driver resets it; the level-triggered
    // listener and timer would otherwise wake the loop again and again. Streams are
    // edge-triggered and just wait for reset().
    loop_.remove(listener_.get());
    loop_.remove(timer_.get());
    listener_paused_ = false;  // nothing to resume until activate()
}

// --- lifecycle -------------------------------------------------------------------

void VsockDevice::activate(ActiveDevice& active) {
    active_ = &active;
    loop_.add(listener_.get(), EPOLLIN, [this](uint32_t) { guarded([this] { on_listener(); }); });
    loop_.add(timer_.get(), EPOLLIN, [this](uint32_t) { guarded([this] { on_timer(); }); });
    deliver_event();  // a reset requested before the driver was up (restore)
}

void VsockDevice::reset() noexcept {
    if (!active_) return;
    quiesce();
    drop_all_streams();
    for (auto& [fd, owned] : handshakes_) loop_.remove(fd);
    handshakes_.clear();
    rst_queue_.clear();
    held_rx_.reset();
    event_pending_ = false;
    reset_unacked_ = false;
    held_requests_.clear();
    const itimerspec off{};
    ::timerfd_settime(timer_.get(), 0, &off, nullptr);
    armed_deadline_ns_ = 0;
    active_ = nullptr;
}

void VsockDevice::queue_notify(uint16_t queue) {
    if (!live()) return;
    switch (queue) {
        case kRxQueue: pump_rx(); break;
        case kTxQueue: process_tx(); break;
        case kEventQueue:
            if (reset_unacked_ && active_->queues[kEventQueue].avail_idx(active_->memory) != reset_avail_idx_)
                release_held_requests(nullptr);
            deliver_event();
            break;
        default: break;
    }
}

void VsockDevice::send_transport_reset() {
    loop_.run_sync([this] {
        drop_all_streams();
        rst_queue_.clear();
        event_pending_ = true;
        guarded([this] { deliver_event(); });
    });
}

VsockState VsockDevice::save_state() const {
    VsockState state;
    loop_.run_sync([&] {
        state.guest_cid = guest_cid_.load();
        state.next_local_port = next_local_port_;
        state.transport_reset_pending = event_pending_;
    });
    return state;
}

void VsockDevice::load_state(const VsockState& state) {
    check_cid(state.guest_cid);
    loop_.run_sync([&] {
        guest_cid_ = state.guest_cid;
        next_local_port_ = std::max(state.next_local_port, kFirstLocalPort);
        event_pending_ = event_pending_ || state.transport_reset_pending;
    });
}

size_t VsockDevice::stream_count() {
    size_t count = 0;
    loop_.run_sync([&] { count = streams_.size(); });
    return count;
}

// --- host connections ------------------------------------------------------------

void VsockDevice::on_listener() {
    for (;;) {
        int error = 0;
        Fd fd = accept_unix(listener_.get(), error);
        if (!fd) {
            if (error == EINTR || error == ECONNABORTED) continue;
            if (error == EAGAIN || error == EWOULDBLOCK) return;
            // Out of fds (EMFILE, ENFILE) or memory: the pending connection stays, and a
            // level-triggered listener would fire at once again. Pause it until a
            // stream or handshake closes.
            log_guest(fmt::format("accept on {}: {}; listener paused", options_.uds_path, ::strerror(error)));
            loop_.modify(listener_.get(), 0);
            listener_paused_ = true;
            return;
        }
        if (streams_.size() + handshakes_.size() >= options_.max_streams) {
            log_guest(fmt::format("{} streams open: host connection refused", options_.max_streams));
            continue;  // closing it tells the host program
        }
        const int raw = fd.get();
        loop_.add(raw, kHandshakeEvents, [this, raw](uint32_t events) {
            guarded([this, raw, events] { on_handshake(raw, events); });
        });
        handshakes_.emplace(raw, std::move(fd));
    }
}

void VsockDevice::drop_handshake(int fd) {
    loop_.remove(fd);
    handshakes_.erase(fd);
    resume_listener();
}

void VsockDevice::resume_listener() {
    if (!listener_paused_) return;
    listener_paused_ = false;
    loop_.modify(listener_.get(), EPOLLIN);
}

void VsockDevice::on_handshake(int fd, uint32_t events) {
    // Peek, so that bytes after the line stay in the socket for the stream.
    char line[kMaxConnectLine];
    const ssize_t n = ::recv(fd, line, sizeof(line), MSG_PEEK | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
    if (n <= 0) return drop_handshake(fd);  // closed or failed before its line
    const auto* newline = static_cast<const char*>(std::memchr(line, '\n', static_cast<size_t>(n)));
    if (!newline) {
        if (static_cast<size_t>(n) == sizeof(line) || (events & (EPOLLRDHUP | EPOLLHUP))) drop_handshake(fd);
        return;  // the rest of the line comes with the next edge
    }
    const auto line_bytes = static_cast<size_t>(newline - line + 1);
    if (::recv(fd, line, line_bytes, MSG_DONTWAIT) != static_cast<ssize_t>(line_bytes)) return drop_handshake(fd);
    const auto port = parse_connect_line({line, line_bytes});
    if (!port) {
        log_guest("host connection sent no 'CONNECT <port>' line; closed");
        return drop_handshake(fd);
    }
    loop_.remove(fd);
    auto node = handshakes_.extract(fd);
    auto stream = std::make_unique<VsockStream>(std::move(node.mapped()), StreamKey{allocate_local_port(), *port},
                                                VsockStream::Origin::kHost, options_.stream_buf_alloc);
    VsockStream* s = add_stream(std::move(stream));
    set_deadline(s, options_.connect_timeout);
    schedule(s);  // held while the guest handles a transport reset
    pump_rx();
}

void VsockDevice::release_held_requests(const char* why) {
    if (why && !held_requests_.empty()) log_guest(fmt::format("{}: connecting the host's streams anyway", why));
    reset_unacked_ = false;
    reset_ack_deadline_ns_ = 0;
    std::vector<StreamKey> held;
    held.swap(held_requests_);
    for (const StreamKey& key : held)
        if (VsockStream* s = find(key)) schedule(s);  // a stream may have timed out meanwhile
    pump_rx();
}

uint32_t VsockDevice::allocate_local_port() {
    for (;;) {
        const uint32_t port = next_local_port_;
        next_local_port_ = next_local_port_ == UINT32_MAX ? kFirstLocalPort : next_local_port_ + 1;
        if (!local_port_use_.count(port)) return port;
    }
}

// --- streams ---------------------------------------------------------------------

VsockStream* VsockDevice::find(const StreamKey& key) {
    const auto it = streams_.find(key);
    return it == streams_.end() ? nullptr : it->second.get();
}

VsockStream* VsockDevice::add_stream(std::unique_ptr<VsockStream> stream) {
    VsockStream* s = stream.get();
    loop_.add(s->fd(), kStreamEvents, [this, s](uint32_t events) {
        guarded([this, s, events] { on_stream_event(s, events); });
    });
    ++local_port_use_[s->key().local_port];
    streams_.emplace(s->key(), std::move(stream));
    return s;
}

void VsockDevice::destroy_stream(VsockStream* stream) {
    loop_.remove(stream->fd());
    if (stream->rx_queued) std::erase(rx_ready_, stream);
    const StreamKey key = stream->key();
    if (--local_port_use_[key.local_port] == 0) local_port_use_.erase(key.local_port);
    streams_.erase(key);  // closes the host socket
    resume_listener();
}

void VsockDevice::reset_stream(VsockStream* stream) {
    const StreamKey key = stream->key();
    destroy_stream(stream);
    queue_rst(key);
}

void VsockDevice::queue_rst(const StreamKey& key) {
    if (rst_queue_.size() >= kMaxPendingRsts) {
        log_guest("too many RSTs waiting for rx buffers; one dropped");
        return;
    }
    rst_queue_.push_back(key);
}

void VsockDevice::drop_all_streams() {
    while (!streams_.empty()) destroy_stream(streams_.begin()->second.get());
}

void VsockDevice::schedule(VsockStream* stream) {
    if (stream->rx_queued) return;
    if (reset_unacked_ && !stream->request_sent()) {
        // A host connection's REQUEST waits until the guest finished the reset.
        if (std::find(held_requests_.begin(), held_requests_.end(), stream->key()) == held_requests_.end())
            held_requests_.push_back(stream->key());
        return;
    }
    stream->rx_queued = true;
    rx_ready_.push_back(stream);
}

void VsockDevice::after_change(VsockStream* stream) {
    if (stream->finished()) return reset_stream(stream);  // the RST that ends a clean close
    if (stream->shutdown_sent_both() && !stream->has_deadline) set_deadline(stream, options_.shutdown_timeout);
    if (stream->wants_rx()) schedule(stream);
}

void VsockDevice::on_stream_event(VsockStream* stream, uint32_t events) {
    stream->on_host_events(events);
    if (!stream->connecting() && stream->flush_to_host() != VsockStream::Fault::kNone) {
        reset_stream(stream);
    } else {
        after_change(stream);
    }
    pump_rx();
}

// --- deadlines -------------------------------------------------------------------

void VsockDevice::set_deadline(VsockStream* stream, std::chrono::milliseconds after) {
    stream->has_deadline = true;
    stream->deadline_ns = monotonic_ns() + std::chrono::nanoseconds(after).count();
    if (armed_deadline_ns_ == 0 || stream->deadline_ns < armed_deadline_ns_) {
        armed_deadline_ns_ = stream->deadline_ns;
        arm_timer();
    }
}

void VsockDevice::arm_timer() {
    itimerspec when{};
    if (armed_deadline_ns_ != 0) {
        when.it_value.tv_sec = armed_deadline_ns_ / 1'000'000'000;
        when.it_value.tv_nsec = armed_deadline_ns_ % 1'000'000'000;
    }
    if (::timerfd_settime(timer_.get(), TFD_TIMER_ABSTIME, &when, nullptr) != 0) throw_errno("timerfd_settime");
}

void VsockDevice::on_timer() {
    uint64_t expirations = 0;
    [[maybe_unused]] const ssize_t n = ::read(timer_.get(), &expirations, sizeof(expirations));
    const int64_t now = monotonic_ns();
    std::vector<VsockStream*> expired;
    int64_t next = 0;
    for (auto& [key, s] : streams_) {
        if (!s->has_deadline) continue;
        if (s->deadline_ns <= now) {
            expired.push_back(s.get());
        } else if (next == 0 || s->deadline_ns < next) {
            next = s->deadline_ns;
        }
    }
    for (VsockStream* s : expired) {
        log_guest(fmt::format("stream {}:{} {}; reset", s->key().local_port, s->key().peer_port,
                              s->connecting() ? "got no RESPONSE in time" : "got no RST after SHUTDOWN in time"));
        reset_stream(s);
    }
    if (reset_unacked_) {
        if (reset_ack_deadline_ns_ <= now)
            release_held_requests("the guest did not hand back the transport reset event in time");
        else if (next == 0 || reset_ack_deadline_ns_ < next)
            next = reset_ack_deadline_ns_;
    }
    armed_deadline_ns_ = next;
    arm_timer();
    pump_rx();
}

// --- tx: packets from the guest ----------------------------------------------------

void VsockDevice::process_tx() {
    Virtqueue& tx = active_->queues[kTxQueue];
    bool pushed = false;
    while (auto chain = pop_chain(tx)) {
        handle_tx_packet(*chain);
        tx.push_used(active_->memory, chain->head, 0);
        pushed = true;
    }
    if (pushed && tx.needs_interrupt(active_->memory)) active_->link.signal_used();
    pump_rx();
}

void VsockDevice::handle_tx_packet(const DescriptorChain& chain) {
    if (chain.readable_bytes < kHeaderSize)
        throw QueueError(fmt::format("vsock tx chain {} has {} readable bytes, less than a {}-byte header", chain.head,
                                     chain.readable_bytes, kHeaderSize));
    ChainReader reader(active_->memory, chain);
    const TxPacket packet = parse_tx_packet(reader, guest_cid_.load());
    const PacketHeader& h = packet.header;
    const StreamKey key{h.dst_port, h.src_port};
    if (packet.verdict == TxVerdict::kDrop) {
        log_guest(fmt::format("tx packet op {} from port {} dropped: {}", h.op, h.src_port, packet.reason));
        return;
    }
    VsockStream* s = find(key);
    if (packet.verdict == TxVerdict::kReset) {
        log_guest(fmt::format("tx packet op {} from port {} to {}: {}; RST", h.op, h.src_port, h.dst_port,
                              packet.reason));
        return s ? reset_stream(s) : queue_rst(key);
    }
    if (!s) {
        if (h.op == op::kRequest) return open_guest_stream(h);
        if (h.op != op::kRst) queue_rst(key);  // no such stream (§5.10.6.6)
        return;
    }
    s->update_peer_credit(h);
    if (s->connecting()) {
        if (h.op == op::kRst) return destroy_stream(s);  // refused: the host sees its socket close
        if (h.op != op::kResponse || !s->request_sent()) return reset_stream(s);
        if (s->on_guest_response() != VsockStream::Fault::kNone) return reset_stream(s);
        s->has_deadline = false;
        return after_change(s);
    }
    VsockStream::Fault fault = VsockStream::Fault::kNone;
    switch (h.op) {
        case op::kRw: fault = s->on_guest_data(reader, h.len); break;
        case op::kCreditUpdate: break;  // the credit came with the header
        case op::kCreditRequest: s->on_credit_request(); break;
        case op::kShutdown: s->on_guest_shutdown(h.flags); break;
        case op::kRst: return destroy_stream(s);
        default: return reset_stream(s);  // REQUEST or RESPONSE on a connected stream
    }
    if (fault != VsockStream::Fault::kNone) {
        log_guest(fmt::format("stream {}:{}: {}; RST", key.local_port, key.peer_port,
                              fault == VsockStream::Fault::kCreditOverrun       ? "guest exceeded its credit"
                              : fault == VsockStream::Fault::kDataAfterShutdown ? "data after SHUTDOWN SEND"
                                                                                : "host socket failed"));
        return reset_stream(s);
    }
    after_change(s);
}

void VsockDevice::open_guest_stream(const PacketHeader& request) {
    const StreamKey key{request.dst_port, request.src_port};
    if (streams_.size() + handshakes_.size() >= options_.max_streams) {
        log_guest(
            fmt::format("{} streams open: guest connect to port {} refused", options_.max_streams, key.local_port));
        return queue_rst(key);
    }
    int error = 0;
    Fd fd = connect_unix(fmt::format("{}_{}", options_.uds_path, key.local_port), error);
    if (!fd) return queue_rst(key);  // nobody listens there: connection refused
    auto stream =
        std::make_unique<VsockStream>(std::move(fd), key, VsockStream::Origin::kGuest, options_.stream_buf_alloc);
    stream->update_peer_credit(request);
    schedule(add_stream(std::move(stream)));
}

// --- rx: packets to the guest ------------------------------------------------------

std::optional<DescriptorChain> VsockDevice::pop_chain(Virtqueue& queue) {
    for (;;) {
        if (auto chain = queue.pop(active_->memory)) return chain;
        // Out of buffers: ask for a kick when the driver adds some (EVENT_IDX: avail_event).
        if (!queue.enable_notification(active_->memory, true)) return std::nullopt;
    }
}

void VsockDevice::pump_rx() {
    if (!live()) return;
    Virtqueue& rx = active_->queues[kRxQueue];
    bool pushed = false;
    while (!rst_queue_.empty() || !rx_ready_.empty()) {
        if (!held_rx_) held_rx_ = pop_chain(rx);
        if (!held_rx_) break;  // the rx kick resumes
        const DescriptorChain& chain = *held_rx_;
        if (chain.writable_bytes < kHeaderSize)
            throw QueueError(fmt::format("vsock rx chain {} has {} writable bytes, less than a {}-byte header",
                                         chain.head, chain.writable_bytes, kHeaderSize));
        uint32_t used = 0;
        if (!rst_queue_.empty()) {
            const StreamKey key = rst_queue_.front();
            rst_queue_.pop_front();
            const PacketHeader rst{kHostCid, guest_cid_.load(), key.local_port, key.peer_port, 0, kTypeStream,
                                   op::kRst, 0, 0, 0};
            ChainWriter(active_->memory, chain).write_obj(rst, "vsock rx RST");
            used = kHeaderSize;
        } else {
            used = fill_from_ready(chain);
            if (used == 0) {
                if (rst_queue_.empty()) break;  // nobody had anything after all: keep the buffer
                continue;
            }
        }
        rx.push_used(active_->memory, chain.head, used);
        held_rx_.reset();
        pushed = true;
    }
    if (pushed && rx.needs_interrupt(active_->memory)) active_->link.signal_used();
}

uint32_t VsockDevice::fill_from_ready(const DescriptorChain& chain) {
    // Each stream once at most, one packet each turn: round robin keeps 64 busy
    // streams fair.
    for (size_t turns = rx_ready_.size(); turns > 0 && !rx_ready_.empty(); --turns) {
        VsockStream* s = rx_ready_.front();
        rx_ready_.pop_front();
        s->rx_queued = false;
        uint32_t used = 0;
        const auto result = s->fill_rx(active_->memory, chain, guest_cid_.load(), used);
        if (result == VsockStream::RxResult::kHostError) {
            reset_stream(s);
            return 0;  // the RST goes into this buffer next
        }
        after_change(s);
        if (result == VsockStream::RxResult::kPacket) return used;
    }
    return 0;
}

void VsockDevice::deliver_event() {
    if (!event_pending_ || !live()) return;
    Virtqueue& events = active_->queues[kEventQueue];
    auto chain = pop_chain(events);
    if (!chain) return;  // the event kick resumes
    if (chain->writable_bytes < sizeof(VsockEvent))
        throw QueueError(fmt::format("vsock event chain {} has {} writable bytes, less than an event's {}",
                                     chain->head, chain->writable_bytes, sizeof(VsockEvent)));
    ChainWriter(active_->memory, *chain).write_obj(VsockEvent{kEventTransportReset}, "vsock event");
    events.push_used(active_->memory, chain->head, sizeof(VsockEvent));
    event_pending_ = false;
    // The driver re-posts the buffer and kicks once it has handled the event: ask
    // for that kick even with other event buffers still posted.
    reset_avail_idx_ = events.notify_on_next_avail(active_->memory);
    reset_unacked_ = true;
    reset_ack_deadline_ns_ = monotonic_ns() + std::chrono::nanoseconds(kResetAckTimeout).count();
    if (armed_deadline_ns_ == 0 || reset_ack_deadline_ns_ < armed_deadline_ns_) {
        armed_deadline_ns_ = reset_ack_deadline_ns_;
        arm_timer();
    }
    if (events.needs_interrupt(active_->memory)) active_->link.signal_used();
}

}  // namespace nanovm::virtio::vsock
