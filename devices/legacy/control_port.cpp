#include "devices/legacy/control_port.hpp"

namespace nanovm {

void ControlPort::read(uint64_t offset, std::span<uint8_t> data) {
    for (size_t i = 0; i < data.size(); ++i) data[i] = offset + i == 0 ? control_port::kSignature : 0xff;
}

void ControlPort::write(uint64_t offset, std::span<const uint8_t> data) {
    if (offset != 0 || data.empty()) return;
    switch (data[0]) {
        case control_port::kClear: announcement_ = Announcement::none; break;
        case control_port::kPoweroff: announcement_ = Announcement::poweroff; break;
        case control_port::kReboot: announcement_ = Announcement::reboot; break;
        default: break;
    }
}

std::string_view to_string(GuestOutcome outcome) {
    switch (outcome) {
        case GuestOutcome::poweroff: return "poweroff";
        case GuestOutcome::reboot: return "reboot";
        case GuestOutcome::crash: return "crash";
        case GuestOutcome::stopped: return "stopped";
        case GuestOutcome::error: return "error";
    }
    return "unknown";
}

GuestOutcome guest_outcome(const StopReason& reason, Announcement announcement) {
    switch (reason.kind) {
        case StopReason::Kind::reset:
        case StopReason::Kind::triple_fault:
            switch (announcement) {
                case Announcement::poweroff: return GuestOutcome::poweroff;
                case Announcement::reboot: return GuestOutcome::reboot;
                case Announcement::none: return GuestOutcome::crash;
            }
            return GuestOutcome::crash;
        case StopReason::Kind::guest_shutdown: return GuestOutcome::poweroff;
        case StopReason::Kind::guest_crash:
        case StopReason::Kind::halted: return GuestOutcome::crash;
        case StopReason::Kind::requested: return GuestOutcome::stopped;
        case StopReason::Kind::error: return GuestOutcome::error;
    }
    return GuestOutcome::error;
}

}  // namespace nanovm
