// Reaping the agent's children (see children.hpp).
#include "guest-init/agent/children.hpp"

#include <sys/wait.h>

#include <cerrno>

namespace nanovm::agent {

void Children::watch(pid_t pid, ExitHandler handler) { handlers_[pid] = std::move(handler); }

void Children::forget(pid_t pid) { handlers_.erase(pid); }

int Children::reap() {
    int reaped = 0;
    for (;;) {
        int status = 0;
        const pid_t pid = ::waitpid(-1, &status, WNOHANG);
        if (pid < 0 && errno == EINTR) continue;
        if (pid <= 0) return reaped;
        ++reaped;
        auto it = handlers_.find(pid);
        if (it == handlers_.end()) continue;  // an orphan, or a forgotten command
        ExitHandler handler = std::move(it->second);
        handlers_.erase(it);
        handler(status);
    }
}

}  // namespace nanovm::agent
