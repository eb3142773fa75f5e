// What a snapshot keeps of a virtio-vsock device (devices/virtio/vsock/vsock_device.hpp).
#pragma once

#include <cstdint>

namespace nanovm::virtio::vsock {

/// The first host-side port given to host-initiated streams; lower ports are left to
/// guest-initiated connections' well-known numbers.
inline constexpr uint32_t kFirstLocalPort = 1024;

/// The vsock device's saved state. Streams are not in it on purpose: their other
/// ends are host sockets of the VMM process that took the snapshot. A restored VMM
/// loads this, and once the transport is live calls send_transport_reset(), so the
/// guest drops every connection it had (virtio 1.2 §5.10.6.7) and reconnects. The
/// virtqueues' own state is the transport's (virtio::QueueState).
struct VsockState {
    uint64_t guest_cid = 0;                    ///< the guest's CID (config space, §5.10.4)
    uint32_t next_local_port = kFirstLocalPort;  ///< where host-side port allocation continues
    bool transport_reset_pending = false;      ///< a TRANSPORT_RESET event not yet delivered
};

}  // namespace nanovm::virtio::vsock
