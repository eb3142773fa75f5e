// The line protocol a host program speaks on the VMM's vsock Unix socket before the
// byte stream starts (Firecracker's convention, issue 3): it writes
// `CONNECT <port>\n`; once the guest's listener on <port> accepted, the VMM answers
// `OK <hostport>\n`, <hostport> being the host-side port the guest sees as the peer.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace nanovm::virtio::vsock {

/// The longest CONNECT line accepted, `\n` included ("CONNECT 4294967295\n" is 19).
inline constexpr size_t kMaxConnectLine = 32;

/// Parses one line, `\n` included: "CONNECT " then a decimal port (1 to 10 digits,
/// <= 2^32 - 1), then "\n". Returns the port, or nothing if the line is anything else.
std::optional<uint32_t> parse_connect_line(std::string_view line);

/// The answer to an accepted CONNECT: "OK <hostport>\n".
std::string format_ok_line(uint32_t host_port);

}  // namespace nanovm::virtio::vsock
