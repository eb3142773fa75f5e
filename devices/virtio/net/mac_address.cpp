#include "devices/virtio/net/mac_address.hpp"

#include <sys/random.h>

#include <cerrno>

#include <fmt/format.h>

#include "vmm/error.hpp"

namespace nanovm::virtio::net {

namespace {

int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

}  // namespace

MacAddress MacAddress::parse(std::string_view text) {
    const auto bad = [&](const char* why) {
        return Error(fmt::format("MAC address '{}': {} (expected six hex bytes like 02:00:00:00:00:01)", text, why));
    };
    if (text.size() != 17) throw bad("wrong length");
    MacAddress mac;
    for (size_t i = 0; i < 6; ++i) {
        const size_t at = i * 3;
        if (i > 0 && text[at - 1] != ':') throw bad("bytes must be separated by ':'");
        const int hi = hex_digit(text[at]);
        const int lo = hex_digit(text[at + 1]);
        if (hi < 0 || lo < 0) throw bad("not a hex digit");
        mac.bytes[i] = static_cast<uint8_t>(hi << 4 | lo);
    }
    if (mac.bytes[0] & 1) throw bad("a multicast address cannot be a NIC's address");
    return mac;
}

MacAddress MacAddress::random_local() {
    MacAddress mac;
    mac.bytes[0] = 0x02;
    size_t got = 0;
    while (got < 5) {
        const ssize_t n = ::getrandom(mac.bytes.data() + 1 + got, 5 - got, 0);
        if (n < 0) {
            if (errno == EINTR) continue;
            throw_errno("getrandom");
        }
        got += static_cast<size_t>(n);
    }
    return mac;
}

std::string MacAddress::to_string() const {
    return fmt::format("{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}", bytes[0], bytes[1], bytes[2], bytes[3], bytes[4],
                       bytes[5]);
}

}  // namespace nanovm::virtio::net
