#include "devices/virtio/net/net_device.hpp"

#include <limits.h>
#include <sys/epoll.h>
#include <sys/uio.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "devices/virtio/chain_io.hpp"
#include "devices/virtio/virtio_spec.hpp"

namespace nanovm::virtio::net {

namespace {

constexpr uint32_t kHdrBytes = sizeof(VirtioNetHdr);
// readv/writev take at most IOV_MAX pieces; one is kept for the header or overflow.
constexpr size_t kMaxChainIovecs = IOV_MAX - 1;

uint64_t total_bytes(const std::vector<iovec>& iov) {
    uint64_t n = 0;
    for (const iovec& v : iov) n += v.iov_len;
    return n;
}

}  // namespace

NetDevice::NetDevice(Fd frame_fd, NetDeviceOptions options)
    : fd_(std::move(frame_fd)),
      name_(options.label.empty() ? "virtio-net" : "virtio-net " + options.label),
      mac_(options.mac ? *options.mac : MacAddress::random_local()),
      rx_overflow_(kMaxPacketBytes),
      tx_linear_(kMaxFrameBytes) {}

NetDevice::~NetDevice() = default;

uint32_t NetDevice::device_id() const { return device_id::kNet; }

uint64_t NetDevice::device_features() const { return feature::kMac | feature::kStatus; }

std::vector<uint16_t> NetDevice::queue_max_sizes() const { return {kQueueSize, kQueueSize}; }

void NetDevice::read_config(uint64_t offset, std::span<uint8_t> data) const {
    uint8_t space[config::kSize] = {};
    std::memcpy(space + config::kMac, mac_.bytes.data(), 6);
    const uint16_t status = link_up_.load() ? kStatusLinkUp : 0;
    std::memcpy(space + config::kStatus, &status, 2);
    const uint16_t pairs = 1;
    std::memcpy(space + config::kMaxVirtqueuePairs, &pairs, 2);
    for (size_t i = 0; i < data.size(); ++i)
        data[i] = offset + i < config::kSize ? space[offset + i] : uint8_t{0};
}

void NetDevice::activate(ActiveDevice& active) {
    active_ = &active;
    rx_waiting_ = false;
    tx_blocked_ = false;
    if (backend_stopped_) return;
    watched_events_ = EPOLLIN;
    active.loop.add(fd_.get(), watched_events_, [this](uint32_t events) { on_backend_event(events); });
    watching_ = true;
}

void NetDevice::reset() noexcept {
    unwatch();
    active_ = nullptr;
    rx_waiting_ = false;
    tx_blocked_ = false;
}

void NetDevice::unwatch() noexcept {
    if (!watching_) return;
    watching_ = false;
    try {
        active_->loop.remove(fd_.get());
    } catch (const std::exception& e) {
        log_line(fmt::format("{}: stop watching the backend: {}", name_, e.what()));
    }
}

void NetDevice::update_watch() {
    if (!watching_) return;
    const uint32_t events = (rx_waiting_ ? 0u : uint32_t{EPOLLIN}) | (tx_blocked_ ? uint32_t{EPOLLOUT} : 0u);
    if (events == watched_events_) return;
    active_->loop.modify(fd_.get(), events);
    watched_events_ = events;
}

void NetDevice::stop_backend(const std::string& why) {
    if (backend_stopped_) return;
    backend_stopped_ = true;
    unwatch();
    tx_blocked_ = false;  // no EPOLLOUT will come: the caller drains the transmitq (as drops)
    link_up_ = false;
    log_line(fmt::format("{}: {}; the link is down", name_, why));
    if (active_) active_->link.signal_config_change();
}

void NetDevice::broken(const QueueError& e) {
    unwatch();
    active_->link.fail(e.what());
}

void NetDevice::log_drop(const std::string& what) {
    uint64_t suppressed = 0;
    if (log_limit_.allow(suppressed))
        log_line(suppressed ? fmt::format("{}: {} ({} more drops not logged)", name_, what, suppressed)
                            : fmt::format("{}: {}", name_, what));
}

void NetDevice::on_backend_event(uint32_t events) {
    if (!active_ || active_->link.failed()) return;
    try {
        if (events & (EPOLLERR | EPOLLHUP)) {
            // Frames still readable come first; a tap that is gone reads as an error.
            if (events & EPOLLIN) process_rx();
            stop_backend(fmt::format("backend fd reported {}", (events & EPOLLERR) ? "an error" : "hang-up"));
            process_tx();  // complete what the guest queued, as drops
            return;
        }
        if ((events & EPOLLOUT) && tx_blocked_) {
            tx_blocked_ = false;
            update_watch();
            process_tx();
        }
        if (events & EPOLLIN) process_rx();
        if (backend_stopped_) process_tx();  // complete what the guest queued, as drops
    } catch (const QueueError& e) {
        broken(e);
    }
}

void NetDevice::queue_notify(uint16_t queue) {
    if (!active_) return;
    try {
        if (queue == kReceiveq) {
            Virtqueue& receiveq = active_->queues[kReceiveq];
            if (!rx_waiting_) {
                // EPOLLIN drives receiving; kicks are only needed when out of buffers.
                receiveq.enable_notification(active_->memory, false);
                return;
            }
            rx_waiting_ = false;
            update_watch();
            process_rx();
            if (backend_stopped_) process_tx();
        } else if (queue == kTransmitq) {
            process_tx();
        }
    } catch (const QueueError&) {
        unwatch();
        throw;  // the transport fails the device
    }
}

std::optional<DescriptorChain> NetDevice::pop_receive_chain(bool& used) {
    Virtqueue& receiveq = active_->queues[kReceiveq];
    for (;;) {
        std::optional<DescriptorChain> chain = receiveq.pop(active_->memory);
        if (!chain || chain->writable_bytes >= kHdrBytes) return chain;
        log_drop(fmt::format("receive chain {} has {} writable bytes, less than a virtio_net_hdr; returned unused",
                             chain->head, chain->writable_bytes));
        receiveq.push_used(active_->memory, chain->head, 0);
        used = true;
    }
}

void NetDevice::process_rx() {
    Virtqueue& receiveq = active_->queues[kReceiveq];
    bool used = false;
    for (uint32_t turn = 0; turn < kRxBudget && !backend_stopped_; ++turn) {
        std::optional<DescriptorChain> chain = pop_receive_chain(used);
        if (!chain) {
            if (receiveq.enable_notification(active_->memory, true)) continue;  // the driver just added some
            rx_waiting_ = true;
            update_watch();
            break;
        }
        uint32_t used_len = 0;
        const RxResult result = receive_frame(*chain, used_len);
        if (result == RxResult::kDelivered) {
            receiveq.push_used(active_->memory, chain->head, used_len);
            used = true;
            continue;
        }
        receiveq.undo_pop();  // the chain waits for the next frame
        if (result == RxResult::kNone) break;
    }
    if (used && receiveq.needs_interrupt(active_->memory)) active_->link.signal_used();
}

NetDevice::RxResult NetDevice::receive_frame(const DescriptorChain& chain, uint32_t& used_len) {
    ChainWriter writer(active_->memory, chain);
    std::vector<iovec> iov = writer.peek_iovecs(kMaxPacketBytes);
    if (iov.size() > kMaxChainIovecs) iov.resize(kMaxChainIovecs);
    const uint64_t capacity = total_bytes(iov);
    // Whatever does not fit the chain lands here, so the frame's real length is known.
    iov.push_back({rx_overflow_.data(), rx_overflow_.size()});

    ssize_t n;
    do {
        n = ::readv(fd_.get(), iov.data(), static_cast<int>(iov.size()));
    } while (n < 0 && errno == EINTR);
    if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK) return RxResult::kNone;
        stop_backend(fmt::format("reading a frame: {}", ::strerror(errno)));
        return RxResult::kNone;
    }
    if (n == 0) {
        stop_backend("the backend closed");
        return RxResult::kNone;
    }
    const auto bytes = static_cast<uint64_t>(n);
    if (bytes > capacity) {
        rx_dropped_.fetch_add(1, std::memory_order_relaxed);
        log_drop(fmt::format("received frame of {} bytes does not fit receive chain {} ({} bytes with the header); "
                             "dropped",
                             bytes - kHdrBytes, chain.head, capacity));
        return RxResult::kDropped;
    }
    if (bytes < kHdrBytes + kMinFrameBytes) {
        rx_dropped_.fetch_add(1, std::memory_order_relaxed);
        log_drop(fmt::format("received {} bytes, less than a header and an Ethernet header; dropped", bytes));
        return RxResult::kDropped;
    }
    // The header the backend wrote (it lies in guest memory now: read it back).
    VirtioNetHdr backend_hdr{};
    auto* out = reinterpret_cast<uint8_t*>(&backend_hdr);
    for (size_t i = 0, copied = 0; copied < kHdrBytes; ++i) {
        const size_t k = std::min<size_t>(iov[i].iov_len, kHdrBytes - copied);
        std::memcpy(out + copied, iov[i].iov_base, k);
        copied += k;
    }
    // No GUEST_CSUM/GUEST_TSO: a frame needing a checksum or segmentation cannot be
    // given to the guest (§5.1.6.4.1). With offloads off the tap never sends one.
    if (backend_hdr.gso_type != kGsoNone || (backend_hdr.flags & kHdrFlagNeedsCsum)) {
        rx_dropped_.fetch_add(1, std::memory_order_relaxed);
        log_drop(fmt::format("received frame with flags {:#x} gso_type {} that the guest did not negotiate; dropped",
                             backend_hdr.flags, backend_hdr.gso_type));
        return RxResult::kDropped;
    }
    // §5.1.6.4.1: flags 0 without GUEST_CSUM (DATA_VALID cleared), num_buffers 1
    // without MRG_RXBUF (the tap leaves those two bytes untouched).
    VirtioNetHdr hdr{};
    hdr.num_buffers = 1;
    writer.write_obj(hdr, "virtio_net_hdr");
    writer.advance(bytes - kHdrBytes);
    used_len = static_cast<uint32_t>(bytes);
    rx_frames_.fetch_add(1, std::memory_order_relaxed);
    rx_bytes_.fetch_add(bytes - kHdrBytes, std::memory_order_relaxed);
    return RxResult::kDelivered;
}

void NetDevice::process_tx() {
    if (tx_blocked_) return;  // EPOLLOUT resumes it
    Virtqueue& transmitq = active_->queues[kTransmitq];
    GuestMemory& memory = active_->memory;
    transmitq.enable_notification(memory, false);  // no kicks while the device is draining
    bool used = false;
    for (uint32_t turn = 0;; ++turn) {
        if (turn == kTxBudget && !backend_stopped_) {
            // Let other work on the loop run; EPOLLOUT (normally ready at once) resumes.
            tx_blocked_ = true;
            update_watch();
            break;
        }
        std::optional<DescriptorChain> chain = transmitq.pop(memory);
        if (!chain) {
            if (transmitq.enable_notification(memory, true)) continue;  // the driver just added some
            break;
        }
        const TxResult result = send_frame(*chain);
        if (result == TxResult::kBlocked) {
            transmitq.undo_pop();
            tx_blocked_ = true;
            update_watch();
            break;
        }
        transmitq.push_used(memory, chain->head, 0);
        used = true;
    }
    if (used && transmitq.needs_interrupt(memory)) active_->link.signal_used();
}

NetDevice::TxResult NetDevice::send_frame(const DescriptorChain& chain) {
    const auto drop = [&](const std::string& why) {
        tx_dropped_.fetch_add(1, std::memory_order_relaxed);
        log_drop(fmt::format("transmit chain {}: {}; dropped", chain.head, why));
        return TxResult::kDropped;
    };
    if (backend_stopped_) {
        tx_dropped_.fetch_add(1, std::memory_order_relaxed);
        return TxResult::kDropped;
    }
    if (chain.readable_bytes < kHdrBytes + kMinFrameBytes || chain.readable_bytes > kMaxPacketBytes)
        return drop(fmt::format("{} readable bytes, not a header and a frame of {} to {} bytes", chain.readable_bytes,
                                kMinFrameBytes, kMaxFrameBytes));
    ChainReader reader(active_->memory, chain);
    const auto guest_hdr = reader.read_obj<VirtioNetHdr>("virtio_net_hdr");
    // §5.1.6.2.1: NEEDS_CSUM needs VIRTIO_NET_F_CSUM, GSO needs HOST_TSO*/UFO (not
    // offered); DATA_VALID and RSC_INFO must not be set by the driver at all.
    if (guest_hdr.flags != 0 || guest_hdr.gso_type != kGsoNone)
        return drop(fmt::format("header flags {:#x} gso_type {} were not negotiated", guest_hdr.flags,
                                guest_hdr.gso_type));
    static const VirtioNetHdr kZeroHdr{};
    std::vector<iovec> iov{{const_cast<VirtioNetHdr*>(&kZeroHdr), kHdrBytes}};
    const uint64_t frame_bytes = reader.remaining();
    std::vector<iovec> frame = reader.peek_iovecs(frame_bytes);
    if (frame.size() > kMaxChainIovecs) {
        reader.read({tx_linear_.data(), frame_bytes});
        iov.push_back({tx_linear_.data(), frame_bytes});
    } else {
        iov.insert(iov.end(), frame.begin(), frame.end());
    }
    ssize_t n;
    do {
        n = ::writev(fd_.get(), iov.data(), static_cast<int>(iov.size()));
    } while (n < 0 && errno == EINTR);
    if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK) return TxResult::kBlocked;
        return drop(fmt::format("writing to the backend: {}", ::strerror(errno)));
    }
    tx_frames_.fetch_add(1, std::memory_order_relaxed);
    tx_bytes_.fetch_add(frame_bytes, std::memory_order_relaxed);
    return TxResult::kSent;
}

NetState NetDevice::save_state() const {
    NetState s;
    s.mac = mac_;
    s.rx_frames = rx_frames_.load(std::memory_order_relaxed);
    s.rx_bytes = rx_bytes_.load(std::memory_order_relaxed);
    s.rx_dropped = rx_dropped_.load(std::memory_order_relaxed);
    s.tx_frames = tx_frames_.load(std::memory_order_relaxed);
    s.tx_bytes = tx_bytes_.load(std::memory_order_relaxed);
    s.tx_dropped = tx_dropped_.load(std::memory_order_relaxed);
    return s;
}

void NetDevice::load_state(const NetState& state) {
    mac_ = state.mac;
    rx_frames_.store(state.rx_frames, std::memory_order_relaxed);
    rx_bytes_.store(state.rx_bytes, std::memory_order_relaxed);
    rx_dropped_.store(state.rx_dropped, std::memory_order_relaxed);
    tx_frames_.store(state.tx_frames, std::memory_order_relaxed);
    tx_bytes_.store(state.tx_bytes, std::memory_order_relaxed);
    tx_dropped_.store(state.tx_dropped, std::memory_order_relaxed);
}

}  // namespace nanovm::virtio::net
