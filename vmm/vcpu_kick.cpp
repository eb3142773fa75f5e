#include "vmm/vcpu_kick.hpp"

#include <signal.h>

#include <atomic>
#include <mutex>

#include "vmm/error.hpp"

namespace nanovm {

namespace {

void on_kick(int) {}  // only there so that the signal interrupts KVM_RUN

}  // namespace

int vcpu_kick_signal() { return SIGRTMIN; }

void install_vcpu_kick_handler() {
    static std::once_flag once;
    std::call_once(once, [] {
        struct sigaction action {};
        action.sa_handler = on_kick;
        sigemptyset(&action.sa_mask);
        action.sa_flags = 0;  // no SA_RESTART: KVM_RUN must return EINTR
        if (::sigaction(vcpu_kick_signal(), &action, nullptr) != 0) throw_errno("sigaction(vCPU kick signal)");
    });
}

void unblock_vcpu_kick_signal() {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, vcpu_kick_signal());
    ::pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
}

void kick_vcpu(kvm_run* run, pthread_t thread) {
    std::atomic_ref<__u8>(run->immediate_exit).store(1);
    ::pthread_kill(thread, vcpu_kick_signal());
}

void clear_vcpu_kick(kvm_run* run) { std::atomic_ref<__u8>(run->immediate_exit).store(0); }

}  // namespace nanovm
