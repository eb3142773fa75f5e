// Constants and wire structures of the virtio socket device (virtio 1.2 §5.10),
// named as in the spec and Linux's include/uapi/linux/virtio_vsock.h. Everything on
// the wire is little endian; nanovm runs on x86-64 only, so the structs are used as is.
#pragma once

#include <cstdint>

namespace nanovm::virtio::vsock {

/// Virtqueue numbers (§5.10.2).
inline constexpr uint16_t kRxQueue = 0;     ///< device -> driver packets
inline constexpr uint16_t kTxQueue = 1;     ///< driver -> device packets
inline constexpr uint16_t kEventQueue = 2;  ///< device -> driver events

/// Feature bits (§5.10.3). Linux knows only SEQPACKET; without any bit negotiated
/// the device acts as if STREAM was (§5.10.3.1), which is all nanovm offers.
inline constexpr uint64_t kFeatureStream = 1ull << 0;     ///< VIRTIO_VSOCK_F_STREAM
inline constexpr uint64_t kFeatureSeqpacket = 1ull << 1;  ///< VIRTIO_VSOCK_F_SEQPACKET (not offered)

/// Well-known context ids (§5.10.4): the host is CID 2; guests get CIDs >= 3, and
/// 0xffffffff (VMADDR_CID_ANY) and the upper 32 bits are reserved.
inline constexpr uint64_t kHostCid = 2;
inline constexpr uint64_t kMinGuestCid = 3;
inline constexpr uint64_t kMaxGuestCid = 0xfffffffe;

/// Socket types (§5.10.6): header field `type`.
inline constexpr uint16_t kTypeStream = 1;
inline constexpr uint16_t kTypeSeqpacket = 2;

/// Operations (§5.10.6): header field `op`.
namespace op {
inline constexpr uint16_t kInvalid = 0;
inline constexpr uint16_t kRequest = 1;        ///< connect
inline constexpr uint16_t kResponse = 2;       ///< connect accepted
inline constexpr uint16_t kRst = 3;            ///< connection refused or torn down
inline constexpr uint16_t kShutdown = 4;       ///< flags: shutdown::kRcv | kSend
inline constexpr uint16_t kRw = 5;             ///< payload of `len` bytes
inline constexpr uint16_t kCreditUpdate = 6;   ///< carries buf_alloc / fwd_cnt
inline constexpr uint16_t kCreditRequest = 7;  ///< asks the peer for a CREDIT_UPDATE
}  // namespace op

/// SHUTDOWN flags (§5.10.6.5).
namespace shutdown {
inline constexpr uint32_t kRcv = 1;   ///< the sender will receive no more data
inline constexpr uint32_t kSend = 2;  ///< the sender will send no more data
inline constexpr uint32_t kBoth = kRcv | kSend;
}  // namespace shutdown

/// Event ids (§5.10.6.7).
inline constexpr uint32_t kEventTransportReset = 0;  ///< VIRTIO_VSOCK_EVENT_TRANSPORT_RESET

/// The header in front of every packet on the rx and tx queues (§5.10.6,
/// struct virtio_vsock_hdr): 44 bytes, packed, little endian. `len` payload bytes
/// follow it. Every packet carries the sender's credit (§5.10.6.3): buf_alloc =
/// bytes of receive buffer, fwd_cnt = bytes the sender has consumed so far (mod 2^32).
struct __attribute__((packed)) PacketHeader {
    uint64_t src_cid;
    uint64_t dst_cid;
    uint32_t src_port;
    uint32_t dst_port;
    uint32_t len;        ///< payload bytes after the header
    uint16_t type;       ///< kTypeStream
    uint16_t op;         ///< op::*
    uint32_t flags;      ///< shutdown::* for SHUTDOWN, else 0
    uint32_t buf_alloc;  ///< sender's receive buffer, bytes
    uint32_t fwd_cnt;    ///< bytes the sender has consumed (free-running)
};
static_assert(sizeof(PacketHeader) == 44);

/// Bytes of a packet header.
inline constexpr uint32_t kHeaderSize = sizeof(PacketHeader);

/// The largest payload nanovm accepts in, and puts into, one packet: Linux's
/// VIRTIO_VSOCK_MAX_PKT_BUF_SIZE (64 KiB).
inline constexpr uint32_t kMaxPacketPayload = 64 * 1024;

/// struct virtio_vsock_event (§5.10.6.7): 4 bytes.
struct VsockEvent {
    uint32_t id;
};
static_assert(sizeof(VsockEvent) == 4);

/// Device configuration space (§5.10.4): the guest's CID.
struct VsockConfig {
    uint64_t guest_cid;
};
static_assert(sizeof(VsockConfig) == 8);

}  // namespace nanovm::virtio::vsock
