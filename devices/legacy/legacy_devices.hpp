// The legacy PC devices a Linux guest expects, put on an I/O port bus together:
// COM1 (8250 UART, 0x3f8, IRQ 4), the i8042 (0x60/0x64, reset), the CMOS RTC
// (0x70/0x71) and the nanovm control port (guest-init/protocol/control_port.hpp).
// Anything else on the ISA bus (POST port 0x80, absent hardware) reads as 0xff
// (devices/bus.hpp).
#pragma once

#include <functional>

#include "devices/bus.hpp"
#include "devices/irq_line.hpp"
#include "devices/legacy/cmos_rtc.hpp"
#include "devices/legacy/control_port.hpp"
#include "devices/legacy/i8042.hpp"
#include "devices/legacy/serial.hpp"

namespace nanovm {

/// Owns the legacy devices and registers them on `bus` (which must not outlive it;
/// neither moves nor copies).
class LegacyDevices {
public:
    /// `com1_irq` drives ISA IRQ 4; `console` receives COM1's output; `on_reset` runs
    /// when the guest resets the machine through the i8042.
    LegacyDevices(IoBus& bus, IrqLine& com1_irq, Serial::OutputSink console, std::function<void()> on_reset);
    LegacyDevices(const LegacyDevices&) = delete;
    LegacyDevices& operator=(const LegacyDevices&) = delete;

    Serial& com1() noexcept { return com1_; }
    I8042& i8042() noexcept { return i8042_; }
    CmosRtc& rtc() noexcept { return rtc_; }
    ControlPort& control_port() noexcept { return control_port_; }

private:
    Serial com1_;
    I8042 i8042_;
    CmosRtc rtc_;
    ControlPort control_port_;
};

}  // namespace nanovm
