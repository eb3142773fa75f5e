// Constants and wire structures of the virtio block device (virtio 1.2 §5.2), named as
// in the spec and Linux's include/uapi/linux/virtio_blk.h. All fields little endian
// (x86 hosts only, so they are used as is).
#pragma once

#include <cstddef>
#include <cstdint>

namespace nanovm::virtio::blk {

/// Bytes per sector: the unit of `sector`, `capacity` and every *_sectors field (§5.2.4).
inline constexpr uint64_t kSectorSize = 512;
inline constexpr unsigned kSectorShift = 9;

/// Device feature bits (§5.2.3).
namespace feature {
inline constexpr uint64_t kSizeMax = 1ull << 1;      ///< VIRTIO_BLK_F_SIZE_MAX
inline constexpr uint64_t kSegMax = 1ull << 2;       ///< VIRTIO_BLK_F_SEG_MAX
inline constexpr uint64_t kGeometry = 1ull << 4;     ///< VIRTIO_BLK_F_GEOMETRY
inline constexpr uint64_t kRo = 1ull << 5;           ///< VIRTIO_BLK_F_RO
inline constexpr uint64_t kBlkSize = 1ull << 6;      ///< VIRTIO_BLK_F_BLK_SIZE
inline constexpr uint64_t kFlush = 1ull << 9;        ///< VIRTIO_BLK_F_FLUSH
inline constexpr uint64_t kTopology = 1ull << 10;    ///< VIRTIO_BLK_F_TOPOLOGY
inline constexpr uint64_t kConfigWce = 1ull << 11;   ///< VIRTIO_BLK_F_CONFIG_WCE
inline constexpr uint64_t kMq = 1ull << 12;          ///< VIRTIO_BLK_F_MQ
inline constexpr uint64_t kDiscard = 1ull << 13;     ///< VIRTIO_BLK_F_DISCARD
inline constexpr uint64_t kWriteZeroes = 1ull << 14; ///< VIRTIO_BLK_F_WRITE_ZEROES
}  // namespace feature

/// Request types: virtio_blk_req.type (§5.2.6).
namespace request_type {
inline constexpr uint32_t kIn = 0;            ///< VIRTIO_BLK_T_IN: read sectors
inline constexpr uint32_t kOut = 1;           ///< VIRTIO_BLK_T_OUT: write sectors
inline constexpr uint32_t kFlush = 4;         ///< VIRTIO_BLK_T_FLUSH
inline constexpr uint32_t kGetId = 8;         ///< VIRTIO_BLK_T_GET_ID: 20-byte id string
inline constexpr uint32_t kGetLifetime = 10;  ///< VIRTIO_BLK_T_GET_LIFETIME (unsupported)
inline constexpr uint32_t kDiscard = 11;      ///< VIRTIO_BLK_T_DISCARD
inline constexpr uint32_t kWriteZeroes = 13;  ///< VIRTIO_BLK_T_WRITE_ZEROES
inline constexpr uint32_t kSecureErase = 14;  ///< VIRTIO_BLK_T_SECURE_ERASE (unsupported)
}  // namespace request_type

/// Request status byte values (§5.2.6).
namespace request_status {
inline constexpr uint8_t kOk = 0;      ///< VIRTIO_BLK_S_OK
inline constexpr uint8_t kIoErr = 1;   ///< VIRTIO_BLK_S_IOERR: device or driver error
inline constexpr uint8_t kUnsupp = 2;  ///< VIRTIO_BLK_S_UNSUPP: request type not supported
}  // namespace request_status

/// Length of the GET_ID string (VIRTIO_BLK_ID_BYTES): NUL-padded, no NUL if 20 long.
inline constexpr size_t kIdBytes = 20;

/// The request header every chain starts with (§5.2.6: type, reserved, sector).
struct RequestHeader {
    uint32_t type;
    uint32_t reserved;
    uint64_t sector;  ///< first 512-byte sector (IN/OUT); unused by the other types
};
static_assert(sizeof(RequestHeader) == 16);

/// One range of a DISCARD or WRITE_ZEROES request (struct virtio_blk_discard_write_zeroes).
struct DiscardWriteZeroesSegment {
    uint64_t sector;
    uint32_t num_sectors;
    uint32_t flags;  ///< bit 0: unmap (WRITE_ZEROES only); the rest reserved
};
static_assert(sizeof(DiscardWriteZeroesSegment) == 16);

/// DiscardWriteZeroesSegment.flags bits.
inline constexpr uint32_t kSegmentFlagUnmap = 1;  ///< VIRTIO_BLK_WRITE_ZEROES_FLAG_UNMAP

/// The device configuration space (struct virtio_blk_config, §5.2.4) up to the
/// secure-erase fields; the zoned fields that follow read as zero.
struct Config {
    uint64_t capacity;  ///< disk size in 512-byte sectors
    uint32_t size_max;  ///< largest segment, bytes (VIRTIO_BLK_F_SIZE_MAX)
    uint32_t seg_max;   ///< most data segments per request (VIRTIO_BLK_F_SEG_MAX)
    uint16_t geometry_cylinders;
    uint8_t geometry_heads;
    uint8_t geometry_sectors;
    uint32_t blk_size;  ///< logical block size, bytes (VIRTIO_BLK_F_BLK_SIZE)
    uint8_t topology_physical_block_exp;
    uint8_t topology_alignment_offset;
    uint16_t topology_min_io_size;
    uint32_t topology_opt_io_size;
    uint8_t writeback;
    uint8_t unused0;
    uint16_t num_queues;
    uint32_t max_discard_sectors;       ///< per segment
    uint32_t max_discard_seg;           ///< segments per DISCARD request
    uint32_t discard_sector_alignment;  ///< sectors
    uint32_t max_write_zeroes_sectors;  ///< per segment
    uint32_t max_write_zeroes_seg;      ///< segments per WRITE_ZEROES request
    uint8_t write_zeroes_may_unmap;
    uint8_t unused1[3];
    uint32_t max_secure_erase_sectors;  ///< VIRTIO_BLK_F_SECURE_ERASE (not offered: 0)
    uint32_t max_secure_erase_seg;
    uint32_t secure_erase_sector_alignment;
};
static_assert(sizeof(Config) == 72);
static_assert(offsetof(Config, blk_size) == 20);
static_assert(offsetof(Config, writeback) == 32);
static_assert(offsetof(Config, num_queues) == 34);
static_assert(offsetof(Config, max_discard_sectors) == 36);
static_assert(offsetof(Config, write_zeroes_may_unmap) == 56);

}  // namespace nanovm::virtio::blk
