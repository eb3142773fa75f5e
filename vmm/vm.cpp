#include "vmm/vm.hpp"

#include <sys/mman.h>

#include <fmt/format.h>

#include "vmm/error.hpp"
#include "vmm/kvm_ioctl.hpp"

namespace nanovm {

using detail::checked_ioctl;

Vm::Vm(const Kvm& kvm)
    : fd_(checked_ioctl(kvm.fd(), KVM_CREATE_VM, 0UL, "KVM_CREATE_VM")), vcpu_mmap_size_(kvm.vcpu_mmap_size()) {}

int Vm::check_extension(long capability) const {
    return checked_ioctl(fd(), KVM_CHECK_EXTENSION, capability, "KVM_CHECK_EXTENSION(VM)");
}

void Vm::set_tss_addr(uint64_t gpa) {
    checked_ioctl(fd(), KVM_SET_TSS_ADDR, static_cast<unsigned long>(gpa), "KVM_SET_TSS_ADDR");
}

void Vm::set_identity_map_addr(uint64_t gpa) {
    const __u64 addr = gpa;
    checked_ioctl(fd(), KVM_SET_IDENTITY_MAP_ADDR, &addr, "KVM_SET_IDENTITY_MAP_ADDR");
}

void Vm::create_irqchip() { checked_ioctl(fd(), KVM_CREATE_IRQCHIP, 0UL, "KVM_CREATE_IRQCHIP"); }

void Vm::create_pit2() {
    kvm_pit_config config{};
    config.flags = KVM_PIT_SPEAKER_DUMMY;
    checked_ioctl(fd(), KVM_CREATE_PIT2, &config, "KVM_CREATE_PIT2");
}

void Vm::set_user_memory_region(uint32_t slot, uint32_t flags, Gpa gpa, uint64_t size, Hva host) {
    kvm_userspace_memory_region region{};
    region.slot = slot;
    region.flags = flags;
    region.guest_phys_addr = gpa.value;
    region.memory_size = size;
    region.userspace_addr = reinterpret_cast<uint64_t>(host.ptr);
    checked_ioctl(fd(), KVM_SET_USER_MEMORY_REGION, &region, "KVM_SET_USER_MEMORY_REGION");
}

void Vm::map_memory(const GuestMemory& memory, bool log_dirty_pages) {
    const uint32_t flags = log_dirty_pages ? KVM_MEM_LOG_DIRTY_PAGES : 0;
    for (const MemoryRegion& region : memory.regions())
        set_user_memory_region(region.slot, flags, region.gpa, region.size, Hva(region.host));
}

void Vm::irq_line(uint32_t gsi, bool level) {
    kvm_irq_level irq{};
    irq.irq = gsi;
    irq.level = level ? 1 : 0;
    checked_ioctl(fd(), KVM_IRQ_LINE, &irq, "KVM_IRQ_LINE");
}

void Vm::add_irqfd(int eventfd, uint32_t gsi) {
    kvm_irqfd irqfd{};
    irqfd.fd = static_cast<__u32>(eventfd);
    irqfd.gsi = gsi;
    checked_ioctl(fd(), KVM_IRQFD, &irqfd, "KVM_IRQFD");
}

void Vm::remove_irqfd(int eventfd, uint32_t gsi) {
    kvm_irqfd irqfd{};
    irqfd.fd = static_cast<__u32>(eventfd);
    irqfd.gsi = gsi;
    irqfd.flags = KVM_IRQFD_FLAG_DEASSIGN;
    checked_ioctl(fd(), KVM_IRQFD, &irqfd, "KVM_IRQFD(deassign)");
}

namespace {

kvm_ioeventfd make_ioeventfd(int eventfd, IoEventAddress where, std::optional<uint64_t> datamatch) {
    kvm_ioeventfd io{};
    io.fd = eventfd;
    io.addr = where.addr;
    io.len = where.len;
    if (where.space == IoEventAddress::Space::pio) io.flags |= KVM_IOEVENTFD_FLAG_PIO;
    if (datamatch) {
        io.flags |= KVM_IOEVENTFD_FLAG_DATAMATCH;
        io.datamatch = *datamatch;
    }
    return io;
}

}  // namespace

void Vm::add_ioeventfd(int eventfd, IoEventAddress where, std::optional<uint64_t> datamatch) {
    kvm_ioeventfd io = make_ioeventfd(eventfd, where, datamatch);
    checked_ioctl(fd(), KVM_IOEVENTFD, &io, "KVM_IOEVENTFD");
}

void Vm::remove_ioeventfd(int eventfd, IoEventAddress where, std::optional<uint64_t> datamatch) {
    kvm_ioeventfd io = make_ioeventfd(eventfd, where, datamatch);
    io.flags |= KVM_IOEVENTFD_FLAG_DEASSIGN;
    checked_ioctl(fd(), KVM_IOEVENTFD, &io, "KVM_IOEVENTFD(deassign)");
}

std::vector<uint64_t> Vm::get_dirty_log(uint32_t slot, uint64_t slot_bytes) {
    const uint64_t pages = (slot_bytes + kPageSize - 1) / kPageSize;
    std::vector<uint64_t> bitmap((pages + 63) / 64, 0);
    kvm_dirty_log log{};
    log.slot = slot;
    log.dirty_bitmap = bitmap.data();
    checked_ioctl(fd(), KVM_GET_DIRTY_LOG, &log, "KVM_GET_DIRTY_LOG");
    return bitmap;
}

Vcpu Vm::create_vcpu(uint32_t id) {
    Fd vcpu_fd(checked_ioctl(fd(), KVM_CREATE_VCPU, static_cast<unsigned long>(id), "KVM_CREATE_VCPU"));
    void* run = ::mmap(nullptr, vcpu_mmap_size_, PROT_READ | PROT_WRITE, MAP_SHARED, vcpu_fd.get(), 0);
    if (run == MAP_FAILED) throw_errno("mmap(kvm_run)");
    return Vcpu(id, std::move(vcpu_fd), static_cast<kvm_run*>(run), vcpu_mmap_size_);
}

kvm_irqchip Vm::irqchip(uint32_t chip_id) const {
    kvm_irqchip chip{};
    chip.chip_id = chip_id;
    checked_ioctl(fd(), KVM_GET_IRQCHIP, &chip, "KVM_GET_IRQCHIP");
    return chip;
}

void Vm::set_irqchip(const kvm_irqchip& chip) {
    checked_ioctl(fd(), KVM_SET_IRQCHIP, &chip, "KVM_SET_IRQCHIP");
}

kvm_pit_state2 Vm::pit2() const {
    kvm_pit_state2 pit{};
    checked_ioctl(fd(), KVM_GET_PIT2, &pit, "KVM_GET_PIT2");
    return pit;
}

void Vm::set_pit2(const kvm_pit_state2& pit) { checked_ioctl(fd(), KVM_SET_PIT2, &pit, "KVM_SET_PIT2"); }

kvm_clock_data Vm::clock() const {
    kvm_clock_data clock{};
    checked_ioctl(fd(), KVM_GET_CLOCK, &clock, "KVM_GET_CLOCK");
    return clock;
}

void Vm::set_clock(const kvm_clock_data& clock) {
    checked_ioctl(fd(), KVM_SET_CLOCK, &clock, "KVM_SET_CLOCK");
}

}  // namespace nanovm
