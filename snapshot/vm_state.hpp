// The complete KVM state of a paused Machine: per vCPU registers, sregs, XSAVE,
// XCRs, debug registers, MSRs (TSC and kvmclock included), LAPIC, vCPU events, MP
// state and CPUID; per VM the PICs, IOAPIC, PIT and kvmclock. Captured from a
// paused (or not yet running) Machine, restored into a fresh Machine of the same
// shape before it runs, and stored as the sections of a vm.state file
// (snapshot/state_file.hpp). Device state is not part of it yet.
#pragma once

#include <linux/kvm.h>

#include <cstdint>
#include <optional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "vmm/kvm.hpp"
#include "vmm/kvm_flavour.hpp"
#include "vmm/machine.hpp"

namespace nanovm::snapshot {

/// The shape a restore target must have. Stored as the "machine" section.
struct MachineInfo {
    uint32_t vcpus = 0;     ///< vCPU count, 1..kMaxVcpus
    uint32_t irqchip = 0;   ///< 1 = in-kernel irqchip + PIT (MachineConfig::irqchip)
    uint64_t ram_bytes = 0; ///< guest RAM, bytes (GuestMemory::ram_bytes)
};
static_assert(sizeof(MachineInfo) == 16);

/// One vCPU's KVM state (KVM API doc sections of Linux 6.1's api.rst in comments).
struct VcpuState {
    kvm_mp_state mp_state{};           ///< 4.38 KVM_GET_MP_STATE
    kvm_regs regs{};                   ///< 4.11 KVM_GET_REGS
    kvm_sregs sregs{};                 ///< 4.13 KVM_GET_SREGS
    std::vector<uint8_t> xsave;        ///< 4.42 / 4.134 KVM_GET_XSAVE(2), >= 4096 bytes
    kvm_xcrs xcrs{};                   ///< 4.44 KVM_GET_XCRS
    kvm_debugregs debugregs{};         ///< 4.33 KVM_GET_DEBUGREGS
    std::optional<kvm_lapic_state> lapic;  ///< 4.57 KVM_GET_LAPIC (with the irqchip only)
    std::vector<kvm_msr_entry> msrs;   ///< 4.18 KVM_GET_MSRS, snapshot/msr_list.hpp
    kvm_vcpu_events events{};          ///< 4.31 KVM_GET_VCPU_EVENTS
    std::vector<kvm_cpuid_entry2> cpuid;  ///< KVM_GET_CPUID2 (not in api.rst; may be empty)
};

/// The irqchip and PIT (present when MachineInfo::irqchip).
struct IrqchipState {
    kvm_irqchip pic_master{};  ///< 4.26 KVM_GET_IRQCHIP, KVM_IRQCHIP_PIC_MASTER
    kvm_irqchip pic_slave{};   ///< KVM_IRQCHIP_PIC_SLAVE
    kvm_irqchip ioapic{};      ///< KVM_IRQCHIP_IOAPIC
    kvm_pit_state2 pit{};      ///< 4.72 KVM_GET_PIT2
};

struct VmState {
    MachineInfo machine;
    std::vector<VcpuState> vcpus;      ///< index = vCPU index = vCPU id
    std::optional<IrqchipState> irqchip;
    kvm_clock_data clock{};            ///< 4.29 KVM_GET_CLOCK, ns
    /// The "devices" section: JSON text made by the device owner (empty: none). Not
    /// captured by capture_vm_state; the caller fills it while the VM is paused.
    std::string devices;
};

/// Reads the whole state of `machine`, which must be paused (Machine::pause) or not
/// running: vCPU ioctls from this thread must not race KVM_RUN. Order per vCPU as
/// Firecracker's KvmVcpu::save_state (src/vmm/src/vstate/vcpu/x86_64.rs): MP state
/// first (KVM_GET_MP_STATE runs kvm_apic_accept_events, which may change LAPIC
/// state), then regs, sregs, xsave, xcrs, debugregs, LAPIC, MSRs, and vCPU events
/// last. Throws SysError naming the ioctl, or Error naming an unreadable MSR.
VmState capture_vm_state(const Kvm& kvm, Machine& machine);

/// Loads `state` into `machine`, a freshly created Machine of the same shape that
/// has not run yet. VM first (PIT, clock, irqchip), then each vCPU in the order of
/// Firecracker's KvmVcpu::restore_state: CPUID, MP state, regs, sregs (which also
/// restores the APIC base), xsave, xcrs, debugregs, LAPIC (after sregs), MSRs (after
/// the LAPIC: TSC_DEADLINE only sticks on a configured LAPIC), vCPU events last
/// (KVM_SET_REGS clears pending exceptions that KVM_SET_VCPU_EVENTS restores).
/// kvmclock is set with flags 0: the guest's clock continues from the snapshot
/// instant (the guest agent steps wall time afterwards; KVM API doc 4.30). Throws
/// SnapshotError if the shapes differ, SysError/Error naming the failing ioctl/MSR.
void restore_vm_state(Machine& machine, const VmState& state);

/// `machine`'s shape: vCPU count, irqchip, RAM bytes.
MachineInfo machine_shape(const Machine& machine);

/// The MachineConfig a restored (or fork standby) machine of `shape` gets: its vCPUs
/// and irqchip, memslots that log dirty pages (so it can be snapshotted again).
MachineConfig restored_machine_config(const MachineInfo& shape);

/// "N vCPUs, irqchip on|off, M MiB", for messages.
std::string describe_shape(const MachineInfo& shape);

/// Whether two shapes are the same machine (irqchip compared as on/off).
bool same_shape(const MachineInfo& a, const MachineInfo& b);

/// Warms what restore_vm_state looks up about this host once per process (the KVM
/// flavour), so that a process made ahead of a restore (a fork standby) pays for it
/// before the restore is timed.
void prepare_vm_state_restore();

/// A new Machine shaped as `state` says (vCPUs, irqchip; memslots log dirty pages,
/// so it can be snapshotted again) over `memory`, with `state` loaded
/// (restore_vm_state); it has not run yet. Throws as Machine's constructor and
/// restore_vm_state do.
std::unique_ptr<Machine> make_restored_machine(const Kvm& kvm, GuestMemory memory, const VmState& state);

/// `saved` as KVM_SET_SREGS should get it on a host of `flavour`. On SVM the loaded
/// TR goes back with the available-TSS type (9 for a 64-bit TSS, 1 for a 16-bit one)
/// where KVM_GET_SREGS said busy (11, 3): KVM's svm_get_segment reports TR busy
/// whatever the VMCB holds, because SVM does not keep that bit (arch/x86/kvm/svm/svm.c,
/// "the busy flag in the tr selector isn't exposed"), so the VMCB of a guest that ran
/// LTR holds the available type. QEMU's model of SVM (our test host) checks for
/// exactly that type on every user-mode port access through the TSS I/O bitmap
/// (target/i386 check_io) and raised #GP on ioperm()+out in every restored guest
/// until this. Long mode has no task switches, so nothing else reads the bit. VMX is
/// left alone: its VM-entry checks require the busy type (SDM 26.3.1.2).
kvm_sregs sregs_for_restore(const kvm_sregs& saved, KvmFlavour flavour);

/// The vm.state sections of `state` (snapshot/state_file.hpp), as a whole file.
std::vector<uint8_t> encode_vm_state(const VmState& state);
/// Parses and validates a vm.state file: every section's size, every required
/// section present exactly once, vCPU indices in range, chip ids matching. Throws
/// SnapshotError naming `file_name` and the part.
VmState decode_vm_state(std::span<const uint8_t> file, std::string_view file_name);

}  // namespace nanovm::snapshot
