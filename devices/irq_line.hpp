// An interrupt line a device drives, and its KVM implementation (KVM_IRQ_LINE on a
// GSI of the in-kernel PIC/IOAPIC). Devices see only IrqLine, so unit tests can
// drive them with a fake.
#pragma once

#include <cstdint>

#include "vmm/vm.hpp"

namespace nanovm {

/// One level-sensitive interrupt output. An edge is set_level(true) after false.
class IrqLine {
public:
    virtual ~IrqLine() = default;
    /// Drives the line high (asserted) or low. May throw SysError.
    virtual void set_level(bool high) = 0;
};

/// A GSI of a VM with the in-kernel irqchip (ISA IRQ n = GSI n on both the PIC and
/// the IOAPIC). Does not own the Vm.
class KvmIrqLine : public IrqLine {
public:
    KvmIrqLine(Vm& vm, uint32_t gsi) : vm_(vm), gsi_(gsi) {}
    void set_level(bool high) override { vm_.irq_line(gsi_, high); }
    uint32_t gsi() const noexcept { return gsi_; }

private:
    Vm& vm_;
    uint32_t gsi_;
};

}  // namespace nanovm
