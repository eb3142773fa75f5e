// virtio-net (virtio 1.2 §5.1) over a frame channel: one receiveq/transmitq pair whose
// frames go to and come from a host fd that carries one frame per read/write, each
// preceded by the 12-byte virtio_net_hdr. In production that fd is a tap
// (devices/virtio/net/tap.hpp); tests use one end of an AF_UNIX SOCK_SEQPACKET
// socketpair, which has the same one-message-per-call semantics.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "devices/virtio/device.hpp"
#include "devices/virtio/net/mac_address.hpp"
#include "devices/virtio/net/net_spec.hpp"
#include "vmm/fd.hpp"
#include "vmm/log.hpp"

namespace nanovm::virtio::net {

/// Everything a snapshot keeps of a virtio-net device besides its queues' QueueState:
/// the MAC the guest was given and the traffic counters. The link status is not in it:
/// it describes the host backend, which a restored VM gets anew. Plain data.
struct NetState {
    MacAddress mac;
    uint64_t rx_frames = 0;   ///< frames delivered to the guest
    uint64_t rx_bytes = 0;    ///< their bytes, headers excluded
    uint64_t rx_dropped = 0;  ///< frames read from the backend but not delivered (too big, bad header)
    uint64_t tx_frames = 0;   ///< frames the guest sent that the backend took
    uint64_t tx_bytes = 0;    ///< their bytes, headers excluded
    uint64_t tx_dropped = 0;  ///< transmit chains completed without sending (malformed, backend error)
};

/// How to build a NetDevice.
struct NetDeviceOptions {
    std::string label;              ///< for messages, usually the tap's name: "virtio-net <label>"
    std::optional<MacAddress> mac;  ///< the guest's MAC; default MacAddress::random_local()
};

/// A virtio-net device (device id 1) offering VIRTIO_NET_F_MAC and VIRTIO_NET_F_STATUS
/// and nothing else: no offloads (every header is zero both ways), no mergeable
/// receive buffers (each frame takes one receive chain, num_buffers = 1), one queue
/// pair, no control queue.
///
/// Transmit: each transmitq chain is header + frame in its readable buffers
/// (26..65562 bytes; the header must have flags 0 and GSO_NONE as nothing was
/// negotiated); the frame is written to the backend with one writev straight from
/// guest memory, behind a header the device writes (so the guest cannot change it
/// after the check). A malformed chain or a backend error drops the frame (counted,
/// logged at a limited rate); the chain is returned with used length 0. EAGAIN leaves
/// the chain in the ring (not consumed) and waits for EPOLLOUT; so does a turn that
/// used up kTxBudget chains (the fd is writable, so the loop comes back at once after
/// serving other fds).
///
/// Receive: when the backend is readable the device takes the next receiveq chain and
/// reads one frame straight into its writable buffers (plus an overflow area, so the
/// real length is known); used length = 12 + frame bytes. A frame that does not fit
/// the chain, or that carries checksum/GSO metadata the guest did not negotiate, is
/// dropped (counted, logged at a limited rate) and the chain reused. With no receive
/// chains the device stops watching the backend (frames wait in the tap's queue)
/// until the driver kicks the receiveq. Chains with fewer than 12 writable bytes are
/// returned unused (length 0).
///
/// If the backend fails (read error, EOF, EPOLLERR/EPOLLHUP: the tap was deleted)
/// the device stops using it, reports the link down (config-change interrupt) and
/// completes later transmit chains as dropped.
class NetDevice final : public VirtioDevice {
public:
    /// QueueNumMax of both queues.
    static constexpr uint16_t kQueueSize = 256;
    /// Frames received per wakeup before other event-loop work gets a turn.
    static constexpr uint32_t kRxBudget = 64;
    /// Transmit chains sent per turn before other event-loop work gets a turn.
    static constexpr uint32_t kTxBudget = 128;

    /// Takes ownership of `frame_fd` (nonblocking; a tap from open_tap, or a
    /// SOCK_SEQPACKET socket). Throws SysError if no MAC is given and getrandom fails.
    NetDevice(Fd frame_fd, NetDeviceOptions options);
    ~NetDevice() override;
    NetDevice(const NetDevice&) = delete;
    NetDevice& operator=(const NetDevice&) = delete;

    uint32_t device_id() const override;
    std::string name() const override { return name_; }
    /// VIRTIO_NET_F_MAC | VIRTIO_NET_F_STATUS.
    uint64_t device_features() const override;
    /// {kQueueSize, kQueueSize}: receiveq, transmitq.
    std::vector<uint16_t> queue_max_sizes() const override;
    /// struct virtio_net_config (§5.1.4): mac, status (LINK_UP unless the backend
    /// failed), max_virtqueue_pairs = 1; everything after reads zero. Any thread.
    void read_config(uint64_t offset, std::span<uint8_t> data) const override;
    /// Starts watching the backend fd on the event loop. Throws SysError.
    void activate(ActiveDevice& active) override;
    /// receiveq: new buffers, resume receiving if it was waiting for them.
    /// transmitq: send what is queued. Throws QueueError on a malformed ring.
    void queue_notify(uint16_t queue) override;
    /// Stops watching the backend; nothing is in flight (all I/O is synchronous).
    void reset() noexcept override;

    MacAddress mac() const { return mac_; }
    /// True until the backend fails. Any thread.
    bool link_up() const { return link_up_.load(); }
    /// A copy of the MAC and counters. Any thread.
    NetState save_state() const;
    /// Restores the MAC and counters. Only while the device is not active (before the
    /// guest drives it): the MAC is read by vCPU threads without a lock.
    void load_state(const NetState& state);

private:
    enum class RxResult { kDelivered, kDropped, kNone };
    enum class TxResult { kSent, kDropped, kBlocked };

    void on_backend_event(uint32_t events);
    void process_rx();
    void process_tx();
    std::optional<DescriptorChain> pop_receive_chain(bool& used);
    RxResult receive_frame(const DescriptorChain& chain, uint32_t& used_len);
    TxResult send_frame(const DescriptorChain& chain);
    void update_watch();
    void unwatch() noexcept;
    void stop_backend(const std::string& why);
    void broken(const QueueError& e);
    void log_drop(const std::string& what);

    Fd fd_;
    std::string name_;
    MacAddress mac_;
    std::atomic<bool> link_up_{true};

    // Event-loop thread only.
    ActiveDevice* active_ = nullptr;
    bool watching_ = false;       // fd_ is registered on active_->loop
    uint32_t watched_events_ = 0;
    bool rx_waiting_ = false;     // no receive chains: EPOLLIN off until a receiveq kick
    bool tx_blocked_ = false;     // EAGAIN or budget used up: EPOLLOUT on, transmitq parked
    bool backend_stopped_ = false;
    std::vector<uint8_t> rx_overflow_;  // kMaxPacketBytes: tail of every receive readv
    std::vector<uint8_t> tx_linear_;    // kMaxFrameBytes: for chains of too many buffers for writev

    std::atomic<uint64_t> rx_frames_{0}, rx_bytes_{0}, rx_dropped_{0};
    std::atomic<uint64_t> tx_frames_{0}, tx_bytes_{0}, tx_dropped_{0};
    RateLimiter log_limit_;
};

}  // namespace nanovm::virtio::net
