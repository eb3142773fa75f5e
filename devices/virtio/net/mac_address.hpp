// An Ethernet MAC address: parsing ("02:00:5e:10:00:01"), printing, and a random
// locally administered unicast address for a VM that was given none.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace nanovm::virtio::net {

/// Six bytes, in wire order (bytes[0] is sent first).
struct MacAddress {
    std::array<uint8_t, 6> bytes{};

    /// Parses six two-digit hex bytes separated by ':' ("02:ab:cd:ef:01:23", either
    /// case). Throws Error naming the text if it is malformed or a multicast address
    /// (bit 0 of the first byte: a NIC's own address must be unicast).
    static MacAddress parse(std::string_view text);
    /// 02:xx:xx:xx:xx:xx with five bytes from getrandom(2): locally administered
    /// (IEEE 802 bit 1 of the first byte), unicast. Throws SysError (getrandom).
    static MacAddress random_local();
    /// "02:ab:cd:ef:01:23" (lower case).
    std::string to_string() const;

    bool operator==(const MacAddress&) const = default;
};

}  // namespace nanovm::virtio::net
