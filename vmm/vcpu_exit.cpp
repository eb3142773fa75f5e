#include "vmm/vcpu_exit.hpp"

#include <span>
#include <string>

#include <fmt/format.h>

namespace nanovm {

namespace {

// RIP for a diagnostic; never throws (the vCPU may be in a state KVM refuses to read).
std::string rip_of(const Vcpu& vcpu) {
    try {
        return fmt::format("rip {:#x}", vcpu.regs().rip);
    } catch (...) {
        return "rip unknown";
    }
}

ExitOutcome stop(StopReason::Kind kind, uint32_t index, std::string detail) {
    return {ExitOutcome::Action::stop, StopReason{kind, index, std::move(detail)}};
}

std::string_view internal_suberror_name(uint32_t suberror) {
    switch (suberror) {
        case KVM_INTERNAL_ERROR_EMULATION: return "instruction emulation failed";
        case KVM_INTERNAL_ERROR_SIMUL_EX: return "simultaneous exceptions";
        case KVM_INTERNAL_ERROR_DELIVERY_EV: return "exit during event delivery";
        case KVM_INTERNAL_ERROR_UNEXPECTED_EXIT_REASON: return "unexpected exit reason";
        default: return "unknown suberror";
    }
}

ExitOutcome handle_io(kvm_run* run, PortIoHandler& pio) {
    const auto& io = run->io;
    auto* data = reinterpret_cast<uint8_t*>(run) + io.data_offset;
    for (uint32_t i = 0; i < io.count; ++i) {
        std::span<uint8_t> element(data + static_cast<size_t>(i) * io.size, io.size);
        if (io.direction == KVM_EXIT_IO_OUT)
            pio.pio_write(io.port, element);
        else
            pio.pio_read(io.port, element);
    }
    return {};
}

ExitOutcome handle_mmio(kvm_run* run, MmioHandler& mmio) {
    auto& m = run->mmio;
    const size_t len = m.len <= sizeof(m.data) ? m.len : sizeof(m.data);
    std::span<uint8_t> data(m.data, len);
    if (m.is_write)
        mmio.mmio_write(Gpa(m.phys_addr), data);
    else
        mmio.mmio_read(Gpa(m.phys_addr), data);
    return {};
}

}  // namespace

ExitOutcome handle_exit(Vcpu& vcpu, uint32_t index, PortIoHandler& pio, MmioHandler& mmio) {
    kvm_run* run = vcpu.run_data();
    switch (run->exit_reason) {
        case KVM_EXIT_IO: return handle_io(run, pio);
        case KVM_EXIT_MMIO: return handle_mmio(run, mmio);
        case KVM_EXIT_HLT: return {ExitOutcome::Action::halt, {}};
        case KVM_EXIT_INTR:
        case KVM_EXIT_IRQ_WINDOW_OPEN: return {};
        case KVM_EXIT_SHUTDOWN: return stop(StopReason::Kind::triple_fault, index, rip_of(vcpu));
        case KVM_EXIT_SYSTEM_EVENT:
            switch (run->system_event.type) {
                case KVM_SYSTEM_EVENT_SHUTDOWN: return stop(StopReason::Kind::guest_shutdown, index, "KVM_SYSTEM_EVENT_SHUTDOWN");
                case KVM_SYSTEM_EVENT_RESET: return stop(StopReason::Kind::reset, index, "KVM_SYSTEM_EVENT_RESET");
                case KVM_SYSTEM_EVENT_CRASH: return stop(StopReason::Kind::guest_crash, index, "KVM_SYSTEM_EVENT_CRASH");
                default:
                    return stop(StopReason::Kind::error, index,
                                fmt::format("unhandled KVM_SYSTEM_EVENT type {}", run->system_event.type));
            }
        case KVM_EXIT_FAIL_ENTRY:
            return stop(StopReason::Kind::error, index,
                        fmt::format("KVM_EXIT_FAIL_ENTRY: hardware entry failure reason {:#x} on host CPU {}, {}",
                                    run->fail_entry.hardware_entry_failure_reason, run->fail_entry.cpu,
                                    rip_of(vcpu)));
        case KVM_EXIT_INTERNAL_ERROR: {
            const auto& internal = run->internal;
            std::string detail = fmt::format("KVM_EXIT_INTERNAL_ERROR: suberror {} ({}), {}", internal.suberror,
                                             internal_suberror_name(internal.suberror), rip_of(vcpu));
            const uint32_t ndata = internal.ndata < 16 ? internal.ndata : 16;
            for (uint32_t i = 0; i < ndata; ++i) detail += fmt::format("{}{:#x}", i == 0 ? ", data " : " ", internal.data[i]);
            return stop(StopReason::Kind::error, index, std::move(detail));
        }
        default:
            return stop(StopReason::Kind::error, index,
                        fmt::format("unhandled KVM exit reason {}, {}", run->exit_reason, rip_of(vcpu)));
    }
}

}  // namespace nanovm
