// Decoding one vCPU exit (kvm_run.exit_reason) into what the vCPU loop does next.
#pragma once

#include "vmm/io_handler.hpp"
#include "vmm/stop_reason.hpp"
#include "vmm/vcpu.hpp"

namespace nanovm {

/// What to do after an exit.
struct ExitOutcome {
    enum class Action {
        resume,  ///< handled: enter KVM_RUN again
        halt,    ///< KVM_EXIT_HLT: this vCPU waits (no in-kernel irqchip to wake it)
        stop,    ///< the machine must stop for `reason`
    };
    Action action = Action::resume;
    StopReason reason;  ///< meaningful for Action::stop
};

/// Handles the exit described by vcpu.run_data() after a successful KVM_RUN:
/// KVM_EXIT_IO goes to `pio` (each element of a string I/O), KVM_EXIT_MMIO to `mmio`,
/// KVM_EXIT_HLT halts, KVM_EXIT_SHUTDOWN / SYSTEM_EVENT / FAIL_ENTRY /
/// INTERNAL_ERROR / anything unknown stop the machine with details (exit data, RIP).
/// `index` is the vCPU's index in its machine, for messages. Exceptions thrown by
/// the handlers propagate.
ExitOutcome handle_exit(Vcpu& vcpu, uint32_t index, PortIoHandler& pio, MmioHandler& mmio);

}  // namespace nanovm
