// libFuzzer entry point for the virtio-blk request parser (devices/virtio/blk/
// blk_request.hpp), fed through the real split-virtqueue parser: the input becomes a
// descriptor table, one avail entry and the buffers in simulated guest memory; the
// chain Virtqueue::pop returns is parsed. Checks that every host pointer the parser
// hands out lies inside guest RAM and that the iovecs add up to the data length.
//
// Input layout: byte 0 = flags (bit 0 read-only, 1 DISCARD, 2 WRITE_ZEROES,
// 3 INDIRECT_DESC), byte 1 = head index, bytes 2..257 = a 16-entry descriptor table,
// the rest = guest bytes at GPA 0x4000 (buffers, indirect tables, headers).
// Build (what was checked by hand; the fuzz build owns the real flags):
//   clang++-14 -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -I. \
//     fuzz/blk_request_fuzz.cpp devices/virtio/blk/blk_request.cpp devices/virtio/queue.cpp \
//     devices/virtio/chain_io.cpp vmm/guest_memory.cpp vmm/error.cpp -lfmt
// Seeds: fuzz/blk_request_seeds.py DIR (well-formed chains of every request type).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "devices/virtio/blk/blk_request.hpp"

using namespace nanovm;
using namespace nanovm::virtio;

namespace {

constexpr uint64_t kRam = 256 * 1024;
constexpr uint64_t kDescTable = 0x1000;
constexpr uint64_t kAvailRing = 0x2000;
constexpr uint64_t kUsedRing = 0x3000;
constexpr uint64_t kBuffers = 0x4000;
constexpr uint16_t kQueueSize = 16;

bool inside(const GuestMemory& memory, const void* p, size_t len) {
    const auto* b = static_cast<const uint8_t*>(p);
    for (const MemoryRegion& r : memory.regions())
        if (b >= r.host && len <= r.size && static_cast<uint64_t>(b - r.host) <= r.size - len) return true;
    return false;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static GuestMemory memory = GuestMemory::create(kRam);
    if (size < 2 + kQueueSize * sizeof(Descriptor)) return 0;
    const uint8_t flags = data[0];
    const uint16_t head = data[1] % kQueueSize;
    std::memset(memory.slice(Gpa(0), kRam).data(), 0, kRam);
    memory.write_bytes(Gpa(kDescTable), {data + 2, kQueueSize * sizeof(Descriptor)});
    const size_t rest = size - 2 - kQueueSize * sizeof(Descriptor);
    memory.write_bytes(Gpa(kBuffers), {data + 2 + kQueueSize * sizeof(Descriptor), std::min<size_t>(rest, kRam - kBuffers)});
    memory.write(Gpa(kAvailRing + 4), head);
    memory.write(Gpa(kAvailRing + 2), uint16_t{1});

    Virtqueue queue(0, kQueueSize);
    QueueState& s = queue.state();
    s.size = kQueueSize;
    s.desc_table = kDescTable;
    s.avail_ring = kAvailRing;
    s.used_ring = kUsedRing;
    s.indirect = (flags & 8) != 0;
    s.ready = true;

    blk::RequestLimits limits;
    limits.capacity_sectors = 2048;
    limits.read_only = (flags & 1) != 0;
    limits.discard = (flags & 2) != 0;
    limits.write_zeroes = (flags & 4) != 0;
    limits.max_discard_sectors = limits.max_write_zeroes_sectors = 1u << 22;
    limits.max_discard_seg = limits.max_write_zeroes_seg = 32;
    try {
        const auto chain = queue.pop(memory);
        if (!chain) return 0;
        const blk::BlockRequest r = blk::parse_request(memory, *chain, limits);
        if (!inside(memory, r.status_byte, 1)) __builtin_trap();
        uint64_t total = 0;
        for (const iovec& v : r.data) {
            if (!inside(memory, v.iov_base, v.iov_len)) __builtin_trap();
            total += v.iov_len;
        }
        if (r.status == blk::request_status::kOk && total != r.data_bytes) __builtin_trap();
        if (r.status != blk::request_status::kOk && (!r.data.empty() || !r.ranges.empty())) __builtin_trap();
        for (const blk::ByteRange& range : r.ranges)
            if (range.offset + range.length > limits.capacity_sectors * blk::kSectorSize) __builtin_trap();
        if (blk::used_length(r, r.status) == 0) __builtin_trap();
    } catch (const QueueError&) {
        // A malformed chain: the device would be failed (NEEDS_RESET). Fine.
    }
    return 0;
}
