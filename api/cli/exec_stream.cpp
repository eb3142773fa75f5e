// Streaming one command from the CLI (see exec_stream.hpp).
#include "api/cli/exec_stream.hpp"

#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include <fmt/format.h>

#include "vmm/log.hpp"

namespace nanovm {

namespace {

constexpr size_t kStdinChunk = 64 * 1024;
// Stdin queued for the agent above which we stop reading ours (back-pressure).
constexpr size_t kStdinHighWater = 1u << 20;
constexpr int kSignalsBeforeKill = 3;

// Writes everything to `fd`, waiting while it is full. After a failure (EPIPE: the
// reader went away) further output is dropped.
class OutputWriter {
public:
    explicit OutputWriter(int fd) : fd_(fd) {}
    void operator()(std::string_view data) {
        while (!failed_ && !data.empty()) {
            const ssize_t n = ::write(fd_, data.data(), data.size());
            if (n >= 0) {
                data.remove_prefix(static_cast<size_t>(n));
            } else if (errno == EAGAIN) {
                pollfd p{fd_, POLLOUT, 0};
                ::poll(&p, 1, -1);
            } else if (errno != EINTR) {
                failed_ = true;
            }
        }
    }

private:
    int fd_;
    bool failed_ = false;
};

}  // namespace

int exit_status_for_start_error(const agent::AgentError& error) {
    const std::string& name = error.errno_name();
    return name == "ENOENT" || name == "ENOTDIR" ? kExecNotFound : kExecCannotRun;
}

int exec_streaming(agent::AgentClient& client, agent::Command command, const StreamOptions& options) {
    command.stdin_stream = options.forward_stdin;
    command.stdin_data.reset();
    return stream_request(
        client, [&](agent::OutputCallbacks callbacks) { return client.start(command, std::move(callbacks)); },
        options.forward_stdin, command.timeout, options.signal_fd);
}

int stream_request(agent::AgentClient& client, const StartRequest& start, bool forward_stdin,
                   std::chrono::milliseconds timeout, int signal_fd) {
    OutputWriter out(STDOUT_FILENO), err(STDERR_FILENO);
    const agent::RequestId id = start(agent::OutputCallbacks{std::ref(out), std::ref(err)});
    bool stdin_open = forward_stdin;
    int signals_seen = 0;
    while (!client.done(id)) {
        pollfd fds[3] = {
            {client.native_handle(), static_cast<short>(POLLIN | (client.queued_output() > 0 ? POLLOUT : 0)), 0},
            {stdin_open && client.queued_output() < kStdinHighWater ? STDIN_FILENO : -1, POLLIN, 0},
            {signal_fd, POLLIN, 0},
        };
        // The command's end is awaited until its timeout plus the client's grace (a
        // guest that never reports it cannot hold us longer), else without limit.
        int wait_ms = -1;
        if (const auto until = client.deadline_for(id)) {
            const auto left = std::chrono::ceil<std::chrono::milliseconds>(*until - std::chrono::steady_clock::now());
            if (left.count() <= 0)
                throw agent::TimeoutError("the guest agent did not report the end of the command in time");
            wait_ms = static_cast<int>(std::min<int64_t>(left.count(), 24 * 3600 * 1000));
        }
        if (::poll(fds, 3, wait_ms) < 0) {
            if (errno == EINTR) continue;
            throw agent::ConnectionError(std::string("poll: ") + std::strerror(errno));
        }
        if (fds[0].revents) client.poll(std::chrono::milliseconds(0));
        if (client.done(id)) break;
        if (fds[1].revents) {
            char buf[kStdinChunk];
            const ssize_t n = ::read(STDIN_FILENO, buf, sizeof(buf));
            if (n > 0) {
                client.send_stdin(id, std::string_view(buf, static_cast<size_t>(n)));
            } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
                client.close_stdin(id);
                stdin_open = false;
            }
        }
        if (fds[2].revents & POLLIN) {
            signalfd_siginfo info{};
            if (::read(signal_fd, &info, sizeof(info)) == static_cast<ssize_t>(sizeof(info))) {
                if (++signals_seen < kSignalsBeforeKill) {
                    client.send_signal(id, static_cast<int>(info.ssi_signo));
                } else {
                    client.cancel(id);
                }
            }
        }
    }
    agent::ExecResult result;
    try {
        result = client.wait(id);
    } catch (const agent::AgentError& e) {
        log_line(fmt::format("{} in the guest: {}", e.message(), e.errno_name()));
        return exit_status_for_start_error(e);
    }
    if (result.status.timed_out) {
        log_line(fmt::format("the command timed out after {} s and was killed",
                             std::chrono::duration_cast<std::chrono::seconds>(timeout).count()));
        return kExecTimedOut;
    }
    return result.status.shell_code();
}

}  // namespace nanovm
