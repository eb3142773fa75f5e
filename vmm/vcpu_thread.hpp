// One host thread per vCPU, running KVM_RUN and dispatching exits, plus the shared
// control block through which a Machine pauses, resumes and stops them.
//
// Protocol (the base of pause, snapshot and fork):
//   - Requests (pause, exit) are flags in RunControl, changed under its mutex.
//   - After changing a flag, the requester kicks each thread (vmm/vcpu_kick.hpp).
//   - A vCPU thread clears immediate_exit, THEN checks the flags, THEN enters KVM_RUN:
//     a request made after the check finds immediate_exit set or the signal pending,
//     so KVM_RUN returns EINTR at once.
//   - A vCPU whose last exit was port I/O or MMIO does not park straight away: KVM
//     finishes such an exit only inside the next KVM_RUN (KVM API doc 5, the note
//     under KVM_EXIT_MMIO), so it enters KVM_RUN once more with immediate_exit set.
//     KVM completes the exit, then returns EINTR without running the guest. A paused
//     vCPU therefore has no half-done exit, and its saved registers are consistent.
//   - A thread that honours a request becomes quiescent (counted in
//     RunControl::quiescent) and waits on RunControl::changed.
#pragma once

#include <pthread.h>

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <thread>

#include "vmm/io_handler.hpp"
#include "vmm/stop_reason.hpp"
#include "vmm/vcpu.hpp"

namespace nanovm {

/// State shared by a Machine and its vCPU threads. Every field is guarded by `mutex`;
/// every change is announced on `changed`.
struct RunControl {
    std::mutex mutex;
    std::condition_variable changed;
    uint32_t vcpus = 0;             ///< number of vCPU threads
    bool exit_requested = false;    ///< threads leave their loop
    bool pause_requested = false;   ///< threads park until cleared
    uint32_t quiescent = 0;         ///< threads not in (and not about to enter) KVM_RUN
    uint32_t halted = 0;            ///< threads stopped by KVM_EXIT_HLT
    std::optional<StopReason> stop; ///< first reason to stop the machine

    /// Records `reason` unless one is already recorded; wakes waiters. Takes `mutex`.
    void request_stop(StopReason reason);
};

/// Runs one vCPU on its own thread until RunControl::exit_requested.
class VcpuThread {
public:
    /// Does not start the thread. `index` is the vCPU's index in its machine.
    VcpuThread(Vcpu& vcpu, uint32_t index, RunControl& control, PortIoHandler& pio, MmioHandler& mmio)
        : vcpu_(vcpu), index_(index), control_(control), pio_(pio), mmio_(mmio) {}
    VcpuThread(const VcpuThread&) = delete;
    VcpuThread& operator=(const VcpuThread&) = delete;
    ~VcpuThread();  ///< joins if still joinable (after the owner requested exit)

    /// Starts the thread. Throws std::system_error if it cannot be created.
    void start();
    /// Kicks the vCPU out of KVM_RUN (immediate_exit + signal). Any thread.
    void kick();
    /// Waits for the thread to end (after RunControl::exit_requested and a kick).
    void join();

private:
    void loop();
    void park_until_released(std::unique_lock<std::mutex>& lock, bool parked);

    Vcpu& vcpu_;
    uint32_t index_;
    RunControl& control_;
    PortIoHandler& pio_;
    MmioHandler& mmio_;
    std::thread thread_;
};

}  // namespace nanovm
