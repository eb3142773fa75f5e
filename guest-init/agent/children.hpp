// The agent's child processes: who gets told when which pid ends.
//
// The agent reaps every child it has, its own commands and the orphans it inherits
// as a child subreaper (PR_SET_CHILD_SUBREAPER), with waitpid(-1, WNOHANG) on each
// SIGCHLD (a signalfd in the event loop). In a guest it is a separate process forked
// by PID 1, so PID 1's own reaping (guest-init/reaper.hpp) never sees these children.
#pragma once

#include <sys/types.h>

#include <functional>
#include <unordered_map>

namespace nanovm::agent {

/// pid -> what to do when it ends. Single-threaded.
class Children {
public:
    /// Called with the wait status (WIFEXITED etc.).
    using ExitHandler = std::function<void(int status)>;

    /// Calls `handler` when `pid` is reaped.
    void watch(pid_t pid, ExitHandler handler);
    /// Forgets `pid`: it is reaped silently (no-op if not watched).
    void forget(pid_t pid);
    /// Reaps every child that has ended (waitpid(-1, WNOHANG) until none), calling
    /// the handlers of the watched ones. Returns how many were reaped.
    int reap();
    /// Watched pids.
    size_t size() const { return handlers_.size(); }

private:
    std::unordered_map<pid_t, ExitHandler> handlers_;
};

}  // namespace nanovm::agent
