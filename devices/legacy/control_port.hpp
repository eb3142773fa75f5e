// The nanovm control port device (port and values:
// guest-init/protocol/control_port.hpp) and the rule that turns "how the machine
// stopped" + "what the guest announced" into the outcome `nanovm boot` reports.
#pragma once

#include <atomic>
#include <cstdint>
#include <string_view>

#include "devices/bus_device.hpp"
#include "guest-init/protocol/control_port.hpp"
#include "vmm/stop_reason.hpp"

namespace nanovm {

/// What the guest said its next reset means.
enum class Announcement { none, poweroff, reboot };

/// One byte at control_port::kPort: writes set the announcement, reads return
/// control_port::kSignature. Unknown values are ignored.
class ControlPort : public BusDevice {
public:
    static constexpr uint16_t kPortCount = 1;

    void read(uint64_t offset, std::span<uint8_t> data) override;
    void write(uint64_t offset, std::span<const uint8_t> data) override;
    /// The last announcement (none if never, or cleared).
    Announcement announcement() const noexcept { return announcement_.load(); }

private:
    std::atomic<Announcement> announcement_{Announcement::none};
};

/// How a guest's run ended, as `nanovm boot` reports it.
enum class GuestOutcome {
    poweroff,  ///< announced poweroff then reset, or KVM_SYSTEM_EVENT_SHUTDOWN
    reboot,    ///< announced reboot then reset
    crash,     ///< unannounced reset or triple fault, KVM_SYSTEM_EVENT_CRASH, all vCPUs halted
    stopped,   ///< the host stopped it (Machine::request_stop)
    error,     ///< the VMM failed (StopReason::Kind::error)
};

std::string_view to_string(GuestOutcome outcome);

/// Without ACPI every poweroff, reboot and panic arrives as a reset (i8042 or triple
/// fault); the announcement made just before tells which it was.
GuestOutcome guest_outcome(const StopReason& reason, Announcement announcement);

}  // namespace nanovm
