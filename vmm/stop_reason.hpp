// Why a Machine stopped running.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace nanovm {

/// The first event that ended Machine::run().
struct StopReason {
    enum class Kind {
        requested,        ///< the host asked (Machine::request_stop from outside the guest)
        reset,            ///< the guest reset the machine through a device (i8042 0xFE) or
                          ///< KVM_SYSTEM_EVENT_RESET
        triple_fault,     ///< KVM_EXIT_SHUTDOWN: a triple fault (also Linux reboot=t)
        guest_shutdown,   ///< KVM_SYSTEM_EVENT_SHUTDOWN
        guest_crash,      ///< KVM_SYSTEM_EVENT_CRASH
        halted,           ///< every vCPU executed HLT (only without the in-kernel irqchip)
        error,            ///< the VMM failed: entry failure, KVM internal error, an ioctl
                          ///< or device failure, an unhandled exit. `detail` says which.
    };
    Kind kind = Kind::requested;
    std::optional<uint32_t> vcpu;  ///< the vCPU that reported it, if one did
    std::string detail;            ///< human-readable details, may be empty

    /// One line, e.g. "triple fault on vCPU 0" or "error on vCPU 1: KVM_RUN: Bad address".
    std::string describe() const;
};

/// "requested", "reset", "triple fault", ...
std::string_view to_string(StopReason::Kind kind);

}  // namespace nanovm
