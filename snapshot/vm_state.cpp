#include "snapshot/vm_state.hpp"

#include <cstring>
#include <utility>

#include <fmt/format.h>

#include "snapshot/msr_list.hpp"
#include "snapshot/snapshot_error.hpp"

namespace nanovm::snapshot {

namespace {

constexpr size_t kLegacyXsaveBytes = 4096;

// The XSAVE area size KVM uses for this VM: KVM_CHECK_EXTENSION(KVM_CAP_XSAVE2)
// answers it in bytes (KVM API doc 4.134; 0 before Linux 5.17 = the legacy 4096).
size_t kvm_xsave_bytes(Vm& vm) {
    const int size = vm.check_extension(KVM_CAP_XSAVE2);
    return size > static_cast<int>(kLegacyXsaveBytes) ? static_cast<size_t>(size) : kLegacyXsaveBytes;
}

// The KVM flavour of this host, read once per process (restores are timed).
KvmFlavour host_flavour() {
    static const KvmFlavour flavour = detect_kvm_flavour();
    return flavour;
}

// Busy-TSS descriptor types and their available forms (SDM Vol. 3A 3.5, table 3-2).
constexpr uint8_t kTss16Busy = 3;
constexpr uint8_t kTss64Busy = 11;
constexpr uint8_t kTssBusyBit = 0x2;

}  // namespace

kvm_sregs sregs_for_restore(const kvm_sregs& saved, KvmFlavour flavour) {
    kvm_sregs sregs = saved;
    if (flavour == KvmFlavour::svm && (sregs.tr.type == kTss64Busy || sregs.tr.type == kTss16Busy))
        sregs.tr.type = static_cast<uint8_t>(sregs.tr.type & ~kTssBusyBit);
    return sregs;
}

VmState capture_vm_state(const Kvm& kvm, Machine& machine) {
    VmState state;
    state.machine = machine_shape(machine);
    Vm& vm = machine.vm();
    const size_t xsave_bytes = kvm_xsave_bytes(vm);
    const std::vector<uint32_t> msr_indices = saveable_msrs(kvm, machine.vcpu(0));

    for (uint32_t i = 0; i < machine.vcpu_count(); ++i) {
        Vcpu& vcpu = machine.vcpu(i);
        VcpuState v;
        v.mp_state = vcpu.mp_state();
        v.regs = vcpu.regs();
        v.sregs = vcpu.sregs();
        v.xsave = vcpu.xsave(xsave_bytes);
        v.xcrs = vcpu.xcrs();
        v.debugregs = vcpu.debugregs();
        if (machine.config().irqchip) v.lapic = vcpu.lapic();
        v.msrs.resize(msr_indices.size());
        for (size_t m = 0; m < msr_indices.size(); ++m) v.msrs[m].index = msr_indices[m];
        vcpu.get_msrs(v.msrs);
        v.events = vcpu.vcpu_events();
        v.cpuid = vcpu.cpuid2();
        state.vcpus.push_back(std::move(v));
    }
    if (machine.config().irqchip) {
        IrqchipState chip;
        chip.pit = vm.pit2();
        chip.pic_master = vm.irqchip(KVM_IRQCHIP_PIC_MASTER);
        chip.pic_slave = vm.irqchip(KVM_IRQCHIP_PIC_SLAVE);
        chip.ioapic = vm.irqchip(KVM_IRQCHIP_IOAPIC);
        state.irqchip = chip;
    }
    state.clock = vm.clock();
    // Paused with its clock held (a sleep, a warm VM): the guest's time stands at the
    // held instant, and its restores go on from there, not from now.
    if (const auto held = machine.held_clock()) state.clock.clock = *held;
    return state;
}

MachineInfo machine_shape(const Machine& machine) {
    MachineInfo shape;
    shape.vcpus = machine.vcpu_count();
    shape.irqchip = machine.config().irqchip ? 1 : 0;
    shape.ram_bytes = machine.memory().ram_bytes();
    return shape;
}

MachineConfig restored_machine_config(const MachineInfo& shape) {
    MachineConfig config;
    config.vcpus = shape.vcpus;
    config.irqchip = shape.irqchip != 0;
    config.log_dirty_pages = true;
    return config;
}

std::string describe_shape(const MachineInfo& shape) {
    return fmt::format("{} vCPUs, irqchip {}, {} MiB", shape.vcpus, shape.irqchip ? "on" : "off",
                       shape.ram_bytes / MiB);
}

bool same_shape(const MachineInfo& a, const MachineInfo& b) {
    return a.vcpus == b.vcpus && (a.irqchip != 0) == (b.irqchip != 0) && a.ram_bytes == b.ram_bytes;
}

void prepare_vm_state_restore() { (void)host_flavour(); }

std::unique_ptr<Machine> make_restored_machine(const Kvm& kvm, GuestMemory memory, const VmState& state) {
    auto machine = std::make_unique<Machine>(kvm, std::move(memory), restored_machine_config(state.machine));
    restore_vm_state(*machine, state);
    return machine;
}

void restore_vm_state(Machine& machine, const VmState& state) {
    const MachineInfo& info = state.machine;
    if (!same_shape(info, machine_shape(machine)))
        throw SnapshotError(fmt::format("vm.state: the snapshot's machine ({}) does not match the target ({})",
                                        describe_shape(info), describe_shape(machine_shape(machine))));
    if (state.vcpus.size() != info.vcpus) throw SnapshotError("vm.state: vCPU count and vCPU states disagree");
    Vm& vm = machine.vm();
    // VM-wide first, in the order of Firecracker's Vm::restore_state
    // (src/vmm/src/vstate/vm.rs): PIT, clock, then the three irqchips.
    if (state.irqchip) {
        vm.set_pit2(state.irqchip->pit);
    }
    kvm_clock_data clock{};
    clock.clock = state.clock.clock;
    clock.flags = 0;  // no KVM_CLOCK_REALTIME: continue from the snapshot instant
    vm.set_clock(clock);
    if (state.irqchip) {
        vm.set_irqchip(state.irqchip->pic_master);
        vm.set_irqchip(state.irqchip->pic_slave);
        vm.set_irqchip(state.irqchip->ioapic);
    }
    const size_t xsave_bytes = kvm_xsave_bytes(vm);
    const KvmFlavour flavour = host_flavour();
    for (uint32_t i = 0; i < machine.vcpu_count(); ++i) {
        const VcpuState& v = state.vcpus[i];
        Vcpu& vcpu = machine.vcpu(i);
        if (!v.cpuid.empty()) vcpu.set_cpuid2(v.cpuid);
        vcpu.set_mp_state(v.mp_state.mp_state);
        vcpu.set_regs(v.regs);
        vcpu.set_sregs(sregs_for_restore(v.sregs, flavour));
        if (v.xsave.size() > xsave_bytes)
            throw SnapshotError(fmt::format("vm.state: vcpu {} xsave: {} bytes, this KVM takes at most {}", i,
                                            v.xsave.size(), xsave_bytes));
        std::vector<uint8_t> area = v.xsave;
        area.resize(xsave_bytes, 0);  // KVM_SET_XSAVE reads KVM's whole area size
        vcpu.set_xsave(area);
        vcpu.set_xcrs(v.xcrs);
        vcpu.set_debugregs(v.debugregs);
        if (v.lapic) vcpu.set_lapic(*v.lapic);
        vcpu.set_msrs(v.msrs);
        vcpu.set_vcpu_events(v.events);
    }
}

}  // namespace nanovm::snapshot
