// ChainReader and ChainWriter (devices/virtio/chain_io.hpp): a chain's buffers read
// and written as one byte stream, whatever the segment boundaries; short reads and
// writes at the end; the *_exact calls refuse without consuming; host iovecs for
// direct I/O that does not consume until advance().
#include <catch2/catch.hpp>

#include <cstring>
#include <numeric>
#include <vector>

#include "devices/virtio/chain_io.hpp"

using namespace nanovm;
using namespace nanovm::virtio;
using Catch::Contains;

namespace {

/// A chain whose readable and writable buffers are segments of the given lengths,
/// spread through guest RAM with gaps between them.
struct ChainBench {
    ChainBench(const std::vector<uint32_t>& readable_lens, const std::vector<uint32_t>& writable_lens) {
        uint64_t gpa = 0x1000;
        for (const uint32_t len : readable_lens) {
            chain.readable.push_back({Gpa(gpa), len});
            chain.readable_bytes += len;
            gpa += len + 0x100;
        }
        for (const uint32_t len : writable_lens) {
            chain.writable.push_back({Gpa(gpa), len});
            chain.writable_bytes += len;
            gpa += len + 0x100;
        }
    }

    /// Fills the readable buffers with the stream 0, 1, 2, ... (mod 256).
    void fill_readable() {
        uint8_t next = 0;
        for (const BufferSegment& s : chain.readable)
            for (uint32_t i = 0; i < s.len; ++i) memory.write(s.addr + i, next++);
    }
    /// The writable buffers' bytes, concatenated.
    std::vector<uint8_t> writable_stream() const {
        std::vector<uint8_t> out;
        for (const BufferSegment& s : chain.writable) {
            const auto bytes = memory.slice(s.addr, s.len);
            out.insert(out.end(), bytes.begin(), bytes.end());
        }
        return out;
    }

    GuestMemory memory = GuestMemory::create(1 * MiB);
    DescriptorChain chain;
};

std::vector<uint8_t> iota_bytes(size_t n, uint8_t first = 0) {
    std::vector<uint8_t> v(n);
    std::iota(v.begin(), v.end(), first);
    return v;
}

}  // namespace

TEST_CASE("ChainReader reads many segments as one stream, in pieces of any size", "[virtio][chain_io]") {
    ChainBench b({3, 1, 7, 1, 1, 20}, {});
    b.fill_readable();
    ChainReader in(b.memory, b.chain);
    CHECK(in.remaining() == 33);
    std::vector<uint8_t> got;
    const size_t piece = GENERATE(1, 2, 5, 8, 33);
    for (;;) {
        std::vector<uint8_t> buf(piece);
        const size_t n = in.read(buf);
        if (n == 0) break;
        got.insert(got.end(), buf.begin(), buf.begin() + static_cast<ptrdiff_t>(n));
    }
    CHECK(got == iota_bytes(33));
    CHECK(in.remaining() == 0);
}

TEST_CASE("ChainReader::read returns fewer bytes at the end of the chain, then 0", "[virtio][chain_io]") {
    ChainBench b({4, 5}, {16});
    b.fill_readable();
    ChainReader in(b.memory, b.chain);
    std::vector<uint8_t> buf(100, 0xee);
    CHECK(in.read(buf) == 9);
    CHECK(std::vector<uint8_t>(buf.begin(), buf.begin() + 9) == iota_bytes(9));
    CHECK(buf[9] == 0xee);  // nothing written past what was read
    CHECK(in.read(buf) == 0);
    CHECK(in.remaining() == 0);
}

TEST_CASE("ChainReader::read_exact and read_obj refuse short chains without consuming", "[virtio][chain_io]") {
    ChainBench b({2, 2, 3}, {});
    b.fill_readable();
    ChainReader in(b.memory, b.chain);
    // A header across the first segment boundary.
    CHECK(in.read_obj<uint16_t>("type") == 0x0100);
    CHECK(in.read_obj<uint32_t>("sector") == 0x05040302);
    std::vector<uint8_t> two(2);
    CHECK_THROWS_WITH(in.read_exact(two, "virtio-blk header"),
                      "virtio-blk header: needs 2 bytes, the chain's readable buffers hold 1");
    CHECK_THROWS_AS(in.read_obj<uint64_t>("id"), QueueError);
    CHECK(in.remaining() == 1);
    CHECK(in.read_obj<uint8_t>("last") == 6);
}

TEST_CASE("ChainReader::skip crosses segments and stops at the end", "[virtio][chain_io]") {
    ChainBench b({3, 4, 5}, {});
    b.fill_readable();
    ChainReader in(b.memory, b.chain);
    CHECK(in.skip(5) == 5);
    CHECK(in.read_obj<uint8_t>("byte") == 5);
    CHECK(in.skip(0) == 0);
    CHECK(in.skip(100) == 6);
    CHECK(in.remaining() == 0);
    CHECK(in.skip(1) == 0);
}

TEST_CASE("ChainReader::peek_iovecs maps the next bytes without consuming them", "[virtio][chain_io]") {
    ChainBench b({3, 4, 5}, {});
    b.fill_readable();
    ChainReader in(b.memory, b.chain);
    in.skip(2);
    const std::vector<iovec> iov = in.peek_iovecs(6);
    REQUIRE(iov.size() == 3);
    CHECK(iov[0].iov_base == b.memory.slice(b.chain.readable[0].addr + 2, 1).data());
    CHECK(iov[0].iov_len == 1);
    CHECK(iov[1].iov_base == b.memory.slice(b.chain.readable[1].addr, 4).data());
    CHECK(iov[1].iov_len == 4);
    CHECK(iov[2].iov_len == 1);
    CHECK(in.remaining() == 10);
    CHECK(in.read_obj<uint8_t>("byte") == 2);  // still where it was
    CHECK(in.peek_iovecs(1000).size() == 2);  // the rest: segments 1 and 2, capped at the end
    CHECK(in.peek_iovecs(0).empty());
}

TEST_CASE("ChainWriter writes many segments as one stream and counts what it wrote", "[virtio][chain_io]") {
    ChainBench b({8}, {1, 6, 2, 9});
    ChainWriter out(b.memory, b.chain);
    CHECK(out.remaining() == 18);
    const std::vector<uint8_t> data = iota_bytes(18, 1);
    const size_t piece = GENERATE(1, 4, 7, 18);
    for (size_t at = 0; at < data.size(); at += piece)
        CHECK(out.write(std::span(data).subspan(at, std::min(piece, data.size() - at))) > 0);
    CHECK(out.written() == 18);
    CHECK(out.remaining() == 0);
    CHECK(b.writable_stream() == data);
}

TEST_CASE("ChainWriter::write stops at the end of the writable buffers", "[virtio][chain_io]") {
    ChainBench b({}, {3, 2});
    ChainWriter out(b.memory, b.chain);
    const std::vector<uint8_t> data = iota_bytes(10, 1);
    CHECK(out.write(data) == 5);
    CHECK(out.write(data) == 0);
    CHECK(out.written() == 5);
    CHECK(b.writable_stream() == iota_bytes(5, 1));
    CHECK(b.memory.read<uint8_t>(b.chain.writable[1].addr + 2) == 0);  // past the last buffer: untouched
}

TEST_CASE("ChainWriter::write_exact and write_obj refuse without writing", "[virtio][chain_io]") {
    ChainBench b({}, {2, 3});
    ChainWriter out(b.memory, b.chain);
    out.write_obj(uint16_t{0xabcd}, "used header");
    const std::vector<uint8_t> four(4, 0x55);
    CHECK_THROWS_WITH(out.write_exact(four, "status"), "status: needs 4 bytes, the chain's writable buffers hold 3");
    CHECK_THROWS_AS(out.write_obj(uint64_t{1}, "big"), QueueError);
    CHECK(out.written() == 2);
    CHECK(b.writable_stream() == std::vector<uint8_t>{0xcd, 0xab, 0, 0, 0});
    out.write_obj(uint8_t{7}, "status");
    CHECK(out.written() == 3);
}

TEST_CASE("ChainWriter::peek_iovecs then advance fills buffers directly", "[virtio][chain_io]") {
    ChainBench b({}, {3, 4, 5});
    ChainWriter out(b.memory, b.chain);
    out.write_obj(uint8_t{0xaa}, "first");
    std::vector<iovec> iov = out.peek_iovecs(8);
    REQUIRE(iov.size() == 3);
    CHECK(iov[0].iov_len == 2);
    CHECK(iov[1].iov_len == 4);
    CHECK(iov[2].iov_len == 2);
    CHECK(out.written() == 1);  // peeking writes nothing
    uint8_t next = 1;
    for (const iovec& v : iov) std::memset(v.iov_base, next++, v.iov_len);  // as readv would
    out.advance(8);
    CHECK(out.written() == 9);
    CHECK(out.remaining() == 3);
    out.write_obj(uint8_t{0xbb}, "after");
    CHECK(b.writable_stream() == std::vector<uint8_t>{0xaa, 1, 1, 2, 2, 2, 2, 3, 3, 0xbb, 0, 0});
    out.advance(100);  // clamped to the buffers
    CHECK(out.written() == 12);
    CHECK(out.peek_iovecs(1).empty());
}

TEST_CASE("a chain without buffers reads and writes nothing", "[virtio][chain_io]") {
    ChainBench b({}, {});
    ChainReader in(b.memory, b.chain);
    ChainWriter out(b.memory, b.chain);
    std::vector<uint8_t> buf(4);
    CHECK(in.read(buf) == 0);
    CHECK(in.skip(4) == 0);
    CHECK(in.peek_iovecs(4).empty());
    CHECK(out.write(buf) == 0);
    CHECK(out.peek_iovecs(4).empty());
    CHECK_THROWS_AS(in.read_obj<uint8_t>("anything"), QueueError);
    CHECK_THROWS_AS(out.write_obj(uint8_t{0}, "anything"), QueueError);
}
