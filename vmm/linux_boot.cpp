#include "vmm/linux_boot.hpp"

#include <cstring>

#include <fmt/format.h>

#include "vmm/error.hpp"
#include "vmm/x86/boot.hpp"

namespace nanovm {

namespace {

// Local APIC register offsets and LVT delivery modes (Intel SDM vol. 3, 10.5.1).
constexpr size_t kApicLvtLint0 = 0x350;
constexpr size_t kApicLvtLint1 = 0x360;
constexpr uint32_t kApicDeliveryModeMask = 0x700;
constexpr uint32_t kApicModeNmi = 0x4;
constexpr uint32_t kApicModeExtInt = 0x7;

uint32_t lapic_reg(const kvm_lapic_state& lapic, size_t offset) {
    uint32_t value;
    std::memcpy(&value, lapic.regs + offset, sizeof(value));
    return value;
}

void set_lapic_reg(kvm_lapic_state& lapic, size_t offset, uint32_t value) {
    std::memcpy(lapic.regs + offset, &value, sizeof(value));
}

uint32_t with_delivery_mode(uint32_t lvt, uint32_t mode) { return (lvt & ~kApicDeliveryModeMask) | (mode << 8); }

// Virtual-wire mode on the BSP: the PIC's interrupts arrive through LINT0, NMIs
// through LINT1, until the kernel switches to the IOAPIC.
void set_lint(Vcpu& vcpu) {
    kvm_lapic_state lapic = vcpu.lapic();
    set_lapic_reg(lapic, kApicLvtLint0, with_delivery_mode(lapic_reg(lapic, kApicLvtLint0), kApicModeExtInt));
    set_lapic_reg(lapic, kApicLvtLint1, with_delivery_mode(lapic_reg(lapic, kApicLvtLint1), kApicModeNmi));
    vcpu.set_lapic(lapic);
}

// KVM emulates the TSC-deadline timer in its in-kernel LAPIC but does not list it in
// KVM_GET_SUPPORTED_CPUID: the VMM sets CPUID.1:ECX[24] when KVM_CAP_TSC_DEADLINE_TIMER
// is there (QEMU and Firecracker do the same). Without it Linux calibrates the LAPIC
// timer against the PIT, which costs ~1 s under emulation and can fail.
constexpr uint32_t kCpuid1EcxTscDeadline = 1u << 24;

void enable_tsc_deadline(std::vector<kvm_cpuid_entry2>& cpuid) {
    for (kvm_cpuid_entry2& entry : cpuid)
        if (entry.function == 1) entry.ecx |= kCpuid1EcxTscDeadline;
}

// KVM_SET_FPU sets the x87 state and XMM registers; 6.1 ignores its mxcsr field, which
// a new vCPU already holds at its reset value 0x1f80 (set here anyway, for a KVM that
// honours it).
kvm_fpu boot_fpu() {
    kvm_fpu fpu{};
    fpu.fcw = 0x37f;     // x87 default control word (FNINIT)
    fpu.mxcsr = 0x1f80;  // SSE default: all exceptions masked
    return fpu;
}

}  // namespace

LinuxLayout load_linux(GuestMemory& memory, BootImage kernel, BootImage initrd, std::string_view cmdline,
                       uint32_t vcpus) {
    // Messages name the file: "<path>: kernel image: not a bzImage or ELF".
    const auto named = [](std::string_view name, const Error& e) { return Error(fmt::format("{}: {}", name, e.what())); };
    x86::LoadedKernel loaded;
    try {
        loaded = x86::load_kernel(memory, kernel.bytes);
    } catch (const Error& e) {
        throw named(kernel.name, e);
    }
    LinuxLayout layout;
    layout.entry = loaded.entry;
    layout.vcpus = vcpus;
    layout.kernel_start = loaded.load_start;
    layout.kernel_end = loaded.load_end;
    if (!initrd.bytes.empty()) {
        try {
            layout.initrd = x86::load_initrd(memory, loaded, initrd.bytes);
        } catch (const Error& e) {
            throw named(initrd.name, e);
        }
        layout.initrd_size = initrd.bytes.size();
    }
    x86::write_boot_params(memory, loaded, cmdline, layout.initrd, layout.initrd_size);
    layout.cr3 = x86::write_identity_page_tables(memory);
    x86::write_gdt(memory);
    x86::write_mptable(memory, vcpus);
    return layout;
}

void setup_linux_vcpus(Machine& machine, const Kvm& kvm, const LinuxLayout& layout) {
    if (!machine.config().irqchip) throw Error("booting Linux needs the in-kernel irqchip");
    if (machine.vcpu_count() != layout.vcpus)
        throw Error(fmt::format("the MP table describes {} vCPUs, the machine has {}", layout.vcpus,
                                machine.vcpu_count()));
    std::vector<kvm_cpuid_entry2> supported = kvm.supported_cpuid();
    if (kvm.check_extension(KVM_CAP_TSC_DEADLINE_TIMER) > 0) enable_tsc_deadline(supported);
    const std::vector<kvm_msr_entry> msrs = x86::boot_msrs();
    for (uint32_t i = 0; i < machine.vcpu_count(); ++i) {
        Vcpu& vcpu = machine.vcpu(i);
        std::vector<kvm_cpuid_entry2> cpuid = supported;
        x86::patch_cpuid(cpuid, i, machine.vcpu_count());
        vcpu.set_cpuid2(cpuid);
        vcpu.set_msrs(msrs);
        if (i == 0) {
            set_lint(vcpu);
            kvm_sregs sregs = vcpu.sregs();
            x86::setup_long_mode_sregs(sregs, layout.cr3);
            vcpu.set_sregs(sregs);
            vcpu.set_regs(x86::boot_regs(layout.entry));
            vcpu.set_fpu(boot_fpu());
            vcpu.set_mp_state(KVM_MP_STATE_RUNNABLE);
        } else {
            vcpu.set_mp_state(KVM_MP_STATE_UNINITIALIZED);
        }
    }
}

}  // namespace nanovm
