#include "devices/virtio/blk/blk_request.hpp"

#include <algorithm>
#include <limits>

#include "devices/virtio/chain_io.hpp"

namespace nanovm::virtio::blk {

namespace {

constexpr uint64_t kHeaderBytes = sizeof(RequestHeader);
// The used length is a le32 and counts the data plus the status byte.
constexpr uint64_t kMaxDataBytes = std::numeric_limits<uint32_t>::max() - 1;

BlockRequest& fail(BlockRequest& request, uint8_t status, const char* why) {
    request.status = status;
    request.error = why;
    request.data.clear();
    request.ranges.clear();
    return request;
}

// Are a byte offset and length (already inside the disk) multiples of `alignment`?
bool aligned(uint64_t offset, uint64_t length, uint64_t alignment) {
    return offset % alignment == 0 && length % alignment == 0;
}

// [sector, sector + sectors) inside [0, capacity)? Overflow-safe.
bool in_capacity(uint64_t sector, uint64_t sectors, uint64_t capacity) {
    return sector <= capacity && sectors <= capacity - sector;
}

void parse_segments(BlockRequest& request, ChainReader& reader, uint64_t data_bytes, const RequestLimits& limits) {
    const bool discard = request.type == request_type::kDiscard;
    const uint32_t max_seg = discard ? limits.max_discard_seg : limits.max_write_zeroes_seg;
    const uint32_t max_sectors = discard ? limits.max_discard_sectors : limits.max_write_zeroes_sectors;
    if (data_bytes == 0 || data_bytes % sizeof(DiscardWriteZeroesSegment) != 0) {
        fail(request, request_status::kIoErr, "segment list is not a non-zero multiple of 16 bytes");
        return;
    }
    const uint64_t count = data_bytes / sizeof(DiscardWriteZeroesSegment);
    if (count > max_seg) {
        fail(request, request_status::kIoErr, "more segments than max_discard_seg / max_write_zeroes_seg");
        return;
    }
    request.ranges.reserve(count);
    for (uint64_t i = 0; i < count; ++i) {
        const auto seg = reader.read_obj<DiscardWriteZeroesSegment>("virtio-blk segment");
        if (seg.flags & ~kSegmentFlagUnmap) {
            fail(request, request_status::kUnsupp, "segment has unknown flags");
            return;
        }
        if (discard && (seg.flags & kSegmentFlagUnmap)) {  // §5.2.6.2: unmap is for WRITE_ZEROES only
            fail(request, request_status::kUnsupp, "DISCARD segment has the unmap flag");
            return;
        }
        if (seg.num_sectors > max_sectors) {
            fail(request, request_status::kIoErr, "segment longer than max_discard_sectors / max_write_zeroes_sectors");
            return;
        }
        if (!in_capacity(seg.sector, seg.num_sectors, limits.capacity_sectors)) {
            fail(request, request_status::kIoErr, "segment beyond the capacity");
            return;
        }
        if (!aligned(seg.sector << kSectorShift, uint64_t{seg.num_sectors} << kSectorShift, limits.io_alignment)) {
            fail(request, request_status::kIoErr, "segment not aligned to the block size");
            return;
        }
        request.ranges.push_back({seg.sector << kSectorShift, uint64_t{seg.num_sectors} << kSectorShift,
                                  (seg.flags & kSegmentFlagUnmap) != 0});
    }
}

}  // namespace

BlockRequest parse_request(GuestMemory& memory, const DescriptorChain& chain, const RequestLimits& limits) {
    if (chain.writable.empty() || chain.writable_bytes == 0)
        throw QueueError("virtio-blk: request without a writable status byte");
    BlockRequest request;
    request.head = chain.head;
    const BufferSegment& last = chain.writable.back();
    request.status_byte = memory.slice(last.addr + (last.len - 1), 1).data();

    if (chain.readable_bytes < kHeaderBytes) return fail(request, request_status::kIoErr, "header shorter than 16 bytes");
    ChainReader reader(memory, chain);
    const auto header = reader.read_obj<RequestHeader>("virtio-blk header");
    request.type = header.type;
    // The data area: readable bytes after the header, writable bytes before the status.
    const uint64_t readable_data = chain.readable_bytes - kHeaderBytes;
    const uint64_t writable_data = chain.writable_bytes - 1;

    switch (header.type) {
        case request_type::kIn:
        case request_type::kOut: {
            const bool in = header.type == request_type::kIn;
            if (in ? readable_data != 0 : writable_data != 0)
                return fail(request, request_status::kIoErr, "data buffers in the wrong direction");
            const uint64_t bytes = in ? writable_data : readable_data;
            if (bytes % kSectorSize != 0)
                return fail(request, request_status::kIoErr, "data length is not a multiple of 512");
            if (bytes > kMaxDataBytes) return fail(request, request_status::kIoErr, "data longer than 4 GiB");
            if (!in_capacity(header.sector, bytes >> kSectorShift, limits.capacity_sectors))
                return fail(request, request_status::kIoErr, "sectors beyond the capacity");
            if (!aligned(header.sector << kSectorShift, bytes, limits.io_alignment))
                return fail(request, request_status::kIoErr, "offset or length not aligned to the block size");
            if (!in && limits.read_only) return fail(request, request_status::kIoErr, "write to a read-only disk");
            request.offset = header.sector << kSectorShift;
            request.data_bytes = bytes;
            if (in) {
                request.data = ChainWriter(memory, chain).peek_iovecs(bytes);
            } else {
                request.data = reader.peek_iovecs(bytes);
            }
            return request;
        }
        case request_type::kFlush:
            // §5.2.6.1: the driver SHOULD NOT include data; any it does is ignored.
            return request;
        case request_type::kGetId: {
            if (readable_data != 0) return fail(request, request_status::kIoErr, "data buffers in the wrong direction");
            request.data_bytes = std::min<uint64_t>(writable_data, kIdBytes);
            request.data = ChainWriter(memory, chain).peek_iovecs(request.data_bytes);
            return request;
        }
        case request_type::kDiscard:
        case request_type::kWriteZeroes: {
            const bool discard = header.type == request_type::kDiscard;
            if (discard ? !limits.discard : !limits.write_zeroes)
                return fail(request, request_status::kUnsupp, "DISCARD / WRITE_ZEROES not negotiated");
            if (writable_data != 0) return fail(request, request_status::kIoErr, "data buffers in the wrong direction");
            if (limits.read_only) return fail(request, request_status::kIoErr, "write to a read-only disk");
            parse_segments(request, reader, readable_data, limits);
            return request;
        }
        default:
            return fail(request, request_status::kUnsupp, "unknown request type");
    }
}

uint32_t used_length(const BlockRequest& request, uint8_t status) {
    const bool fills_data = request.type == request_type::kIn || request.type == request_type::kGetId;
    const uint64_t data = status == request_status::kOk && fills_data ? request.data_bytes : 0;
    return static_cast<uint32_t>(data + 1);
}

}  // namespace nanovm::virtio::blk
