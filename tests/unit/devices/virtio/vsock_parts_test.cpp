// The pure parts of virtio-vsock: the tx header checks, the CONNECT line parser and
// the byte queue that holds guest bytes for a slow host socket.
#include <catch2/catch.hpp>

#include <numeric>
#include <string>
#include <vector>

#include "devices/virtio/vsock/byte_queue.hpp"
#include "devices/virtio/vsock/host_protocol.hpp"
#include "devices/virtio/vsock/packet.hpp"

using namespace nanovm;
using namespace nanovm::virtio;
using namespace nanovm::virtio::vsock;

namespace {

constexpr uint64_t kCid = 3;

PacketHeader good(uint16_t operation = op::kRw, uint32_t len = 0) {
    return {kCid, kHostCid, 1000, 2000, len, kTypeStream, operation, 0, 4096, 0};
}

}  // namespace

TEST_CASE("check_tx_header accepts well-formed packets of every op", "[vsock]") {
    for (uint16_t o = op::kRequest; o <= op::kCreditRequest; ++o) {
        const TxPacket p = check_tx_header(good(o), 0, kCid);
        CHECK(p.verdict == TxVerdict::kAccept);
        CHECK(p.reason.empty());
    }
    CHECK(check_tx_header(good(op::kRw, kMaxPacketPayload), kMaxPacketPayload, kCid).verdict == TxVerdict::kAccept);
}

TEST_CASE("check_tx_header resets bad len, type and op, drops wrong CIDs, never answers RST with RST", "[vsock]") {
    CHECK(check_tx_header(good(op::kRw, 10), 9, kCid).verdict == TxVerdict::kReset);
    CHECK(check_tx_header(good(op::kRw, 10), 11, kCid).verdict == TxVerdict::kReset);
    CHECK(check_tx_header(good(op::kRw, kMaxPacketPayload + 1), kMaxPacketPayload + 1, kCid).verdict ==
          TxVerdict::kReset);
    CHECK(check_tx_header(good(op::kRw, UINT32_MAX), 0, kCid).verdict == TxVerdict::kReset);
    PacketHeader h = good(op::kRequest);
    h.type = kTypeSeqpacket;
    CHECK(check_tx_header(h, 0, kCid).verdict == TxVerdict::kReset);
    CHECK(check_tx_header(good(op::kInvalid), 0, kCid).verdict == TxVerdict::kReset);
    CHECK(check_tx_header(good(8), 0, kCid).verdict == TxVerdict::kReset);
    CHECK(check_tx_header(good(op::kShutdown, 4), 4, kCid).verdict == TxVerdict::kReset);

    h = good();
    h.dst_cid = 3;
    CHECK(check_tx_header(h, 0, kCid).verdict == TxVerdict::kDrop);
    h = good();
    h.src_cid = 4;
    CHECK(check_tx_header(h, 0, kCid).verdict == TxVerdict::kDrop);
    h = good(op::kRst, 5);  // a bad RST: dropped, not reset
    CHECK(check_tx_header(h, 0, kCid).verdict == TxVerdict::kDrop);
    h = good(op::kRst);
    h.type = 0;
    const TxPacket p = check_tx_header(h, 0, kCid);
    CHECK(p.verdict == TxVerdict::kDrop);
    CHECK(p.reason == "type is not STREAM");
}

TEST_CASE("parse_tx_packet reads a header split over segments and refuses a chain shorter than one", "[vsock]") {
    GuestMemory memory = GuestMemory::create(1 * MiB);
    PacketHeader h = good(op::kRw, 6);
    std::vector<uint8_t> bytes(sizeof(h) + 6);
    std::memcpy(bytes.data(), &h, sizeof(h));
    std::iota(bytes.begin() + sizeof(h), bytes.end(), uint8_t{1});
    // Three segments: 7 bytes, 30 bytes, the rest (header ends inside the third).
    DescriptorChain chain;
    const std::vector<std::pair<uint64_t, uint32_t>> pieces{{0x1000, 7}, {0x3000, 30}, {0x5000, 13}};
    size_t at = 0;
    for (const auto& [gpa, len] : pieces) {
        memory.write_bytes(Gpa(gpa), {bytes.data() + at, len});
        chain.readable.push_back({Gpa(gpa), len});
        chain.readable_bytes += len;
        at += len;
    }
    ChainReader reader(memory, chain);
    const TxPacket p = parse_tx_packet(reader, kCid);
    CHECK(p.verdict == TxVerdict::kAccept);
    CHECK(p.header.len == 6);
    CHECK(p.payload_bytes == 6);
    std::vector<uint8_t> payload(6);
    CHECK(reader.read(payload) == 6);
    CHECK(payload == std::vector<uint8_t>{1, 2, 3, 4, 5, 6});

    DescriptorChain short_chain;
    short_chain.readable.push_back({Gpa(0x1000), 43});
    short_chain.readable_bytes = 43;
    ChainReader short_reader(memory, short_chain);
    CHECK_THROWS_AS(parse_tx_packet(short_reader, kCid), QueueError);
}

TEST_CASE("parse_connect_line takes exactly 'CONNECT <u32>\\n'", "[vsock]") {
    CHECK(parse_connect_line("CONNECT 0\n") == 0u);
    CHECK(parse_connect_line("CONNECT 52\n") == 52u);
    CHECK(parse_connect_line("CONNECT 4294967295\n") == 4294967295u);
    CHECK(parse_connect_line("CONNECT 0004\n") == 4u);
    for (const char* bad : {"CONNECT 4294967296\n", "CONNECT 52", "CONNECT\n", "CONNECT \n", "connect 52\n",
                            "CONNECT -1\n", "CONNECT 5 2\n", "CONNECT 52\r\n", "CONNECT  52\n", "OK 52\n",
                            "CONNECT 12345678901\n", ""})
        CHECK_FALSE(parse_connect_line(bad));
    CHECK_FALSE(parse_connect_line(std::string("CONNECT ") + std::string(30, '1') + "\n"));
    CHECK(format_ok_line(1024) == "OK 1024\n");
}

TEST_CASE("ByteQueue keeps bytes in order across chunks and frees them as they drain", "[vsock]") {
    ByteQueue queue(8);
    std::vector<uint8_t> in(50);
    std::iota(in.begin(), in.end(), uint8_t{0});
    queue.append({in.data(), 5});
    queue.append({in.data() + 5, 45});
    CHECK(queue.size() == 50);
    std::vector<uint8_t> out;
    iovec iov[3];
    bool appended = false;
    while (!queue.empty()) {
        const size_t count = queue.front_iovecs(iov);
        REQUIRE(count > 0);
        CHECK(count <= 3);
        // Take part of the first iovec only, to consume mid-chunk.
        const size_t take = std::min<size_t>(iov[0].iov_len, 3);
        const auto* p = static_cast<const uint8_t*>(iov[0].iov_base);
        out.insert(out.end(), p, p + take);
        queue.consume(take);
        if (out.size() >= 20 && !appended) {  // appending while partly drained
            queue.append({in.data(), 4});
            appended = true;
        }
    }
    std::vector<uint8_t> expected(54);
    for (size_t i = 0; i < expected.size(); ++i) expected[i] = static_cast<uint8_t>(i % 50);
    CHECK(out == expected);
    CHECK(queue.front_iovecs(iov) == 0);
}
