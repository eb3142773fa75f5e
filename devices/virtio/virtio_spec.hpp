// Constants of the virtio 1.2 specification that the transport, the virtqueues and
// the devices share: device ids (§5), status bits (§2.1), feature bits (§6), split
// virtqueue layout (§2.7) and virtio-mmio registers (§4.2.2). Names follow the spec
// (and Linux's include/uapi/linux/virtio_*.h) so they can be looked up.
#pragma once

#include <cstdint>

namespace nanovm::virtio {

/// Device ids (virtio 1.2 §5).
namespace device_id {
inline constexpr uint32_t kNet = 1;
inline constexpr uint32_t kBlock = 2;
inline constexpr uint32_t kRng = 4;
inline constexpr uint32_t kVsock = 19;
}  // namespace device_id

/// Device status field bits (virtio 1.2 §2.1).
namespace status {
inline constexpr uint32_t kAcknowledge = 1;
inline constexpr uint32_t kDriver = 2;
inline constexpr uint32_t kDriverOk = 4;
inline constexpr uint32_t kFeaturesOk = 8;
inline constexpr uint32_t kDeviceNeedsReset = 64;
inline constexpr uint32_t kFailed = 128;
}  // namespace status

/// Reserved (transport-independent) feature bits (virtio 1.2 §6).
namespace feature {
inline constexpr uint64_t kRingIndirectDesc = 1ull << 28;  ///< VIRTIO_F_INDIRECT_DESC
inline constexpr uint64_t kRingEventIdx = 1ull << 29;      ///< VIRTIO_F_EVENT_IDX
inline constexpr uint64_t kVersion1 = 1ull << 32;          ///< VIRTIO_F_VERSION_1
inline constexpr uint64_t kAccessPlatform = 1ull << 33;    ///< VIRTIO_F_ACCESS_PLATFORM
inline constexpr uint64_t kRingPacked = 1ull << 34;        ///< VIRTIO_F_RING_PACKED
}  // namespace feature

/// Split virtqueue descriptor flags (virtio 1.2 §2.7.5).
namespace desc_flags {
inline constexpr uint16_t kNext = 1;
inline constexpr uint16_t kWrite = 2;
inline constexpr uint16_t kIndirect = 4;
}  // namespace desc_flags

/// virtq_avail.flags (§2.7.6) and virtq_used.flags (§2.7.8).
inline constexpr uint16_t kAvailFlagNoInterrupt = 1;
inline constexpr uint16_t kUsedFlagNoNotify = 1;

/// One split-virtqueue descriptor as it lies in guest memory (§2.7.5), little endian.
struct Descriptor {
    uint64_t addr;   ///< GPA of the buffer
    uint32_t len;    ///< bytes
    uint16_t flags;  ///< desc_flags
    uint16_t next;   ///< index of the next descriptor when flags & kNext
};
static_assert(sizeof(Descriptor) == 16);

/// One used-ring element (§2.7.8).
struct UsedElement {
    uint32_t id;   ///< head index of the chain
    uint32_t len;  ///< bytes the device wrote into the chain's writable buffers
};
static_assert(sizeof(UsedElement) == 8);

/// Maximum queue size (§2.7: at most 32768); nanovm's devices offer at most 1024.
inline constexpr uint16_t kMaxQueueSize = 1024;

/// virtio-mmio (version 2, "modern") register offsets (virtio 1.2 §4.2.2, table 4.1).
namespace mmio {
inline constexpr uint32_t kMagicValue = 0x000;  ///< R: 0x74726976 ("virt")
inline constexpr uint32_t kVersion = 0x004;     ///< R: 2
inline constexpr uint32_t kDeviceId = 0x008;
inline constexpr uint32_t kVendorId = 0x00c;
inline constexpr uint32_t kDeviceFeatures = 0x010;
inline constexpr uint32_t kDeviceFeaturesSel = 0x014;
inline constexpr uint32_t kDriverFeatures = 0x020;
inline constexpr uint32_t kDriverFeaturesSel = 0x024;
inline constexpr uint32_t kQueueSel = 0x030;
inline constexpr uint32_t kQueueNumMax = 0x034;
inline constexpr uint32_t kQueueNum = 0x038;
inline constexpr uint32_t kQueueReady = 0x044;
inline constexpr uint32_t kQueueNotify = 0x050;
inline constexpr uint32_t kInterruptStatus = 0x060;
inline constexpr uint32_t kInterruptAck = 0x064;
inline constexpr uint32_t kStatus = 0x070;
inline constexpr uint32_t kQueueDescLow = 0x080;
inline constexpr uint32_t kQueueDescHigh = 0x084;
inline constexpr uint32_t kQueueDriverLow = 0x090;   ///< avail ring
inline constexpr uint32_t kQueueDriverHigh = 0x094;
inline constexpr uint32_t kQueueDeviceLow = 0x0a0;   ///< used ring
inline constexpr uint32_t kQueueDeviceHigh = 0x0a4;
inline constexpr uint32_t kShmSel = 0x0ac;
inline constexpr uint32_t kShmLenLow = 0x0b0;
inline constexpr uint32_t kShmLenHigh = 0x0b4;
inline constexpr uint32_t kShmBaseLow = 0x0b8;
inline constexpr uint32_t kShmBaseHigh = 0x0bc;
inline constexpr uint32_t kQueueReset = 0x0c0;
inline constexpr uint32_t kConfigGeneration = 0x0fc;
inline constexpr uint32_t kConfig = 0x100;  ///< device-specific configuration space

inline constexpr uint32_t kMagic = 0x74726976;
inline constexpr uint32_t kVersionModern = 2;
inline constexpr uint32_t kVendor = 0x4d564e4e;  ///< "NNVM", little endian
/// InterruptStatus bits.
inline constexpr uint32_t kInterruptUsedRing = 1;
inline constexpr uint32_t kInterruptConfigChange = 2;
/// Bytes of MMIO space each device takes (registers + config space).
inline constexpr uint64_t kWindowSize = 0x1000;
}  // namespace mmio

}  // namespace nanovm::virtio
