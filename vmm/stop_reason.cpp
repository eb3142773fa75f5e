#include "vmm/stop_reason.hpp"

#include <fmt/format.h>

namespace nanovm {

std::string_view to_string(StopReason::Kind kind) {
    switch (kind) {
        case StopReason::Kind::requested: return "stop requested";
        case StopReason::Kind::reset: return "reset";
        case StopReason::Kind::triple_fault: return "triple fault";
        case StopReason::Kind::guest_shutdown: return "guest shutdown";
        case StopReason::Kind::guest_crash: return "guest crash";
        case StopReason::Kind::halted: return "all vCPUs halted";
        case StopReason::Kind::error: return "error";
    }
    return "unknown";
}

std::string StopReason::describe() const {
    std::string text(to_string(kind));
    if (vcpu) text += fmt::format(" on vCPU {}", *vcpu);
    if (!detail.empty()) text += ": " + detail;
    return text;
}

}  // namespace nanovm
