// Reaping: PID 1 is the parent of every orphan and must collect every zombie.
#pragma once

#include <sys/types.h>

namespace nanovm::guest_init {

/// What one reaping pass found.
struct ReapResult {
    bool watched_exited = false;  ///< the `watched` pid was reaped in this pass
    int watched_status = 0;       ///< its wait status (WIFEXITED etc.)
    bool no_children = false;     ///< no children are left at all (ECHILD)
};

/// Collects every child that has ended (waitpid(-1, WNOHANG) until none is left
/// to collect), without blocking. Call on each SIGCHLD.
ReapResult reap_children(pid_t watched = -1);

}  // namespace nanovm::guest_init
