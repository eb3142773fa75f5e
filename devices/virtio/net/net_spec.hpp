// Constants and layouts of the virtio network device (virtio 1.2 §5.1) that nanovm's
// virtio-net uses. Names follow the spec and Linux's include/uapi/linux/virtio_net.h.
#pragma once

#include <cstdint>

namespace nanovm::virtio::net {

/// Feature bits (§5.1.3). nanovm offers MAC and STATUS only: no checksum or
/// segmentation offloads, no mergeable receive buffers, one queue pair.
namespace feature {
inline constexpr uint64_t kCsum = 1ull << 0;        ///< VIRTIO_NET_F_CSUM (not offered)
inline constexpr uint64_t kGuestCsum = 1ull << 1;   ///< VIRTIO_NET_F_GUEST_CSUM (not offered)
inline constexpr uint64_t kMtu = 1ull << 3;         ///< VIRTIO_NET_F_MTU (not offered)
inline constexpr uint64_t kMac = 1ull << 5;         ///< VIRTIO_NET_F_MAC
inline constexpr uint64_t kMrgRxbuf = 1ull << 15;   ///< VIRTIO_NET_F_MRG_RXBUF (not offered)
inline constexpr uint64_t kStatus = 1ull << 16;     ///< VIRTIO_NET_F_STATUS
inline constexpr uint64_t kCtrlVq = 1ull << 17;     ///< VIRTIO_NET_F_CTRL_VQ (not offered)
inline constexpr uint64_t kMq = 1ull << 22;         ///< VIRTIO_NET_F_MQ (not offered)
}  // namespace feature

/// virtio_net_config.status bits (§5.1.4).
inline constexpr uint16_t kStatusLinkUp = 1;  ///< VIRTIO_NET_S_LINK_UP

/// Byte offsets in the device configuration space (§5.1.4, struct virtio_net_config).
namespace config {
inline constexpr uint64_t kMac = 0;                 ///< u8 mac[6]
inline constexpr uint64_t kStatus = 6;              ///< le16 status
inline constexpr uint64_t kMaxVirtqueuePairs = 8;   ///< le16 max_virtqueue_pairs
inline constexpr uint64_t kSize = 10;               ///< bytes nanovm defines; the rest reads 0
}  // namespace config

/// virtio_net_hdr.flags (§5.1.6).
inline constexpr uint8_t kHdrFlagNeedsCsum = 1;  ///< VIRTIO_NET_HDR_F_NEEDS_CSUM
inline constexpr uint8_t kHdrFlagDataValid = 2;  ///< VIRTIO_NET_HDR_F_DATA_VALID
/// virtio_net_hdr.gso_type (§5.1.6).
inline constexpr uint8_t kGsoNone = 0;  ///< VIRTIO_NET_HDR_GSO_NONE

/// The header in front of every frame on both queues (§5.1.6: struct virtio_net_hdr
/// with num_buffers, 12 bytes once VIRTIO_F_VERSION_1 is negotiated). Little endian.
struct VirtioNetHdr {
    uint8_t flags;
    uint8_t gso_type;
    uint16_t hdr_len;
    uint16_t gso_size;
    uint16_t csum_start;
    uint16_t csum_offset;
    uint16_t num_buffers;  ///< receiveq: chains this frame uses (1 without MRG_RXBUF)
};
static_assert(sizeof(VirtioNetHdr) == 12);

/// Queue indices with one queue pair (§5.1.2).
inline constexpr uint16_t kReceiveq = 0;
inline constexpr uint16_t kTransmitq = 1;

/// Largest Ethernet frame (without the header) either queue carries: 64 KiB - 1 of
/// IP payload + the Ethernet header and a VLAN tag, the "65550" of §5.1.6.3.1.
inline constexpr uint32_t kMaxFrameBytes = 65550;
/// Largest header + frame: 65562 bytes.
inline constexpr uint32_t kMaxPacketBytes = sizeof(VirtioNetHdr) + kMaxFrameBytes;
/// Smallest frame: an Ethernet header (the tap refuses anything shorter).
inline constexpr uint32_t kMinFrameBytes = 14;

}  // namespace nanovm::virtio::net
