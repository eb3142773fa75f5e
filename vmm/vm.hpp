// A KVM virtual machine: the VM fd and the VM-wide ioctls (memslots, in-kernel
// irqchip and PIT, interrupt lines, irqfd/ioeventfd, dirty log) plus vCPU creation.
// Source: Documentation/virt/kvm/api.rst ("VM ioctls"), Linux 6.1.
#pragma once

#include <linux/kvm.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "vmm/address.hpp"
#include "vmm/fd.hpp"
#include "vmm/guest_memory.hpp"
#include "vmm/kvm.hpp"
#include "vmm/vcpu.hpp"

namespace nanovm {

/// Where an ioeventfd listens: a port (PIO) or a guest-physical address (MMIO).
struct IoEventAddress {
    enum class Space { pio, mmio };
    Space space = Space::mmio;
    uint64_t addr = 0;  ///< port number or GPA
    uint32_t len = 0;   ///< access width in bytes (1, 2, 4, 8), or 0 = any width (MMIO only)
};

/// One KVM VM. Move-only; owns the VM fd. vCPUs it creates are independent objects
/// that must not outlive it.
class Vm {
public:
    /// Default GPA of the 3-page TSS region KVM needs on Intel (KVM_SET_TSS_ADDR).
    static constexpr uint64_t kTssAddr = 0xfffbd000;
    /// Default GPA of the identity-map page KVM needs on Intel (KVM_SET_IDENTITY_MAP_ADDR).
    static constexpr uint64_t kIdentityMapAddr = 0xfffbc000;

    /// KVM_CREATE_VM (default machine type). Throws SysError("KVM_CREATE_VM").
    explicit Vm(const Kvm& kvm);
    Vm(Vm&&) noexcept = default;
    Vm& operator=(Vm&&) noexcept = default;

    int fd() const noexcept { return fd_.get(); }
    /// KVM_CHECK_EXTENSION on the VM fd (answers for this VM; KVM_CAP_CHECK_EXTENSION_VM).
    int check_extension(long capability) const;

    /// KVM_SET_TSS_ADDR: 3 pages KVM uses for real-mode emulation on Intel.
    void set_tss_addr(uint64_t gpa = kTssAddr);
    /// KVM_SET_IDENTITY_MAP_ADDR: 1 page for the EPT identity map on Intel. Must be
    /// called before any vCPU is created.
    void set_identity_map_addr(uint64_t gpa = kIdentityMapAddr);
    /// KVM_CREATE_IRQCHIP: in-kernel PIC, IOAPIC and per-vCPU LAPICs. Before any vCPU.
    void create_irqchip();
    /// KVM_CREATE_PIT2 with KVM_PIT_SPEAKER_DUMMY (port 0x61 answered in the kernel).
    /// Needs the irqchip.
    void create_pit2();

    /// KVM_SET_USER_MEMORY_REGION. `flags`: KVM_MEM_LOG_DIRTY_PAGES, KVM_MEM_READONLY.
    /// size 0 deletes the slot.
    void set_user_memory_region(uint32_t slot, uint32_t flags, Gpa gpa, uint64_t size, Hva host);
    /// Registers every region of `memory` as its memslot (MemoryRegion::slot), with
    /// KVM_MEM_LOG_DIRTY_PAGES when `log_dirty_pages`.
    void map_memory(const GuestMemory& memory, bool log_dirty_pages);

    /// KVM_IRQ_LINE: sets the level of GSI `gsi` (ISA IRQ 0-15, IOAPIC pin 0-23).
    /// Needs the irqchip. An edge is a raise followed by a lower.
    void irq_line(uint32_t gsi, bool level);
    /// KVM_IRQFD: writes to `eventfd` inject an edge on `gsi`.
    void add_irqfd(int eventfd, uint32_t gsi);
    /// KVM_IRQFD with KVM_IRQFD_FLAG_DEASSIGN.
    void remove_irqfd(int eventfd, uint32_t gsi);
    /// KVM_IOEVENTFD: a guest write to `where` (matching `datamatch` if given) signals
    /// `eventfd` inside the kernel, without an exit to the VMM.
    void add_ioeventfd(int eventfd, IoEventAddress where, std::optional<uint64_t> datamatch = {});
    /// KVM_IOEVENTFD with KVM_IOEVENTFD_FLAG_DEASSIGN (same arguments as add).
    void remove_ioeventfd(int eventfd, IoEventAddress where, std::optional<uint64_t> datamatch = {});

    /// KVM_GET_DIRTY_LOG for `slot` of `slot_bytes`: one bit per 4 KiB page, page i of
    /// the slot is bit (i % 64) of word i / 64. Returns and clears the log.
    std::vector<uint64_t> get_dirty_log(uint32_t slot, uint64_t slot_bytes);

    // VM-wide state used by snapshot/ (KVM API doc sections of Linux 6.1's api.rst).
    /// KVM_GET_IRQCHIP (4.26) for chip_id KVM_IRQCHIP_PIC_MASTER, _PIC_SLAVE or _IOAPIC.
    kvm_irqchip irqchip(uint32_t chip_id) const;
    /// KVM_SET_IRQCHIP (4.27); chip.chip_id selects the chip.
    void set_irqchip(const kvm_irqchip& chip);
    kvm_pit_state2 pit2() const;               ///< KVM_GET_PIT2 (4.72)
    void set_pit2(const kvm_pit_state2& pit);  ///< KVM_SET_PIT2 (4.73)
    /// KVM_GET_CLOCK (4.29): kvmclock's current value in ns (clock), plus flags
    /// (KVM_CLOCK_TSC_STABLE, _REALTIME, _HOST_TSC) with realtime/host_tsc when set.
    kvm_clock_data clock() const;
    /// KVM_SET_CLOCK (4.30): sets kvmclock to clock.clock ns (adjusted for the
    /// realtime elapsed since clock.realtime if flags has KVM_CLOCK_REALTIME).
    void set_clock(const kvm_clock_data& clock);

    /// KVM_CREATE_VCPU with vCPU id (= APIC ID) `id`, and maps its kvm_run.
    Vcpu create_vcpu(uint32_t id);

private:
    Fd fd_;
    size_t vcpu_mmap_size_ = 0;
};

}  // namespace nanovm
