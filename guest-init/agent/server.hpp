// The guest agent server: accepts connections on its listen address and serves the
// agent protocol (guest-init/protocol/) on each, all on one epoll event loop.
//
// Inside a guest it is a separate process forked by PID 1 (guest-init/main.cpp),
// listening on vsock port proto::kAgentVsockPort; it is a child subreaper, so the
// orphans of its commands are reparented to it and it reaps them, while PID 1 reaps
// everything else. The same code runs as an ordinary host process over a Unix
// socket (build/guest-init/nanovm-agent --listen unix:PATH) for tests.
#pragma once

#include <string>

#include "guest-init/agent/listen_address.hpp"

namespace nanovm::agent {

/// How to run the server.
struct ServerOptions {
    ListenAddress listen;
    /// True in a guest, where the agent may change the machine: SHUTDOWN sends PID 1
    /// its power-off (SIGUSR2) or reboot (SIGTERM) signal, RESYNC reseeds the kernel
    /// RNG and sets the clock and hostname. False (a host process): both fail with
    /// EOPNOTSUPP.
    bool in_guest = false;
    /// Name and version reported in HELLO_REPLY.
    std::string software = "nanovm-agent";
    /// If >= 0: one byte is written to this fd, which is then closed, once the
    /// listener is open (PID 1 waits for it before its ready line).
    int ready_fd = -1;
};

/// Serves until SIGTERM or SIGINT. Blocks SIGCHLD, SIGTERM and SIGINT (taken through
/// a signalfd), ignores SIGPIPE and becomes a child subreaper. Returns the exit status
/// for the process: 0 after a stop signal, 1 if it could not start (logged).
int serve(const ServerOptions& options);

}  // namespace nanovm::agent
