// Termination signals through a signalfd (see termination_signals.hpp).
#include "api/vm/termination_signals.hpp"

#include <pthread.h>
#include <signal.h>
#include <sys/signalfd.h>

#include <cerrno>

#include "vmm/error.hpp"

namespace nanovm {

Fd block_termination_signals() {
    ::signal(SIGPIPE, SIG_IGN);  // a closed console pipe is an EPIPE, not a death
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGHUP);
    if (::pthread_sigmask(SIG_BLOCK, &set, nullptr) != 0) throw SysError("pthread_sigmask", EINVAL);
    Fd fd(::signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK));
    if (!fd) throw_errno("signalfd");
    return fd;
}

}  // namespace nanovm
