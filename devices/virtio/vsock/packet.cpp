#include "devices/virtio/vsock/packet.hpp"

namespace nanovm::virtio::vsock {

TxPacket check_tx_header(const PacketHeader& header, uint64_t payload_bytes, uint64_t guest_cid) {
    TxPacket packet{header, payload_bytes, TxVerdict::kAccept, {}};
    const auto verdict = [&](TxVerdict v, std::string_view why) {
        // RST is never answered with RST (§5.10.6.6): a bad one is only dropped.
        packet.verdict = (v == TxVerdict::kReset && header.op == op::kRst) ? TxVerdict::kDrop : v;
        packet.reason = why;
        return packet;
    };
    if (header.dst_cid != kHostCid) return verdict(TxVerdict::kDrop, "dst_cid is not the host (2)");
    if (header.src_cid != guest_cid) return verdict(TxVerdict::kDrop, "src_cid is not the guest's CID");
    if (header.len > kMaxPacketPayload) return verdict(TxVerdict::kReset, "len exceeds 64 KiB");
    if (header.len != payload_bytes) return verdict(TxVerdict::kReset, "len differs from the payload bytes present");
    if (header.type != kTypeStream) return verdict(TxVerdict::kReset, "type is not STREAM");
    if (header.op < op::kRequest || header.op > op::kCreditRequest) return verdict(TxVerdict::kReset, "unknown op");
    if (header.op != op::kRw && header.len != 0) return verdict(TxVerdict::kReset, "payload on a control packet");
    return packet;
}

TxPacket parse_tx_packet(ChainReader& reader, uint64_t guest_cid) {
    const auto header = reader.read_obj<PacketHeader>("vsock tx packet header");
    return check_tx_header(header, reader.remaining(), guest_cid);
}

}  // namespace nanovm::virtio::vsock
