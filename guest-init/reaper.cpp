// Zombie reaping for PID 1 (see reaper.hpp).
#include "guest-init/reaper.hpp"

#include <sys/wait.h>

#include <cerrno>

namespace nanovm::guest_init {

ReapResult reap_children(pid_t watched) {
    ReapResult result;
    for (;;) {
        int status = 0;
        const pid_t pid = ::waitpid(-1, &status, WNOHANG);
        if (pid > 0) {
            if (pid == watched) {
                result.watched_exited = true;
                result.watched_status = status;
            }
            continue;
        }
        if (pid < 0 && errno == EINTR) continue;
        if (pid < 0 && errno == ECHILD) result.no_children = true;
        return result;  // 0: children left, none ended yet
    }
}

}  // namespace nanovm::guest_init
