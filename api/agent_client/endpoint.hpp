// Reaching a guest agent from the host: either the agent's own Unix socket (the agent
// as a host process), or a VMM's vsock Unix socket, where a stream to a guest port
// opens with the VMM's line handshake (Firecracker's convention, devices/virtio/vsock):
//
//     host -> VMM:  "CONNECT <port>\n"
//     VMM -> host:  "OK <host port>\n"      then the bytes are the guest's stream
//
// Anything else (or the socket closing) means the guest did not accept.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "vmm/fd.hpp"

namespace nanovm::agent {

/// Where to connect.
struct Endpoint {
    /// A Unix socket path: the agent's (`nanovm-agent --listen unix:PATH`), or with
    /// `vsock_port` the VMM's vsock socket of one VM.
    std::string socket_path;
    /// Set: `socket_path` is a VMM vsock socket; open a stream to this guest port.
    std::optional<uint32_t> vsock_port;

    /// The agent listening on a Unix socket itself.
    static Endpoint unix_socket(std::string path) { return Endpoint{std::move(path), std::nullopt}; }
    /// The agent in a VM, through the VMM's vsock socket (port: proto::kAgentVsockPort).
    static Endpoint vsock(std::string vmm_socket_path, uint32_t port);
    /// For messages: "unix:PATH" or "vsock:PATH:PORT".
    std::string to_string() const;
};

/// Connects to `endpoint` (and does the CONNECT handshake for vsock) within
/// `timeout`. Returns a non-blocking, close-on-exec stream socket. Throws
/// std::system_error (connect failures: ENOENT, ECONNREFUSED...; ETIMEDOUT) or
/// std::runtime_error (the VMM refused the handshake).
Fd connect_endpoint(const Endpoint& endpoint, std::chrono::milliseconds timeout);

}  // namespace nanovm::agent
