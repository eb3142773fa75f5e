#include "vmm/vcpu_thread.hpp"

#include <exception>

#include "vmm/vcpu_exit.hpp"
#include "vmm/vcpu_kick.hpp"

namespace nanovm {

void RunControl::request_stop(StopReason reason) {
    std::lock_guard lock(mutex);
    if (!stop) stop = std::move(reason);
    changed.notify_all();
}

VcpuThread::~VcpuThread() {
    if (thread_.joinable()) thread_.join();
}

void VcpuThread::start() {
    install_vcpu_kick_handler();
    thread_ = std::thread([this] { loop(); });
}

void VcpuThread::kick() {
    if (thread_.joinable()) kick_vcpu(vcpu_.run_data(), thread_.native_handle());
}

void VcpuThread::join() {
    if (thread_.joinable()) thread_.join();
}

// Waits, counted as quiescent, until the thread may run again (never, if `parked`)
// or must exit.
void VcpuThread::park_until_released(std::unique_lock<std::mutex>& lock, bool parked) {
    ++control_.quiescent;
    control_.changed.notify_all();
    control_.changed.wait(lock, [&] { return control_.exit_requested || (!control_.pause_requested && !parked); });
    --control_.quiescent;
}

void VcpuThread::loop() {
    unblock_vcpu_kick_signal();
    kvm_run* run = vcpu_.run_data();
    bool parked = false;  // halted or stopped: never enters KVM_RUN again
    // The last exit was port I/O or MMIO that KVM finishes only when KVM_RUN is
    // entered again (an IN's value reaches RAX, RIP moves past an OUT): until then
    // the vCPU's registers are not a state to save (KVM API doc 5, "KVM_EXIT_IO").
    bool exit_unfinished = false;
    for (;;) {
        clear_vcpu_kick(run);  // before checking requests: see the protocol in the header
        {
            std::unique_lock lock(control_.mutex);
            if (control_.exit_requested) break;
            // Once a stop reason is recorded no vCPU runs guest code again (e.g. a
            // guest that keeps writing 0xFE to the i8042 after the first reset).
            if (control_.stop) parked = true;
            if (control_.pause_requested && !parked && exit_unfinished) {
                // Finish it without running a guest instruction: KVM completes the
                // exit, then sees immediate_exit and returns EINTR.
                run->immediate_exit = 1;
            } else if (control_.pause_requested || parked) {
                park_until_released(lock, parked);
                continue;
            }
        }
        try {
            exit_unfinished = false;
            if (!vcpu_.run()) continue;  // EINTR: a kick or another signal; re-check requests
            ExitOutcome outcome = handle_exit(vcpu_, index_, pio_, mmio_);
            switch (outcome.action) {
                case ExitOutcome::Action::resume:
                    exit_unfinished = run->exit_reason == KVM_EXIT_IO || run->exit_reason == KVM_EXIT_MMIO;
                    break;
                case ExitOutcome::Action::halt: {
                    parked = true;
                    std::lock_guard lock(control_.mutex);
                    if (++control_.halted == control_.vcpus && !control_.stop)
                        control_.stop = StopReason{StopReason::Kind::halted, {}, {}};
                    control_.changed.notify_all();
                    break;
                }
                case ExitOutcome::Action::stop:
                    parked = true;
                    control_.request_stop(std::move(outcome.reason));
                    break;
            }
        } catch (const std::exception& e) {
            parked = true;
            control_.request_stop(StopReason{StopReason::Kind::error, index_, e.what()});
        } catch (...) {
            parked = true;
            control_.request_stop(StopReason{StopReason::Kind::error, index_, "unknown exception"});
        }
    }
}

}  // namespace nanovm
