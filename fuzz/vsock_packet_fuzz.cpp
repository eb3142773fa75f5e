// libFuzzer harness for the virtio-vsock tx-packet parser (devices/virtio/vsock/
// packet.hpp) and the host CONNECT line parser (host_protocol.hpp). The input is laid
// into simulated guest memory as the readable buffers of one descriptor chain; the
// parser must refuse it with QueueError exactly when it holds fewer than 44 bytes,
// and otherwise return a verdict consistent with the header it read (an accepted
// packet is from the guest's CID to the host, STREAM, a known op, len == payload <=
// 64 KiB; a reset is never the answer to an RST). The whole input is also parsed as a
// CONNECT line: what is accepted is "CONNECT <decimal>\n" and round-trips.
//
// Input layout: byte 0 bits 0-2 = segments - 1 (1..8); then one byte per segment but
// the last = its length - 1; the rest = the chain's bytes (the last segment takes
// what is left). Segments land 512 bytes apart in guest RAM.
// Seeds: fuzz/vsock_packet_seeds.py DIR (one well-formed packet of every op).
#include <cstdint>
#include <string>

#include "devices/virtio/chain_io.hpp"
#include "devices/virtio/vsock/host_protocol.hpp"
#include "devices/virtio/vsock/packet.hpp"
#include "fuzz/fuzz_input.hpp"
#include "fuzz/fuzz_support.hpp"
#include "vmm/guest_memory.hpp"

using namespace nanovm;
using namespace nanovm::virtio;
using namespace nanovm::virtio::vsock;
using nanovm::fuzz::fuzz_check;

namespace {

constexpr uint64_t kGuestCid = 3;
constexpr uint64_t kRam = 1 * MiB;
constexpr uint64_t kFirstSegment = 0x10000;

void check_connect_line(const uint8_t* data, size_t size) {
    const std::string_view line(reinterpret_cast<const char*>(data), size);
    const auto port = parse_connect_line(line);
    if (!port) return;
    fuzz_check(line.starts_with("CONNECT ") && line.ends_with('\n') && line.size() <= kMaxConnectLine,
               "accepted CONNECT line has the right shape");
    fuzz_check(parse_connect_line("CONNECT " + std::to_string(*port) + "\n") == port, "CONNECT port round-trips");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static GuestMemory memory = GuestMemory::create(kRam);
    check_connect_line(data, size);

    nanovm::fuzz::FuzzInput input(data, size);
    const size_t segments = 1 + (input.u8() & 7);
    std::vector<size_t> lengths;
    for (size_t i = 0; i + 1 < segments; ++i) lengths.push_back(size_t{input.u8()} + 1);
    lengths.push_back(input.remaining());
    DescriptorChain chain;
    uint64_t gpa = kFirstSegment;
    for (const size_t want : lengths) {
        const std::span<const uint8_t> bytes = input.bytes(want);
        if (bytes.empty()) continue;
        if (bytes.size() > kRam - gpa) return 0;  // larger than the RAM the harness keeps
        memory.write_bytes(Gpa(gpa), bytes);
        chain.readable.push_back({Gpa(gpa), static_cast<uint32_t>(bytes.size())});
        chain.readable_bytes += bytes.size();
        gpa += (bytes.size() + 512 + 15) & ~15ull;
    }

    ChainReader reader(memory, chain);
    try {
        const TxPacket p = parse_tx_packet(reader, kGuestCid);
        fuzz_check(chain.readable_bytes >= kHeaderSize, "a chain shorter than a header is refused");
        fuzz_check(p.payload_bytes == chain.readable_bytes - kHeaderSize, "payload = what follows the header");
        fuzz_check(reader.remaining() == p.payload_bytes, "the reader stops at the payload");
        const PacketHeader& h = p.header;
        if (p.verdict == TxVerdict::kAccept) {
            fuzz_check(p.reason.empty(), "an accepted packet has no reason");
            fuzz_check(h.src_cid == kGuestCid && h.dst_cid == kHostCid, "accepted: guest -> host");
            fuzz_check(h.type == kTypeStream, "accepted: STREAM");
            fuzz_check(h.op >= op::kRequest && h.op <= op::kCreditRequest, "accepted: known op");
            fuzz_check(h.len == p.payload_bytes && h.len <= kMaxPacketPayload, "accepted: len matches, <= 64 KiB");
            fuzz_check(h.op == op::kRw || h.len == 0, "accepted: payload only on RW");
        } else {
            fuzz_check(!p.reason.empty(), "a refused packet says why");
            fuzz_check(!(p.verdict == TxVerdict::kReset && h.op == op::kRst), "RST is never answered with RST");
        }
    } catch (const QueueError&) {
        fuzz_check(chain.readable_bytes < kHeaderSize, "only a short chain raises QueueError");
    }
    return 0;
}
