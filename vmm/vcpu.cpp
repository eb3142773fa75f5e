#include "vmm/vcpu.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include <fmt/format.h>

#include "vmm/error.hpp"
#include "vmm/kvm_abi.hpp"
#include "vmm/kvm_ioctl.hpp"

namespace nanovm {

using detail::checked_ioctl;

Vcpu::Vcpu(Vcpu&& other) noexcept
    : id_(other.id_),
      fd_(std::move(other.fd_)),
      run_(std::exchange(other.run_, nullptr)),
      run_size_(std::exchange(other.run_size_, 0)) {}

Vcpu& Vcpu::operator=(Vcpu&& other) noexcept {
    if (this != &other) {
        unmap();
        id_ = other.id_;
        fd_ = std::move(other.fd_);
        run_ = std::exchange(other.run_, nullptr);
        run_size_ = std::exchange(other.run_size_, 0);
    }
    return *this;
}

Vcpu::~Vcpu() { unmap(); }

void Vcpu::unmap() noexcept {
    if (run_) ::munmap(run_, run_size_);
    run_ = nullptr;
}

bool Vcpu::run() {
    if (::ioctl(fd(), KVM_RUN, 0UL) == 0) return true;
    // EINTR: a signal or immediate_exit. EAGAIN: a vCPU waiting in
    // KVM_MP_STATE_UNINITIALIZED woke up (INIT/SIPI or a spurious wake-up): run again.
    if (errno == EINTR || errno == EAGAIN) return false;
    throw_errno("KVM_RUN");
}

kvm_regs Vcpu::regs() const {
    kvm_regs regs{};
    checked_ioctl(fd(), KVM_GET_REGS, &regs, "KVM_GET_REGS");
    return regs;
}

void Vcpu::set_regs(const kvm_regs& regs) { checked_ioctl(fd(), KVM_SET_REGS, &regs, "KVM_SET_REGS"); }

kvm_sregs Vcpu::sregs() const {
    kvm_sregs sregs{};
    checked_ioctl(fd(), KVM_GET_SREGS, &sregs, "KVM_GET_SREGS");
    return sregs;
}

void Vcpu::set_sregs(const kvm_sregs& sregs) { checked_ioctl(fd(), KVM_SET_SREGS, &sregs, "KVM_SET_SREGS"); }

kvm_fpu Vcpu::fpu() const {
    kvm_fpu fpu{};
    checked_ioctl(fd(), KVM_GET_FPU, &fpu, "KVM_GET_FPU");
    return fpu;
}

void Vcpu::set_fpu(const kvm_fpu& fpu) { checked_ioctl(fd(), KVM_SET_FPU, &fpu, "KVM_SET_FPU"); }

void Vcpu::get_msrs(std::span<kvm_msr_entry> entries) const {
    if (entries.empty()) return;
    kvm_abi::FlexBuffer<kvm_abi::MsrsHeader, kvm_msr_entry> msrs(entries.size());
    msrs.set_header({static_cast<uint32_t>(entries.size()), 0});
    msrs.set_entries(entries);
    const int done = checked_ioctl(fd(), kvm_abi::kGetMsrs, msrs.data(), "KVM_GET_MSRS");
    if (static_cast<size_t>(done) < entries.size())
        throw Error(fmt::format("KVM_GET_MSRS: MSR {:#x} cannot be read", entries[static_cast<size_t>(done)].index));
    const std::vector<kvm_msr_entry> read = msrs.entries(entries.size());
    std::copy(read.begin(), read.end(), entries.begin());
}

void Vcpu::set_msrs(std::span<const kvm_msr_entry> entries) {
    if (entries.empty()) return;
    kvm_abi::FlexBuffer<kvm_abi::MsrsHeader, kvm_msr_entry> msrs(entries.size());
    msrs.set_header({static_cast<uint32_t>(entries.size()), 0});
    msrs.set_entries(entries);
    const int done = checked_ioctl(fd(), kvm_abi::kSetMsrs, msrs.data(), "KVM_SET_MSRS");
    if (static_cast<size_t>(done) < entries.size()) {
        const kvm_msr_entry& bad = entries[static_cast<size_t>(done)];
        throw Error(fmt::format("KVM_SET_MSRS: MSR {:#x} rejected (value {:#x})", bad.index, bad.data));
    }
}

void Vcpu::set_cpuid2(std::span<const kvm_cpuid_entry2> entries) {
    kvm_abi::FlexBuffer<kvm_abi::Cpuid2Header, kvm_cpuid_entry2> cpuid(entries.size());
    cpuid.set_header({static_cast<uint32_t>(entries.size()), 0});
    cpuid.set_entries(entries);
    checked_ioctl(fd(), kvm_abi::kSetCpuid2, cpuid.data(), "KVM_SET_CPUID2");
}

kvm_lapic_state Vcpu::lapic() const {
    kvm_lapic_state lapic{};
    checked_ioctl(fd(), KVM_GET_LAPIC, &lapic, "KVM_GET_LAPIC");
    return lapic;
}

void Vcpu::set_lapic(const kvm_lapic_state& lapic) { checked_ioctl(fd(), KVM_SET_LAPIC, &lapic, "KVM_SET_LAPIC"); }

kvm_mp_state Vcpu::mp_state() const {
    kvm_mp_state state{};
    checked_ioctl(fd(), KVM_GET_MP_STATE, &state, "KVM_GET_MP_STATE");
    return state;
}

void Vcpu::set_mp_state(uint32_t state) {
    kvm_mp_state mp{};
    mp.mp_state = state;
    checked_ioctl(fd(), KVM_SET_MP_STATE, &mp, "KVM_SET_MP_STATE");
}

std::vector<kvm_cpuid_entry2> Vcpu::cpuid2() const {
    // E2BIG while the buffer is too small (KVM_MAX_CPUID_ENTRIES is 256 in 6.1).
    for (uint32_t capacity = 64; capacity <= 4096; capacity *= 2) {
        kvm_abi::FlexBuffer<kvm_abi::Cpuid2Header, kvm_cpuid_entry2> cpuid(capacity);
        cpuid.set_header({capacity, 0});
        if (::ioctl(fd(), kvm_abi::kGetCpuid2, cpuid.data()) < 0) {
            if (errno == E2BIG) continue;
            throw_errno("KVM_GET_CPUID2");
        }
        const uint32_t count = cpuid.header().nent;
        return cpuid.entries(count < capacity ? count : capacity);
    }
    throw SysError("KVM_GET_CPUID2", E2BIG);
}

std::vector<uint8_t> Vcpu::xsave(size_t bytes) const {
    if (bytes < sizeof(kvm_abi::XsaveHeader))
        throw Error(fmt::format("KVM_GET_XSAVE: buffer of {} bytes, needs at least {}", bytes,
                                sizeof(kvm_abi::XsaveHeader)));
    std::vector<uint64_t> buffer((bytes + 7) / 8, 0);  // 8-byte aligned for the kernel's copy
    if (bytes == sizeof(kvm_abi::XsaveHeader))
        checked_ioctl(fd(), kvm_abi::kGetXsave, buffer.data(), "KVM_GET_XSAVE");
    else
        checked_ioctl(fd(), kvm_abi::kGetXsave2, buffer.data(), "KVM_GET_XSAVE2");
    std::vector<uint8_t> area(bytes);
    std::memcpy(area.data(), buffer.data(), bytes);
    return area;
}

void Vcpu::set_xsave(std::span<const uint8_t> area) {
    if (area.size() < sizeof(kvm_abi::XsaveHeader))
        throw Error(fmt::format("KVM_SET_XSAVE: area of {} bytes, needs at least {}", area.size(),
                                sizeof(kvm_abi::XsaveHeader)));
    std::vector<uint64_t> buffer((area.size() + 7) / 8, 0);
    std::memcpy(buffer.data(), area.data(), area.size());
    checked_ioctl(fd(), kvm_abi::kSetXsave, buffer.data(), "KVM_SET_XSAVE");
}

kvm_xcrs Vcpu::xcrs() const {
    kvm_xcrs xcrs{};
    checked_ioctl(fd(), KVM_GET_XCRS, &xcrs, "KVM_GET_XCRS");
    return xcrs;
}

void Vcpu::set_xcrs(const kvm_xcrs& xcrs) { checked_ioctl(fd(), KVM_SET_XCRS, &xcrs, "KVM_SET_XCRS"); }

kvm_debugregs Vcpu::debugregs() const {
    kvm_debugregs regs{};
    checked_ioctl(fd(), KVM_GET_DEBUGREGS, &regs, "KVM_GET_DEBUGREGS");
    return regs;
}

void Vcpu::set_debugregs(const kvm_debugregs& regs) {
    checked_ioctl(fd(), KVM_SET_DEBUGREGS, &regs, "KVM_SET_DEBUGREGS");
}

kvm_vcpu_events Vcpu::vcpu_events() const {
    kvm_vcpu_events events{};
    checked_ioctl(fd(), KVM_GET_VCPU_EVENTS, &events, "KVM_GET_VCPU_EVENTS");
    return events;
}

void Vcpu::set_vcpu_events(const kvm_vcpu_events& events) {
    checked_ioctl(fd(), KVM_SET_VCPU_EVENTS, &events, "KVM_SET_VCPU_EVENTS");
}

}  // namespace nanovm
