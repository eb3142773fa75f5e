#include "devices/virtio/vsock/stream.hpp"

#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <array>
#include <cerrno>

#include "devices/virtio/vsock/host_protocol.hpp"

namespace nanovm::virtio::vsock {

namespace {

// sendmsg without SIGPIPE: a host program that closed its end gives EPIPE instead.
ssize_t send_iovecs(int fd, iovec* iov, size_t count) {
    msghdr message{};
    message.msg_iov = iov;
    message.msg_iovlen = count;
    ssize_t n;
    do {
        n = ::sendmsg(fd, &message, MSG_NOSIGNAL | MSG_DONTWAIT);
    } while (n < 0 && errno == EINTR);
    return n;
}

bool would_block(int err) { return err == EAGAIN || err == EWOULDBLOCK; }

}  // namespace

VsockStream::VsockStream(Fd host, StreamKey key, Origin origin, uint32_t buf_alloc)
    : host_(std::move(host)), key_(key), buf_alloc_(buf_alloc), connecting_(origin == Origin::kHost),
      pending_request_(origin == Origin::kHost), pending_response_(origin == Origin::kGuest) {}

void VsockStream::update_peer_credit(const PacketHeader& header) {
    const uint32_t before = peer_free();
    peer_buf_alloc_ = header.buf_alloc;
    peer_fwd_cnt_ = header.fwd_cnt;
    if (peer_free() > before) credit_request_sent_ = false;
}

uint32_t VsockStream::peer_free() const noexcept {
    // Bytes in flight to the guest, mod 2^32 (§5.10.6.3). A guest reporting more
    // consumed than sent gets nothing: it only hurts itself.
    const uint32_t in_flight = tx_cnt_ - peer_fwd_cnt_;
    return in_flight >= peer_buf_alloc_ ? 0 : peer_buf_alloc_ - in_flight;
}

VsockStream::Fault VsockStream::on_guest_response() {
    connecting_ = false;
    const std::string line = format_ok_line(key_.local_port);
    // A fresh connection's send buffer is empty: a short line always fits.
    const ssize_t n = ::send(host_.get(), line.data(), line.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    return n == static_cast<ssize_t>(line.size()) ? Fault::kNone : Fault::kHostError;
}

VsockStream::Fault VsockStream::on_guest_data(ChainReader& payload, uint32_t len) {
    if (guest_shutdown_ & shutdown::kSend) return Fault::kDataAfterShutdown;
    if (uint64_t{static_cast<uint32_t>(rx_cnt_ - fwd_cnt_)} + len > buf_alloc_) return Fault::kCreditOverrun;
    rx_cnt_ += len;
    if (to_host_.empty() && host_writable_ && len > 0) {
        std::vector<iovec> iov = payload.peek_iovecs(len);
        const ssize_t n = send_iovecs(host_.get(), iov.data(), iov.size());
        if (n < 0 && !would_block(errno)) return Fault::kHostError;
        if (n < 0) host_writable_ = false;
        if (n > 0) {
            payload.skip(static_cast<uint64_t>(n));
            fwd_cnt_ += static_cast<uint32_t>(n);
        }
    }
    // What the socket did not take waits, in order, behind what already waits.
    for (const iovec& piece : payload.peek_iovecs(payload.remaining()))
        to_host_.append({static_cast<const uint8_t*>(piece.iov_base), piece.iov_len});
    payload.skip(payload.remaining());
    return flush_to_host();
}

void VsockStream::on_guest_shutdown(uint32_t flags) {
    guest_shutdown_ |= flags & shutdown::kBoth;
    if (to_host_.empty() && (guest_shutdown_ & shutdown::kSend) && !host_shut_wr_) {
        ::shutdown(host_.get(), SHUT_WR);  // fails only if the host is gone: reading then says so
        host_shut_wr_ = true;
    }
}

void VsockStream::on_host_events(uint32_t events) noexcept {
    if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) host_readable_ = true;
    if (events & EPOLLHUP) host_hup_ = true;
    if (events & (EPOLLOUT | EPOLLHUP | EPOLLERR)) host_writable_ = true;
}

VsockStream::Fault VsockStream::flush_to_host() {
    std::array<iovec, 16> iov;
    while (!to_host_.empty() && host_writable_) {
        const size_t count = to_host_.front_iovecs(iov);
        const ssize_t n = send_iovecs(host_.get(), iov.data(), count);
        if (n < 0) {
            if (!would_block(errno)) return Fault::kHostError;
            host_writable_ = false;
            break;
        }
        to_host_.consume(static_cast<size_t>(n));
        fwd_cnt_ += static_cast<uint32_t>(n);
    }
    if (to_host_.empty() && (guest_shutdown_ & shutdown::kSend) && !host_shut_wr_) {
        ::shutdown(host_.get(), SHUT_WR);
        host_shut_wr_ = true;
    }
    return Fault::kNone;
}

bool VsockStream::host_done() const noexcept {
    // Nothing more will come from the host: it shut its write side and we read all,
    // or it closed while the guest refuses to receive (so we never read to EOF).
    return host_eof_ || (host_hup_ && (guest_shutdown_ & shutdown::kRcv));
}

bool VsockStream::can_read_host() const noexcept {
    return !connecting_ && !pending_response_ && host_readable_ && !host_done() &&
           !(guest_shutdown_ & shutdown::kRcv) && peer_free() > 0;
}

bool VsockStream::credit_update_wanted() const noexcept {
    if (connecting_) return false;
    if (credit_update_requested_) return true;
    // The guest's view of our free space: buf_alloc - (rx_cnt - the fwd_cnt it knows).
    const uint32_t guest_view_free = buf_alloc_ - static_cast<uint32_t>(rx_cnt_ - advertised_fwd_cnt_);
    const uint32_t low_water = std::min<uint32_t>(kMaxPacketPayload, buf_alloc_ / 2);
    return fwd_cnt_ != advertised_fwd_cnt_ && guest_view_free < low_water;
}

bool VsockStream::credit_request_wanted() const noexcept {
    return !connecting_ && !pending_response_ && !credit_request_sent_ && host_readable_ && !host_done() &&
           !(guest_shutdown_ & shutdown::kRcv) && peer_free() == 0;
}

uint32_t VsockStream::shutdown_flags_wanted() const noexcept {
    if (connecting_ || pending_response_ || !host_done()) return 0;
    const uint32_t flags = shutdown::kSend | (host_hup_ ? shutdown::kRcv : 0);
    return (flags & ~sent_shutdown_) != 0 ? flags : 0;
}

bool VsockStream::wants_rx() const noexcept {
    return pending_request_ || pending_response_ || can_read_host() || credit_update_wanted() ||
           credit_request_wanted() || shutdown_flags_wanted() != 0;
}

PacketHeader VsockStream::make_header(uint64_t guest_cid, uint16_t operation, uint32_t flags, uint32_t len) {
    advertised_fwd_cnt_ = fwd_cnt_;
    credit_update_requested_ = false;  // every packet carries our credit
    return PacketHeader{kHostCid,   guest_cid,  key_.local_port, key_.peer_port, len,
                        kTypeStream, operation, flags,           buf_alloc_,     fwd_cnt_};
}

VsockStream::RxResult VsockStream::fill_rx(GuestMemory& memory, const DescriptorChain& chain, uint64_t guest_cid,
                                           uint32_t& used_len) {
    const auto put = [&](const PacketHeader& header) {
        ChainWriter out(memory, chain);
        out.write_obj(header, "vsock rx packet header");
        used_len = kHeaderSize + header.len;
        return RxResult::kPacket;
    };
    if (pending_request_) {
        pending_request_ = false;
        return put(make_header(guest_cid, op::kRequest));
    }
    if (pending_response_) {
        pending_response_ = false;
        return put(make_header(guest_cid, op::kResponse));
    }
    if (can_read_host()) {
        const uint64_t room = std::min<uint64_t>(chain.writable_bytes - kHeaderSize, kMaxPacketPayload);
        const uint64_t want = std::min<uint64_t>(room, peer_free());
        ChainWriter payload(memory, chain);
        payload.advance(kHeaderSize);
        std::vector<iovec> iov = payload.peek_iovecs(want);
        ssize_t n = 0;
        if (want > 0) {
            do {
                n = ::readv(host_.get(), iov.data(), static_cast<int>(iov.size()));
            } while (n < 0 && errno == EINTR);
        }
        if (n > 0) {
            tx_cnt_ += static_cast<uint32_t>(n);
            return put(make_header(guest_cid, op::kRw, 0, static_cast<uint32_t>(n)));
        }
        if (n == 0 && want > 0) {
            host_eof_ = true;
            // The read may run before the loop delivers the close's EPOLLHUP: ask now,
            // so a closed host gives one SHUTDOWN with both flags.
            pollfd p{host_.get(), 0, 0};
            if (::poll(&p, 1, 0) == 1 && (p.revents & POLLHUP)) host_hup_ = true;
        }
        if (n < 0 && !would_block(errno)) return RxResult::kHostError;
        if (n < 0) host_readable_ = false;
    }
    if (credit_update_wanted()) return put(make_header(guest_cid, op::kCreditUpdate));
    if (credit_request_wanted()) {
        credit_request_sent_ = true;
        return put(make_header(guest_cid, op::kCreditRequest));
    }
    if (const uint32_t flags = shutdown_flags_wanted()) {
        sent_shutdown_ |= flags;
        return put(make_header(guest_cid, op::kShutdown, flags));
    }
    return RxResult::kNothing;
}

}  // namespace nanovm::virtio::vsock
