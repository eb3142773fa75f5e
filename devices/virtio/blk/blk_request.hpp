// Parsing one virtio-blk request (virtio 1.2 §5.2.6) out of a validated descriptor
// chain. Pure: it reads the header and the segment list from guest memory but
// writes nothing and does no I/O, so it can be unit-tested and fuzzed on its own
// (fuzz/blk_request_fuzz.cpp). The device (block_device.hpp) executes the result.
//
// Chain layout, seen as one byte stream per direction (so descriptors may split or
// merge the parts freely, VIRTIO_F_ANY_LAYOUT being implied by VERSION_1):
//   readable:  16-byte header, then the data of OUT / DISCARD / WRITE_ZEROES
//   writable:  the data of IN / GET_ID, then the status byte = the LAST writable byte
#pragma once

#include <sys/uio.h>

#include <cstdint>
#include <vector>

#include "devices/virtio/blk/blk_spec.hpp"
#include "devices/virtio/queue.hpp"
#include "vmm/guest_memory.hpp"

namespace nanovm::virtio::blk {

/// What the parser checks requests against: the disk and the negotiated features.
struct RequestLimits {
    uint64_t capacity_sectors = 0;  ///< disk size in 512-byte sectors
    bool read_only = false;         ///< VIRTIO_BLK_F_RO offered: OUT/DISCARD/WRITE_ZEROES fail
    bool discard = false;           ///< VIRTIO_BLK_F_DISCARD negotiated (else DISCARD is UNSUPP)
    bool write_zeroes = false;      ///< VIRTIO_BLK_F_WRITE_ZEROES negotiated (else UNSUPP)
    uint32_t max_discard_sectors = 0;       ///< per segment
    uint32_t max_discard_seg = 0;           ///< segments per request
    uint32_t max_write_zeroes_sectors = 0;  ///< per segment
    uint32_t max_write_zeroes_seg = 0;      ///< segments per request
    /// Bytes every IN/OUT offset and length and every DISCARD / WRITE_ZEROES range
    /// must be a multiple of (a power of two >= 512): the advertised blk_size. Above
    /// 512 the disk is, or may become, layered (4 KiB copy-on-write blocks), so a
    /// request the guest's logical block size rules out is IOERR, not a partial block.
    uint64_t io_alignment = kSectorSize;
};

/// One byte range of a DISCARD or WRITE_ZEROES request, already checked against
/// the capacity. Bytes, not sectors.
struct ByteRange {
    uint64_t offset = 0;
    uint64_t length = 0;  ///< may be 0 (nothing to do)
    bool unmap = false;   ///< WRITE_ZEROES may deallocate (VIRTIO_BLK_WRITE_ZEROES_FLAG_UNMAP)
};

/// A parsed request. If `status` is not kOk the request is answered at once with
/// that status (and `error` says why); otherwise the device executes it.
struct BlockRequest {
    uint16_t head = 0;     ///< chain head, for push_used
    uint32_t type = 0;     ///< request_type::*
    uint8_t status = request_status::kOk;
    const char* error = nullptr;  ///< static text naming the broken rule when status != kOk
    /// IN/OUT: byte offset into the disk (sector * 512), within the capacity.
    uint64_t offset = 0;
    /// IN/OUT: bytes to transfer (a multiple of 512, offset + data_bytes <= capacity
    /// in bytes). GET_ID: bytes of the id to write (min(data area, 20)).
    uint64_t data_bytes = 0;
    /// IN/GET_ID: HVAs of the writable data area; OUT: HVAs of the readable data.
    /// Their lengths add up to data_bytes; every one lies inside guest RAM.
    std::vector<iovec> data;
    /// DISCARD/WRITE_ZEROES: the ranges, in request order.
    std::vector<ByteRange> ranges;
    /// HVA of the status byte: the last byte of the chain's writable buffers.
    uint8_t* status_byte = nullptr;
};

/// Parses the request in `chain` (virtio 1.2 §5.2.6). Request-level faults (short
/// header, data in the wrong direction, length not a multiple of 512, sectors
/// beyond the capacity, offsets or lengths not multiples of limits.io_alignment, too many or too long segments, a write to a read-only disk)
/// give status kIoErr; unknown types and flags give kUnsupp (§5.2.6.2). Throws
/// QueueError only when the chain has no writable byte, i.e. no status byte to
/// answer in. `memory` is non-const because the result points into writable guest
/// RAM; nothing is written.
BlockRequest parse_request(GuestMemory& memory, const DescriptorChain& chain, const RequestLimits& limits);

/// The used length to report for a completed request (§2.7.8): the data bytes the
/// device wrote into the chain (IN and GET_ID on success; 0 otherwise) + 1 for the
/// status byte.
uint32_t used_length(const BlockRequest& request, uint8_t status);

}  // namespace nanovm::virtio::blk
