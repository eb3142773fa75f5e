// The virtio-blk request parser on hand-built descriptor chains: one case per rule.
#include <catch2/catch.hpp>
#include <cstring>

#include "devices/virtio/blk/blk_request.hpp"

using namespace nanovm;
using namespace nanovm::virtio;
using namespace nanovm::virtio::blk;

namespace {

// Builds chains in simulated guest memory: each buffer is placed at the next free GPA.
struct ChainBuilder {
    GuestMemory& memory;
    uint64_t next = 0x1000;
    DescriptorChain chain;

    ChainBuilder& in(const std::vector<uint8_t>& bytes) {
        memory.write_bytes(Gpa(next), bytes);
        chain.readable.push_back({Gpa(next), static_cast<uint32_t>(bytes.size())});
        chain.readable_bytes += bytes.size();
        next += bytes.size() + 64;
        return *this;
    }
    ChainBuilder& out(uint32_t len) {
        chain.writable.push_back({Gpa(next), len});
        chain.writable_bytes += len;
        next += len + 64;
        return *this;
    }
};

std::vector<uint8_t> header(uint32_t type, uint64_t sector) {
    RequestHeader h{type, 0, sector};
    std::vector<uint8_t> out(sizeof(h));
    std::memcpy(out.data(), &h, sizeof(h));
    return out;
}

std::vector<uint8_t> segments(std::initializer_list<DiscardWriteZeroesSegment> list) {
    std::vector<uint8_t> out(list.size() * sizeof(DiscardWriteZeroesSegment));
    std::memcpy(out.data(), list.begin(), out.size());
    return out;
}

RequestLimits limits() {
    RequestLimits l;
    l.capacity_sectors = 1000;
    l.discard = l.write_zeroes = true;
    l.max_discard_sectors = l.max_write_zeroes_sectors = 100;
    l.max_discard_seg = l.max_write_zeroes_seg = 4;
    return l;
}

uint64_t iov_total(const BlockRequest& r) {
    uint64_t n = 0;
    for (const iovec& v : r.data) n += v.iov_len;
    return n;
}

}  // namespace

TEST_CASE("blk parser: a read of two segments gives their host iovecs and the last byte as status") {
    GuestMemory memory = GuestMemory::create(1 * MiB);
    ChainBuilder b{memory};
    b.in(header(request_type::kIn, 10)).out(512).out(1024).out(1);
    const BlockRequest r = parse_request(memory, b.chain, limits());
    CHECK(r.status == request_status::kOk);
    CHECK(r.offset == 10 * 512);
    CHECK(r.data_bytes == 1536);
    REQUIRE(r.data.size() == 2);
    CHECK(r.data[0].iov_base == memory.slice(b.chain.writable[0].addr, 1).data());
    CHECK(iov_total(r) == 1536);
    CHECK(r.status_byte == memory.slice(b.chain.writable[2].addr, 1).data());
    CHECK(used_length(r, request_status::kOk) == 1537);
    CHECK(used_length(r, request_status::kIoErr) == 1);
}

TEST_CASE("blk parser: the status byte may share a descriptor with the data") {
    GuestMemory memory = GuestMemory::create(1 * MiB);
    ChainBuilder b{memory};
    b.in(header(request_type::kIn, 0)).out(513);
    const BlockRequest r = parse_request(memory, b.chain, limits());
    CHECK(r.status == request_status::kOk);
    CHECK(r.data_bytes == 512);
    CHECK(r.status_byte == memory.slice(b.chain.writable[0].addr + 512, 1).data());
}

TEST_CASE("blk parser: a chain without a writable byte is a QueueError") {
    GuestMemory memory = GuestMemory::create(1 * MiB);
    ChainBuilder b{memory};
    b.in(header(request_type::kFlush, 0));
    CHECK_THROWS_AS(parse_request(memory, b.chain, limits()), QueueError);
}

TEST_CASE("blk parser: request-level faults are IOERR or UNSUPP") {
    GuestMemory memory = GuestMemory::create(1 * MiB);
    ChainBuilder b{memory};
    auto expect = [&](uint8_t status) {
        const BlockRequest r = parse_request(memory, b.chain, limits());
        CHECK(r.status == status);
        CHECK(r.error != nullptr);
        CHECK(r.data.empty());
    };
    SECTION("short header") {
        b.in({1, 2, 3}).out(1);
        expect(request_status::kIoErr);
    }
    SECTION("read beyond the capacity") {
        b.in(header(request_type::kIn, 999)).out(1024).out(1);
        expect(request_status::kIoErr);
    }
    SECTION("sector + count overflows") {
        b.in(header(request_type::kOut, ~0ull)).in(std::vector<uint8_t>(512)).out(1);
        expect(request_status::kIoErr);
    }
    SECTION("length not a multiple of 512") {
        b.in(header(request_type::kOut, 0)).in(std::vector<uint8_t>(513)).out(1);
        expect(request_status::kIoErr);
    }
    SECTION("write with writable data") {
        b.in(header(request_type::kOut, 0)).out(512).out(1);
        expect(request_status::kIoErr);
    }
    SECTION("write on a read-only disk") {
        b.in(header(request_type::kOut, 0)).in(std::vector<uint8_t>(512)).out(1);
        RequestLimits l = limits();
        l.read_only = true;
        CHECK(parse_request(memory, b.chain, l).status == request_status::kIoErr);
    }
    SECTION("unknown type") {
        b.in(header(77, 0)).out(1);
        expect(request_status::kUnsupp);
    }
    SECTION("discard: not a multiple of 16 bytes") {
        b.in(header(request_type::kDiscard, 0)).in(std::vector<uint8_t>(20)).out(1);
        expect(request_status::kIoErr);
    }
    SECTION("discard: empty") {
        b.in(header(request_type::kDiscard, 0)).out(1);
        expect(request_status::kIoErr);
    }
    SECTION("discard: too many segments") {
        b.in(header(request_type::kDiscard, 0))
            .in(segments({{0, 1, 0}, {1, 1, 0}, {2, 1, 0}, {3, 1, 0}, {4, 1, 0}}))
            .out(1);
        expect(request_status::kIoErr);
    }
    SECTION("discard: segment too long") {
        b.in(header(request_type::kDiscard, 0)).in(segments({{0, 101, 0}})).out(1);
        expect(request_status::kIoErr);
    }
    SECTION("discard: segment overflows") {
        b.in(header(request_type::kDiscard, 0)).in(segments({{~0ull - 2, 8, 0}})).out(1);
        expect(request_status::kIoErr);
    }
    SECTION("discard: unmap flag") {
        b.in(header(request_type::kDiscard, 0)).in(segments({{0, 8, kSegmentFlagUnmap}})).out(1);
        expect(request_status::kUnsupp);
    }
    SECTION("write zeroes: reserved flag") {
        b.in(header(request_type::kWriteZeroes, 0)).in(segments({{0, 8, 2}})).out(1);
        expect(request_status::kUnsupp);
    }
}

TEST_CASE("blk parser: segments become byte ranges; GET_ID takes at most 20 bytes") {
    GuestMemory memory = GuestMemory::create(1 * MiB);
    SECTION("write zeroes") {
        ChainBuilder b{memory};
        b.in(header(request_type::kWriteZeroes, 0)).in(segments({{8, 16, kSegmentFlagUnmap}, {100, 0, 0}})).out(1);
        const BlockRequest r = parse_request(memory, b.chain, limits());
        REQUIRE(r.status == request_status::kOk);
        REQUIRE(r.ranges.size() == 2);
        CHECK(r.ranges[0].offset == 8 * 512);
        CHECK(r.ranges[0].length == 16 * 512);
        CHECK(r.ranges[0].unmap);
        CHECK(r.ranges[1].length == 0);
        CHECK_FALSE(r.ranges[1].unmap);
    }
    SECTION("get id with a 64-byte buffer") {
        ChainBuilder b{memory};
        b.in(header(request_type::kGetId, 0)).out(64).out(1);
        const BlockRequest r = parse_request(memory, b.chain, limits());
        CHECK(r.status == request_status::kOk);
        CHECK(r.data_bytes == 20);
        CHECK(iov_total(r) == 20);
        CHECK(used_length(r, request_status::kOk) == 21);
    }
    SECTION("flush ignores the sector and any data") {
        ChainBuilder b{memory};
        b.in(header(request_type::kFlush, 12345)).out(1);
        const BlockRequest r = parse_request(memory, b.chain, limits());
        CHECK(r.status == request_status::kOk);
        CHECK(used_length(r, request_status::kOk) == 1);
    }
}

TEST_CASE("blk parser: with a 4096-byte block size, unaligned offsets, lengths and segments are IOERR",
          "[blk][layers]") {
    GuestMemory memory = GuestMemory::create(1 * MiB);
    RequestLimits l = limits();
    l.io_alignment = 4096;
    const auto status = [&](uint32_t type, uint64_t sector, uint32_t out_len, std::vector<uint8_t> in = {}) {
        ChainBuilder b{memory};
        b.in(header(type, sector));
        if (!in.empty()) b.in(in);
        if (out_len) b.out(out_len);
        b.out(1);
        return parse_request(memory, b.chain, l).status;
    };
    CHECK(status(request_type::kIn, 8, 4096) == request_status::kOk);
    CHECK(status(request_type::kIn, 8, 8192) == request_status::kOk);
    CHECK(status(request_type::kIn, 1, 4096) == request_status::kIoErr);  // offset 512
    CHECK(status(request_type::kIn, 8, 512) == request_status::kIoErr);   // length 512
    CHECK(status(request_type::kOut, 8, 0, std::vector<uint8_t>(4096)) == request_status::kOk);
    CHECK(status(request_type::kOut, 9, 0, std::vector<uint8_t>(4096)) == request_status::kIoErr);
    CHECK(status(request_type::kDiscard, 0, 0, segments({{8, 16, 0}})) == request_status::kOk);
    CHECK(status(request_type::kDiscard, 0, 0, segments({{8, 16, 0}, {4, 8, 0}})) == request_status::kIoErr);
    CHECK(status(request_type::kWriteZeroes, 0, 0, segments({{8, 12, 0}})) == request_status::kIoErr);
    CHECK(status(request_type::kFlush, 3, 0) == request_status::kOk);  // no sectors involved
}
