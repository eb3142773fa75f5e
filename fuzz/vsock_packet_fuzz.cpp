// libFuzzer harness for the vsock tx-packet parser (devices/virtio/vsock/packet.hpp)
// and the host CONNECT line parser (host_protocol.hpp). The input is laid into guest
// memory as a descriptor chain's readable buffers, split where its first bytes say;
// the parser must either refuse it with QueueError (fewer than 44 bytes) or return a
// verdict consistent with the header it read. Any other outcome aborts.
//
// Build (the fuzz build directory is set up elsewhere; by hand):
//   clang++ -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -I. \
//     fuzz/vsock_packet_fuzz.cpp devices/virtio/vsock/packet.cpp \
//     devices/virtio/vsock/host_protocol.cpp devices/virtio/chain_io.cpp \
//     vmm/guest_memory.cpp vmm/error.cpp -lfmt -o build-fuzz/vsock_packet_fuzz
//   build-fuzz/vsock_packet_fuzz -max_total_time=60
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "devices/virtio/chain_io.hpp"
#include "devices/virtio/vsock/host_protocol.hpp"
#include "devices/virtio/vsock/packet.hpp"
#include "vmm/guest_memory.hpp"

using namespace nanovm;
using namespace nanovm::virtio;
using namespace nanovm::virtio::vsock;

namespace {

constexpr uint64_t kGuestCid = 3;
constexpr uint64_t kRam = 1 * MiB;

void require(bool ok) {
    if (!ok) std::abort();
}

void check_connect_line(const uint8_t* data, size_t size) {
    const std::string_view line(reinterpret_cast<const char*>(data), size);
    const auto port = parse_connect_line(line);
    if (!port) return;
    // Whatever it accepts is CONNECT, decimal digits, newline, and round-trips.
    require(line.starts_with("CONNECT ") && line.ends_with('\n') && line.size() <= kMaxConnectLine);
    const std::string canonical = "CONNECT " + std::to_string(*port) + "\n";
    require(parse_connect_line(canonical) == port);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static GuestMemory memory = GuestMemory::create(kRam);
    check_connect_line(data, size);
    if (size < 1) return 0;
    // Byte 0: segments (1..8); then one byte per cut (the segment's length, 1..256);
    // the last segment takes the rest. Segments land 512 bytes apart.
    const size_t segments = 1 + (data[0] & 7);
    size_t at = 1 + (segments - 1);
    if (at > size) return 0;
    DescriptorChain chain;
    uint64_t gpa = 0x10000;
    for (size_t i = 0; i < segments && at <= size; ++i) {
        size_t len = i + 1 < segments ? size_t{data[1 + i]} + 1 : size - at;
        len = std::min(len, size - at);
        if (len == 0) continue;
        if (len > kRam - gpa) return 0;
        memory.write_bytes(Gpa(gpa), {data + at, len});
        chain.readable.push_back({Gpa(gpa), static_cast<uint32_t>(len)});
        chain.readable_bytes += len;
        at += len;
        gpa += (len + 512 + 15) & ~15ull;
    }
    ChainReader reader(memory, chain);
    try {
        const TxPacket p = parse_tx_packet(reader, kGuestCid);
        require(chain.readable_bytes >= kHeaderSize);
        require(p.payload_bytes == chain.readable_bytes - kHeaderSize);
        require(reader.remaining() == p.payload_bytes);
        const PacketHeader& h = p.header;
        if (p.verdict == TxVerdict::kAccept) {
            require(p.reason.empty());
            require(h.src_cid == kGuestCid && h.dst_cid == kHostCid && h.type == kTypeStream);
            require(h.op >= op::kRequest && h.op <= op::kCreditRequest);
            require(h.len == p.payload_bytes && h.len <= kMaxPacketPayload);
            require(h.op == op::kRw || h.len == 0);
        } else {
            require(!p.reason.empty());
            require(!(p.verdict == TxVerdict::kReset && h.op == op::kRst));  // never RST an RST
        }
    } catch (const QueueError&) {
        require(chain.readable_bytes < kHeaderSize);
    }
    return 0;
}
