#include "devices/legacy/legacy_devices.hpp"

namespace nanovm {

LegacyDevices::LegacyDevices(IoBus& bus, IrqLine& com1_irq, Serial::OutputSink console,
                             std::function<void()> on_reset)
    : com1_(com1_irq, std::move(console)), i8042_(std::move(on_reset)) {
    bus.add(Serial::kCom1Base, Serial::kRegisterCount, com1_, "COM1");
    bus.add(I8042::kBase, I8042::kPortCount, i8042_, "i8042");
    bus.add(CmosRtc::kBase, CmosRtc::kPortCount, rtc_, "CMOS RTC");
    bus.add(control_port::kPort, ControlPort::kPortCount, control_port_, "nanovm control port");
}

}  // namespace nanovm
