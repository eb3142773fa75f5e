#include "devices/virtio/vsock/host_protocol.hpp"

#include <fmt/format.h>

namespace nanovm::virtio::vsock {

std::optional<uint32_t> parse_connect_line(std::string_view line) {
    constexpr std::string_view kVerb = "CONNECT ";
    if (line.size() > kMaxConnectLine || !line.starts_with(kVerb) || !line.ends_with('\n')) return std::nullopt;
    const std::string_view digits = line.substr(kVerb.size(), line.size() - kVerb.size() - 1);
    if (digits.empty() || digits.size() > 10) return std::nullopt;
    uint64_t port = 0;
    for (const char c : digits) {
        if (c < '0' || c > '9') return std::nullopt;
        port = port * 10 + static_cast<uint64_t>(c - '0');
    }
    if (port > UINT32_MAX) return std::nullopt;
    return static_cast<uint32_t>(port);
}

std::string format_ok_line(uint32_t host_port) { return fmt::format("OK {}\n", host_port); }

}  // namespace nanovm::virtio::vsock
