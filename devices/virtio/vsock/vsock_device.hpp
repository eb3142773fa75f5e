// virtio-vsock (virtio 1.2 §5.10) with a Unix-socket host backend, Firecracker's
// convention (issue 3):
//  - Host -> guest: a host program connects to the VMM's socket path P and writes
//    `CONNECT <port>\n`; the device sends REQUEST to the guest's listener on <port>
//    from a fresh host port (>= 1024), answers `OK <hostport>\n` on RESPONSE (closes
//    the socket on RST), then relays bytes both ways.
//  - Guest -> host: a guest connect to CID 2 port X makes the device connect to the
//    Unix socket `P_X`; RST if that fails, else RESPONSE, then bytes both ways.
// Credit-based flow control per stream (stream.hpp), RST on every error, SHUTDOWN
// half-closes mapped to shutdown(SHUT_WR), at most `max_streams` streams, and
// send_transport_reset() for after a restore. All work runs on the event loop.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "devices/virtio/device.hpp"
#include "devices/virtio/vsock/stream.hpp"
#include "devices/virtio/vsock/vsock_spec.hpp"
#include "devices/virtio/vsock/vsock_state.hpp"
#include "vmm/event_loop.hpp"
#include "vmm/fd.hpp"
#include "vmm/log.hpp"

namespace nanovm::virtio::vsock {

/// How a vsock device is set up.
struct VsockOptions {
    /// The guest's CID, in [3, 0xfffffffe] (§5.10.4).
    uint64_t guest_cid = 3;
    /// Host socket path P: host programs connect here; guest connects to CID 2 port X
    /// reach `P_X`. At most 96 bytes, so that `P_<any port>` fits a sockaddr_un too.
    std::string uds_path;
    /// Streams at once, host connections still sending their CONNECT line included.
    uint32_t max_streams = 1024;
    /// Receive buffer each stream advertises (buf_alloc): the most guest bytes the
    /// VMM holds per stream while the host socket is slow. Bytes, >= 4096.
    uint32_t stream_buf_alloc = 256 * 1024;
    /// A host-initiated REQUEST the guest has not answered by then is reset. Long:
    /// a port without a listener is refused at once anyway (the guest answers RST),
    /// and a busy guest (several VMs on few CPUs, or emulation) can take over 5 s.
    std::chrono::milliseconds connect_timeout{30000};
    /// After we SHUTDOWN both directions, the guest has this long to answer RST (§5.10.6.6).
    std::chrono::milliseconds shutdown_timeout{2000};
};

/// The virtio socket device. Construct it, then put it on a transport:
///   VsockDevice vsock(loop, {.guest_cid = 3, .uds_path = "/run/vm/vsock.sock"});
///   MmioTransport transport(vsock, memory, loop);   // destroyed before `vsock`
/// Queue and socket work runs on `loop`'s thread; send_transport_reset(),
/// save_state(), load_state() and stream_count() may be called from any thread.
class VsockDevice : public VirtioDevice {
public:
    /// Binds the host listener at options.uds_path (removing a dead VMM's stale
    /// socket file; the listener is watched once the driver is up). Throws Error
    /// (bad CID, path too long or in use, buf_alloc < 4096) or SysError.
    VsockDevice(EventLoop& loop, VsockOptions options);
    /// Stops all work (if still active), closes every socket, unlinks the socket path.
    ~VsockDevice() override;
    VsockDevice(const VsockDevice&) = delete;
    VsockDevice& operator=(const VsockDevice&) = delete;

    uint32_t device_id() const override { return device_id::kVsock; }
    std::string name() const override;
    uint64_t device_features() const override { return kFeatureStream; }
    /// rx 256, tx 256, event 16 entries.
    std::vector<uint16_t> queue_max_sizes() const override { return {256, 256, 16}; }
    /// struct virtio_vsock_config: guest_cid (le64) at offset 0.
    void read_config(uint64_t offset, std::span<uint8_t> data) const override;
    void activate(ActiveDevice& active) override;
    /// rx kick: buffers for pending packets; tx kick: packets to handle; event kick:
    /// a buffer for a pending TRANSPORT_RESET. Throws QueueError on a malformed ring,
    /// a tx chain too short for a header, or an rx/event buffer too small.
    void queue_notify(uint16_t queue) override;
    /// Closes every stream and pending host connection and stops watching sockets;
    /// the listener stays bound.
    void reset() noexcept override;

    /// Drops every stream (their host sockets are closed; the guest is not sent RSTs)
    /// and queues a VIRTIO_VSOCK_EVENT_TRANSPORT_RESET event (§5.10.6.7), delivered as
    /// soon as the driver has an event buffer. The listener on the socket path stays.
    void send_transport_reset();

    /// The state a snapshot keeps (vsock_state.hpp).
    VsockState save_state() const;
    /// Takes a saved state: the CID and the port allocator; a pending reset event is
    /// kept pending. Throws Error for a CID outside [3, 0xfffffffe].
    void load_state(const VsockState& state);

    /// Live streams (connecting or connected). For tests and monitoring.
    size_t stream_count();
    const std::string& socket_path() const noexcept { return options_.uds_path; }

private:
    bool live() const noexcept { return active_ != nullptr && !active_->link.failed(); }
    template <typename F>
    void guarded(F&& work) noexcept;
    void quiesce() noexcept;
    void log_guest(const std::string& message);

    void on_listener();
    void on_handshake(int fd, uint32_t events);
    void drop_handshake(int fd);
    void resume_listener();
    void on_stream_event(VsockStream* stream, uint32_t events);
    void on_timer();

    void process_tx();
    void handle_tx_packet(const DescriptorChain& chain);
    void open_guest_stream(const PacketHeader& request);
    VsockStream* add_stream(std::unique_ptr<VsockStream> stream);
    VsockStream* find(const StreamKey& key);
    void after_change(VsockStream* stream);
    void schedule(VsockStream* stream);
    void destroy_stream(VsockStream* stream);
    void reset_stream(VsockStream* stream);
    void queue_rst(const StreamKey& key);
    void drop_all_streams();
    uint32_t allocate_local_port();
    void set_deadline(VsockStream* stream, std::chrono::milliseconds after);
    void arm_timer();

    void pump_rx();
    uint32_t fill_from_ready(const DescriptorChain& chain);
    std::optional<DescriptorChain> pop_chain(Virtqueue& queue);
    void deliver_event();
    void release_held_requests(const char* why);

    EventLoop& loop_;
    const VsockOptions options_;
    std::atomic<uint64_t> guest_cid_;
    Fd listener_;
    Fd timer_;  // timerfd, CLOCK_MONOTONIC: connect and shutdown deadlines

    // Loop thread only.
    ActiveDevice* active_ = nullptr;
    std::map<StreamKey, std::unique_ptr<VsockStream>> streams_;
    std::map<uint32_t, uint32_t> local_port_use_;  // local port -> live streams using it
    std::map<int, Fd> handshakes_;                 // host connections before their CONNECT line
    std::deque<VsockStream*> rx_ready_;            // round robin of streams with packets to send
    std::deque<StreamKey> rst_queue_;              // RSTs for streams that no longer exist
    std::optional<DescriptorChain> held_rx_;       // an rx buffer popped but not used yet
    uint32_t next_local_port_ = kFirstLocalPort;
    bool event_pending_ = false;
    // A transport reset the guest has been given but not finished handling: the
    // driver resets every connected socket while handling it (Linux:
    // virtio_vsock_event_handle), so a host connection it accepted in the meantime
    // would be reset too. Host REQUESTs wait (held_requests_) until the driver hands
    // the event buffer back (it re-posts it after the resets, so its avail idx moves
    // past reset_avail_idx_; a kick alone is no sign: the transport replays one per
    // queue after a restore), or until reset_ack_deadline_ns_.
    bool reset_unacked_ = false;
    uint16_t reset_avail_idx_ = 0;
    int64_t reset_ack_deadline_ns_ = 0;
    std::vector<StreamKey> held_requests_;
    bool listener_paused_ = false;  // accept failed (out of fds): resumes when one closes
    int64_t armed_deadline_ns_ = 0;  // 0: timer disarmed
    RateLimiter log_limit_;
};

}  // namespace nanovm::virtio::vsock
