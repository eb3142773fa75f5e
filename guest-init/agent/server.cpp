// The agent's event loop (see server.hpp).
#include "guest-init/agent/server.hpp"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <list>
#include <memory>

#include "guest-init/agent/background.hpp"
#include "guest-init/agent/children.hpp"
#include "guest-init/agent/connection.hpp"
#include "guest-init/agent/poller.hpp"
#include "guest-init/agent/session.hpp"
#include "guest-init/agent/timers.hpp"
#include "guest-init/console.hpp"
#include "guest-init/protocol/errno_names.hpp"
#include "guest-init/spawn.hpp"

namespace nanovm::agent {
namespace {

class Server {
public:
    explicit Server(const ServerOptions& options)
        : options_(options),
          context_{poller_, timers_, children_, sessions_, jobs_, guest_init::child_environment(),
                   options.in_guest, options.software, {}} {}

    ~Server() {
        // Connections first: their jobs kill their commands and detach from sessions.
        connections_.clear();
        sessions_.clear();
        jobs_.clear();
    }

    int run() {
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, SIGCHLD);
        sigaddset(&set, SIGTERM);
        sigaddset(&set, SIGINT);
        sigprocmask(SIG_BLOCK, &set, nullptr);
        ::signal(SIGPIPE, SIG_IGN);
        if (::prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) guest_init::log_errno("agent: PR_SET_CHILD_SUBREAPER", errno);

        Failure failure;
        signals_.reset(::signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC));
        if (!signals_ || !poller_.init()) {
            guest_init::log_errno("agent: signalfd/epoll", errno);
            return 1;
        }
        listener_ = open_listener(options_.listen, failure);
        if (!listener_) {
            guest_init::log_errno("agent: " + failure.what, failure.err);
            return 1;
        }
        if (options_.ready_fd >= 0) {
            (void)!::write(options_.ready_fd, "1", 1);
            ::close(options_.ready_fd);
        }
        poller_.add(signals_.get(), EPOLLIN, [this](uint32_t) { on_signals(); });
        poller_.add(listener_.get(), EPOLLIN, [this](uint32_t) { on_accept(); });

        while (!stop_) {
            if (poller_.wait(timers_.next_timeout_ms()) < 0) {
                guest_init::log_errno("agent: epoll_wait", errno);
                return 1;
            }
            timers_.run_expired();
            end_round();
        }
        return 0;
    }

private:
    void on_signals() {
        signalfd_siginfo info;
        while (::read(signals_.get(), &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
            if (info.ssi_signo == SIGCHLD) {
                children_.reap();
            } else {
                stop_ = true;
            }
        }
        // SIGCHLD signals coalesce: reap once more for any that merged.
        children_.reap();
    }

    void on_accept() {
        for (;;) {
            Fd socket(::accept4(listener_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
            if (!socket) {
                if (errno == EINTR || errno == ECONNABORTED) continue;
                return;  // EAGAIN, or out of fds: try again on the next event
            }
            if (connections_.size() >= kMaxConnections) {
                refuse(socket.get());
                continue;
            }
            auto connection = std::make_unique<Connection>(context_, std::move(socket));
            if (connection->start()) connections_.push_back(std::move(connection));
        }
    }

    // Best effort: ERROR (id 0) EAGAIN, then the socket closes.
    static void refuse(int socket) {
        proto::FrameOutput out;
        out.append(proto::MessageType::kError, proto::kConnectionId,
                   proto::encode(proto::ErrorReport{proto::errno_name(EAGAIN), "too many connections"}));
        const std::string_view bytes = out.pending();
        (void)!::send(socket, bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    }

    // After each round: output out, finished work destroyed, power requests acted on.
    void end_round() {
        for (auto& connection : connections_) connection->flush();
        for (auto& connection : connections_) connection->collect();
        sessions_.collect();
        connections_.remove_if([](const std::unique_ptr<Connection>& c) { return c->closed(); });
        if (context_.power_request) {
            const int sig = *context_.power_request == proto::ShutdownRequest::Action::kReboot ? SIGTERM : SIGUSR2;
            context_.power_request.reset();
            ::kill(1, sig);
        }
    }

    const ServerOptions& options_;
    Poller poller_;
    Timers timers_;
    Children children_;
    Sessions sessions_;
    BackgroundJobs jobs_;
    AgentContext context_;
    Fd signals_;
    Fd listener_;
    std::list<std::unique_ptr<Connection>> connections_;
    bool stop_ = false;
};

}  // namespace

int serve(const ServerOptions& options) {
    Server server(options);
    return server.run();
}

}  // namespace nanovm::agent
