// PID 1's signal handling (see signals.hpp).
#include "guest-init/signals.hpp"

#include <time.h>

#include <cerrno>

namespace nanovm::guest_init {
namespace {
constexpr int kInitSignals[] = {SIGCHLD, SIGUSR1, SIGUSR2, SIGTERM, SIGINT};

void ignore_signal(int) {}
}  // namespace

sigset_t init_signal_set() {
    sigset_t set;
    sigemptyset(&set);
    for (int sig : kInitSignals) sigaddset(&set, sig);
    return set;
}

void block_init_signals() {
    struct sigaction sa {};
    sa.sa_handler = ignore_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    for (int sig : kInitSignals) sigaction(sig, &sa, nullptr);
    const sigset_t set = init_signal_set();
    sigprocmask(SIG_BLOCK, &set, nullptr);
}

int wait_for_signal(int timeout_ms) {
    const sigset_t set = init_signal_set();
    for (;;) {
        int sig;
        if (timeout_ms < 0) {
            sig = sigwaitinfo(&set, nullptr);
        } else {
            timespec ts{};
            ts.tv_sec = timeout_ms / 1000;
            ts.tv_nsec = static_cast<long>(timeout_ms % 1000) * 1000000L;
            sig = sigtimedwait(&set, nullptr, &ts);
        }
        if (sig > 0) return sig;
        if (errno == EAGAIN) return 0;
        // EINTR (a signal outside the set): wait again. (A timeout restarts in full;
        // callers use short timeouts against their own deadline.)
    }
}

void unblock_signals_in_child() {
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
}

}  // namespace nanovm::guest_init
