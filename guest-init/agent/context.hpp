// What every part of the agent server shares: the event loop pieces, the session
// table, the base environment, and the limits that keep its memory bounded.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "guest-init/protocol/messages.hpp"

namespace nanovm::agent {

class Poller;
class Timers;
class Children;
class Sessions;
class BackgroundJobs;

/// Connections served at once; more are accepted and closed with ERROR EAGAIN.
inline constexpr size_t kMaxConnections = 64;
/// Requests in progress per connection; more get ERROR EAGAIN.
inline constexpr size_t kMaxJobsPerConnection = 256;
/// Sessions at once.
inline constexpr size_t kMaxSessions = 64;
/// Output queued on a connection above which producers (command pipes, file reads,
/// listings) stop until it drops below kOutputLowWater: the host reading slowly
/// slows the commands down instead of growing the queue.
inline constexpr size_t kOutputHighWater = 1u << 20;
inline constexpr size_t kOutputLowWater = 256u << 10;
/// Output queued above which the connection stops reading requests too (answers to
/// PINGs and small requests are not held back by producers, but are by this).
inline constexpr size_t kInputStopOutput = 4u << 20;
/// Stdin bytes waiting for a command above which the connection stops reading.
inline constexpr size_t kStdinBacklogLimit = 1u << 20;
/// The size asked for a command's stdout and stderr pipes (the default is 64 KiB).
inline constexpr size_t kOutputPipeSize = 256u << 10;
/// Bytes read from a command pipe per STDOUT/STDERR frame, at most.
inline constexpr size_t kPipeChunk = 256u << 10;
/// Bytes per READ_DATA frame.
inline constexpr size_t kFileChunk = 256u << 10;
/// Bytes per DIR_ENTRIES frame, at most.
inline constexpr size_t kListChunk = 64u << 10;
/// After a command's leader exited, what its pipes still yield is forwarded up to
/// this many bytes each (a background process that keeps writing cannot hold the
/// EXIT back forever).
inline constexpr size_t kPostExitDrainLimit = 1u << 20;

/// The server-wide state the connections, jobs and sessions use. Owned by the Server.
struct AgentContext {
    Poller& poller;
    Timers& timers;
    Children& children;
    Sessions& sessions;
    BackgroundJobs& jobs;  ///< protocol version 3's detached commands
    /// The environment commands start from (HOME, PATH, TERM, SHELL, USER, LOGNAME).
    std::vector<std::string> base_env;
    /// True in a guest: SHUTDOWN signals PID 1, RESYNC changes the kernel's RNG,
    /// clock and hostname. False (a host process): both fail (EOPNOTSUPP).
    bool in_guest = false;
    /// The agent's name and version for HELLO_REPLY.
    std::string software;
    /// A SHUTDOWN to carry out once the round's output is flushed.
    std::optional<proto::ShutdownRequest::Action> power_request;
};

}  // namespace nanovm::agent
