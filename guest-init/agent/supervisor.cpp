// PID 1's side of the agent (see supervisor.hpp).
#include "guest-init/agent/supervisor.hpp"

#include <fcntl.h>
#include <poll.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include "guest-init/agent/server.hpp"
#include "guest-init/console.hpp"
#include "guest-init/power.hpp"
#include "guest-init/reaper.hpp"
#include "guest-init/signals.hpp"

namespace nanovm::guest_init {
namespace {

constexpr int kListenWaitMs = 2000;
constexpr int kMaxQuickDeaths = 5;
constexpr int64_t kQuickDeathMs = 1000;

int64_t monotonic_ms() {
    timespec ts{};
    ::clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

}  // namespace

pid_t start_agent(uint32_t port) {
    int ready[2];
    if (::pipe2(ready, O_CLOEXEC) != 0) {
        log_errno("agent: pipe2", errno);
        return -1;
    }
    const pid_t pid = ::fork();
    if (pid < 0) {
        log_errno("agent: fork", errno);
        ::close(ready[0]);
        ::close(ready[1]);
        return -1;
    }
    if (pid == 0) {
        ::close(ready[0]);
        agent::ServerOptions options;
        options.listen.kind = agent::ListenAddress::Kind::kVsock;
        options.listen.port = port;
        options.in_guest = true;
        options.software = "nanovm guest-init agent";
        options.ready_fd = ready[1];
        ::_exit(agent::serve(options));
    }
    ::close(ready[1]);
    // One byte once it listens; EOF if it failed first (it logged why).
    pollfd p{ready[0], POLLIN, 0};
    char byte;
    if (::poll(&p, 1, kListenWaitMs) <= 0 || ::read(ready[0], &byte, 1) != 1)
        log_error("agent: not listening on vsock port " + std::to_string(port));
    ::close(ready[0]);
    return pid;
}

void supervise_agent(pid_t agent, uint32_t port) {
    int64_t started = monotonic_ms();
    int quick_deaths = 0;
    for (;;) {
        const int sig = wait_for_signal(-1);
        if (sig == SIGCHLD) {
            const ReapResult r = reap_children(agent);
            if (!r.watched_exited) continue;
            quick_deaths = monotonic_ms() - started < kQuickDeathMs ? quick_deaths + 1 : 0;
            if (quick_deaths >= kMaxQuickDeaths) {
                log_error("agent: it keeps dying; not restarting it");
                agent = -1;
                continue;
            }
            log_error("agent: it died; restarting it");
            started = monotonic_ms();
            agent = start_agent(port);
        } else if (auto action = power_action_for_signal(sig)) {
            power_down(*action);
        }
    }
}

}  // namespace nanovm::guest_init
