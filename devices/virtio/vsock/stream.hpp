// One vsock stream between a guest socket and a host Unix-socket connection: its
// connection state, both directions' credit (virtio 1.2 §5.10.6.3) and the guest's
// bytes that the host socket has not taken yet. The device (vsock_device.hpp) owns
// the streams, routes packets to them and hands them rx buffers; a stream never
// touches a virtqueue itself.
//
// Flow control. Host -> guest: the stream reads the host socket straight into the
// guest's rx buffer, never more than the guest's free credit
// (peer_buf_alloc - (tx_cnt - peer_fwd_cnt)), so nothing is buffered on that side;
// with no credit it stops reading (and asks once with CREDIT_REQUEST). Guest -> host:
// the stream advertises buf_alloc bytes; what the host socket does not take at once
// (EAGAIN) waits in a ByteQueue that the credit bounds to buf_alloc, and is written
// on EPOLLOUT; fwd_cnt counts bytes the host socket took, and a CREDIT_UPDATE goes out
// when the guest's view of our free space falls below a low-water mark.
#pragma once

#include <compare>
#include <cstdint>

#include "devices/virtio/chain_io.hpp"
#include "devices/virtio/queue.hpp"
#include "devices/virtio/vsock/byte_queue.hpp"
#include "devices/virtio/vsock/vsock_spec.hpp"
#include "vmm/fd.hpp"
#include "vmm/guest_memory.hpp"

namespace nanovm::virtio::vsock {

/// A stream's ports: `local_port` on the host (CID 2), `peer_port` on the guest.
struct StreamKey {
    uint32_t local_port = 0;
    uint32_t peer_port = 0;
    auto operator<=>(const StreamKey&) const = default;
};

/// One connected (or connecting) vsock stream. Single-threaded (the event loop).
class VsockStream {
public:
    /// Who asked for the connection.
    enum class Origin {
        kHost,   ///< a host program's CONNECT: REQUEST to send, then wait for RESPONSE
        kGuest,  ///< a guest REQUEST the host accepted: RESPONSE to send
    };
    /// What went wrong on a stream; anything but kNone means: RST it.
    enum class Fault {
        kNone,
        kCreditOverrun,      ///< the guest sent more than the credit we gave it
        kDataAfterShutdown,  ///< RW after the guest's own SHUTDOWN SEND
        kHostError,          ///< the host socket failed (EPIPE, ECONNRESET...)
    };
    /// What fill_rx put into the buffer.
    enum class RxResult {
        kPacket,     ///< one packet; `used_len` bytes written
        kNothing,    ///< nothing to send now; the buffer is untouched
        kHostError,  ///< reading the host socket failed: RST the stream
    };

    /// `host` is the connected nonblocking host socket, `buf_alloc` the receive
    /// buffer (bytes) this stream advertises to the guest. For Origin::kGuest, the
    /// guest's REQUEST header gives the peer's initial credit (update_peer_credit).
    VsockStream(Fd host, StreamKey key, Origin origin, uint32_t buf_alloc);

    const StreamKey& key() const noexcept { return key_; }
    int fd() const noexcept { return host_.get(); }
    /// Host-initiated and the guest has not answered the REQUEST yet.
    bool connecting() const noexcept { return connecting_; }
    /// The REQUEST (host-initiated) has been put into an rx buffer.
    bool request_sent() const noexcept { return !pending_request_; }

    // --- packets from the guest (tx queue) ---
    /// Takes the guest's buf_alloc and fwd_cnt from any packet of this stream.
    void update_peer_credit(const PacketHeader& header);
    /// The guest accepted our REQUEST: writes `OK <local_port>\n` to the host socket.
    Fault on_guest_response();
    /// An RW packet: `len` payload bytes in `payload`. Writes what the host socket
    /// takes now and queues the rest (bounded by buf_alloc).
    Fault on_guest_data(ChainReader& payload, uint32_t len);
    /// CREDIT_REQUEST: a CREDIT_UPDATE is to be sent.
    void on_credit_request() noexcept { credit_update_requested_ = true; }
    /// SHUTDOWN with `flags` (shutdown::kRcv / kSend, cumulative). SEND shuts the
    /// host socket's write side once the queued bytes are written.
    void on_guest_shutdown(uint32_t flags);

    // --- the host socket ---
    /// Epoll events (edge-triggered) on the host socket: marks it readable/writable.
    void on_host_events(uint32_t events) noexcept;
    /// Writes queued guest bytes while the host socket takes them.
    Fault flush_to_host();

    // --- packets to the guest (rx queue) ---
    /// Something is ready to go into an rx buffer (control packet, data with credit,
    /// SHUTDOWN).
    bool wants_rx() const noexcept;
    /// Puts the stream's next packet into `chain` (whose writable bytes are >=
    /// kHeaderSize), in this order: REQUEST/RESPONSE, data read from the host socket,
    /// CREDIT_UPDATE, CREDIT_REQUEST, SHUTDOWN. Throws QueueError if guest memory fails.
    RxResult fill_rx(GuestMemory& memory, const DescriptorChain& chain, uint64_t guest_cid, uint32_t& used_len);

    /// The guest shut both directions and all its bytes reached the host socket: the
    /// stream ends with an RST from us (§5.10.6.6).
    bool finished() const noexcept { return guest_shutdown_ == shutdown::kBoth && to_host_.empty(); }
    /// We told the guest SHUTDOWN in both directions: it should answer RST.
    bool shutdown_sent_both() const noexcept { return sent_shutdown_ == shutdown::kBoth; }
    /// Guest bytes waiting for the host socket.
    size_t queued_to_host() const noexcept { return to_host_.size(); }

    /// A header from the host side of this stream (src = CID 2/local port) carrying
    /// our credit; records the fwd_cnt the guest now knows.
    PacketHeader make_header(uint64_t guest_cid, uint16_t op, uint32_t flags = 0, uint32_t len = 0);

    // Device bookkeeping.
    bool rx_queued = false;  ///< in the device's rx round-robin
    bool has_deadline = false;
    int64_t deadline_ns = 0;  ///< CLOCK_MONOTONIC: connect or shutdown timeout

private:
    uint32_t peer_free() const noexcept;
    bool host_done() const noexcept;
    bool can_read_host() const noexcept;
    bool credit_update_wanted() const noexcept;
    bool credit_request_wanted() const noexcept;
    uint32_t shutdown_flags_wanted() const noexcept;

    Fd host_;
    StreamKey key_;
    uint32_t buf_alloc_;
    bool connecting_;
    bool pending_request_;
    bool pending_response_;

    // host -> guest
    uint32_t tx_cnt_ = 0;          // payload bytes put into rx buffers
    uint32_t peer_buf_alloc_ = 0;  // the guest's credit, from its last packet
    uint32_t peer_fwd_cnt_ = 0;
    bool credit_request_sent_ = false;
    bool host_readable_ = true;    // edge-triggered: until a read says EAGAIN
    bool host_eof_ = false;        // read returned 0: the host shut its write side
    bool host_hup_ = false;        // EPOLLHUP: the host closed (nothing more either way)
    uint32_t sent_shutdown_ = 0;   // SHUTDOWN flags told to the guest

    // guest -> host
    uint32_t rx_cnt_ = 0;          // payload bytes the guest sent
    uint32_t fwd_cnt_ = 0;         // of those, bytes the host socket took
    uint32_t advertised_fwd_cnt_ = 0;  // fwd_cnt in our last packet
    bool credit_update_requested_ = false;
    bool host_writable_ = true;    // edge-triggered: until a write says EAGAIN
    bool host_shut_wr_ = false;
    uint32_t guest_shutdown_ = 0;  // SHUTDOWN flags the guest sent
    ByteQueue to_host_;
};

}  // namespace nanovm::virtio::vsock
