// Parsing and checking the packets a guest puts on the tx queue (virtio 1.2 §5.10.6).
// This is the one place where a tx packet's header is read from guest memory; the
// device acts only on packets this file accepted. Pure functions, no sockets: the
// fuzz harness (fuzz/vsock_packet_fuzz.cpp) drives them directly.
#pragma once

#include <cstdint>
#include <string_view>

#include "devices/virtio/chain_io.hpp"
#include "devices/virtio/vsock/vsock_spec.hpp"

namespace nanovm::virtio::vsock {

/// What the device does with a tx packet.
enum class TxVerdict {
    kAccept,  ///< well formed: dispatch on `op`
    kDrop,    ///< ignore (not addressed from this guest to the host, or a bad RST)
    kReset,   ///< answer with RST and tear down the stream the ports name, if any
};

/// The header of one tx packet, the verdict on it and why (for the log).
struct TxPacket {
    PacketHeader header{};
    uint64_t payload_bytes = 0;  ///< readable bytes after the header in the chain
    TxVerdict verdict = TxVerdict::kDrop;
    std::string_view reason;     ///< empty for kAccept; a static string otherwise
};

/// Checks a header against the rules of §5.10.6 and nanovm's limits:
/// dst_cid must be the host (2) and src_cid `guest_cid`, else kDrop; type must be
/// STREAM, op one of REQUEST..CREDIT_REQUEST, len <= kMaxPacketPayload and equal to
/// `payload_bytes` (the payload the chain carries), else kReset. A malformed RST is
/// dropped instead: RST is never answered with RST (§5.10.6.6).
TxPacket check_tx_header(const PacketHeader& header, uint64_t payload_bytes, uint64_t guest_cid);

/// Reads the header of the packet in `reader`'s chain (leaving the reader at the
/// payload) and checks it. Throws QueueError if the chain's readable buffers hold
/// fewer than kHeaderSize bytes: such a chain is not a packet at all.
TxPacket parse_tx_packet(ChainReader& reader, uint64_t guest_cid);

}  // namespace nanovm::virtio::vsock
