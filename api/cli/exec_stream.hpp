// Running one command in a sandbox from the CLI (nanovm run, nanovm vm exec): its
// stdout and stderr written to ours as they arrive, our stdin forwarded to it, our
// termination signals forwarded to it, and its ending mapped to an exit status.
#pragma once

#include <chrono>
#include <functional>
#include <string>

#include "api/agent_client/agent_client.hpp"

namespace nanovm {

/// Exit statuses of `nanovm run` and `nanovm vm exec` besides the command's own
/// (docker run's convention for the same situations).
inline constexpr int kExecTimedOut = 124;   ///< --timeout passed: the command was killed
inline constexpr int kExecNanovmError = 125;  ///< nanovm failed (bad option, no KVM, boot failed)
inline constexpr int kExecCannotRun = 126;  ///< the command exists but cannot run (EACCES...)
inline constexpr int kExecNotFound = 127;   ///< no such command (or working directory)

/// How to run it.
struct StreamOptions {
    /// Forward our stdin (fd 0) until EOF; otherwise the command's stdin is /dev/null.
    bool forward_stdin = false;
    /// A signalfd reporting SIGINT/SIGTERM/SIGHUP (or -1): each is sent to the
    /// command's process group; the third one kills it.
    int signal_fd = -1;
};

/// Starts the request to stream (an EXEC or a SESSION_RUN) with the given callbacks.
using StartRequest = std::function<agent::RequestId(agent::OutputCallbacks)>;

/// Streams the request `start` makes, as described above (stdin only if the request
/// was started with stdin_stream). Returns what exec_streaming does; `timeout` is
/// only for the message.
int stream_request(agent::AgentClient& client, const StartRequest& start, bool forward_stdin,
                   std::chrono::milliseconds timeout, int signal_fd);

/// Runs `command` on `client` and streams it as described above. Returns the exit
/// status for this process: the command's exit code, 128+N when a signal N killed it,
/// kExecTimedOut when its timeout passed (with a line on stderr), kExecNotFound /
/// kExecCannotRun (with the agent's reason on stderr) when it could not start.
/// Throws agent::ConnectionError when the connection to the agent breaks.
int exec_streaming(agent::AgentClient& client, agent::Command command, const StreamOptions& options);

/// The status for an agent refusal to start a command: ENOENT/ENOTDIR ->
/// kExecNotFound, anything else kExecCannotRun.
int exit_status_for_start_error(const agent::AgentError& error);

}  // namespace nanovm
