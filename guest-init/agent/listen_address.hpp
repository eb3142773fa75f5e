// Where the agent listens: a vsock port inside a guest, a Unix socket path when it
// runs as a host process (tests, development). The same server code serves both.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "guest-init/agent/failure.hpp"
#include "vmm/fd.hpp"

namespace nanovm::agent {

/// A parsed listen address.
struct ListenAddress {
    enum class Kind { kUnix, kVsock };
    Kind kind = Kind::kVsock;
    std::string path;   ///< kUnix: the socket path (at most 107 bytes)
    uint32_t port = 0;  ///< kVsock: the port (any CID of the guest)

    /// "unix:<path>" or "vsock:<port>".
    std::string to_string() const;
};

/// Parses "unix:<path>" or "vsock:<port>" (decimal, 1..4294967294). nullopt if malformed.
std::optional<ListenAddress> parse_listen_address(std::string_view text);

/// A non-blocking, close-on-exec listening socket at `address`. A stale Unix socket
/// file at the path is replaced. Invalid Fd and `failure` on error.
Fd open_listener(const ListenAddress& address, Failure& failure);

}  // namespace nanovm::agent
