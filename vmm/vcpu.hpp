// One KVM vCPU: its fd, its shared kvm_run page, KVM_RUN and the register ioctls.
// Source: Documentation/virt/kvm/api.rst ("vcpu ioctls", "The kvm_run structure").
#pragma once

#include <linux/kvm.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "vmm/fd.hpp"

namespace nanovm {

class Vm;

/// A vCPU created by Vm::create_vcpu. Move-only; unmaps kvm_run and closes its fd.
/// Register accessors are meant for the thread that runs the vCPU, or for any thread
/// while the vCPU is not running (KVM serialises vCPU ioctls, so a call from another
/// thread would wait for KVM_RUN to return).
class Vcpu {
public:
    Vcpu(Vcpu&& other) noexcept;
    Vcpu& operator=(Vcpu&& other) noexcept;
    Vcpu(const Vcpu&) = delete;
    Vcpu& operator=(const Vcpu&) = delete;
    ~Vcpu();

    /// The vCPU id given to KVM_CREATE_VCPU (the initial APIC ID).
    uint32_t id() const noexcept { return id_; }
    int fd() const noexcept { return fd_.get(); }
    /// The shared kvm_run structure: exit reason and exit data after run().
    kvm_run* run_data() const noexcept { return run_; }

    /// KVM_RUN once. Returns true when the vCPU stopped with an exit to handle
    /// (run_data()->exit_reason), false when it returned without one: EINTR (a signal
    /// or kvm_run.immediate_exit) or EAGAIN (an AP in KVM_MP_STATE_UNINITIALIZED woke
    /// up, e.g. on INIT/SIPI); the caller just runs it again. Throws
    /// SysError("KVM_RUN") on any other failure.
    bool run();

    kvm_regs regs() const;                ///< KVM_GET_REGS
    void set_regs(const kvm_regs& regs);  ///< KVM_SET_REGS
    kvm_sregs sregs() const;              ///< KVM_GET_SREGS
    void set_sregs(const kvm_sregs& sregs);  ///< KVM_SET_SREGS
    kvm_fpu fpu() const;                  ///< KVM_GET_FPU
    void set_fpu(const kvm_fpu& fpu);     ///< KVM_SET_FPU
    /// KVM_GET_MSRS: fills entries[i].data for each entries[i].index. Throws Error
    /// naming the first MSR KVM could not read.
    void get_msrs(std::span<kvm_msr_entry> entries) const;
    /// KVM_SET_MSRS. Throws Error naming the first MSR KVM rejected.
    void set_msrs(std::span<const kvm_msr_entry> entries);
    /// KVM_SET_CPUID2 (what CPUID returns inside the guest).
    void set_cpuid2(std::span<const kvm_cpuid_entry2> entries);
    kvm_lapic_state lapic() const;               ///< KVM_GET_LAPIC (needs the irqchip)
    void set_lapic(const kvm_lapic_state& lapic);  ///< KVM_SET_LAPIC
    kvm_mp_state mp_state() const;               ///< KVM_GET_MP_STATE
    /// KVM_SET_MP_STATE, e.g. KVM_MP_STATE_RUNNABLE or KVM_MP_STATE_UNINITIALIZED.
    void set_mp_state(uint32_t state);

    // State used by snapshot/ (KVM API doc section numbers of Linux 6.1's api.rst).
    /// KVM_GET_CPUID2 (not in api.rst; arch/x86/kvm/x86.c, kvm_vcpu_ioctl_get_cpuid2):
    /// the CPUID entries last set with KVM_SET_CPUID2 (none if it was never called).
    std::vector<kvm_cpuid_entry2> cpuid2() const;
    /// KVM_GET_XSAVE (4.42) when `bytes` == 4096, else KVM_GET_XSAVE2 (4.134) into a
    /// buffer of `bytes` bytes (the size KVM_CHECK_EXTENSION(KVM_CAP_XSAVE2) answers
    /// on the VM fd). Returns the raw XSAVE area, `bytes` bytes.
    std::vector<uint8_t> xsave(size_t bytes) const;
    /// KVM_SET_XSAVE (4.43) with a buffer of area.size() bytes (>= 4096; larger only
    /// where KVM_CAP_XSAVE2 says so). Throws Error if area is smaller than 4096 bytes.
    void set_xsave(std::span<const uint8_t> area);
    kvm_xcrs xcrs() const;                          ///< KVM_GET_XCRS (4.44)
    void set_xcrs(const kvm_xcrs& xcrs);            ///< KVM_SET_XCRS (4.45)
    kvm_debugregs debugregs() const;                ///< KVM_GET_DEBUGREGS (4.33)
    void set_debugregs(const kvm_debugregs& regs);  ///< KVM_SET_DEBUGREGS (4.34)
    kvm_vcpu_events vcpu_events() const;            ///< KVM_GET_VCPU_EVENTS (4.31)
    void set_vcpu_events(const kvm_vcpu_events& events);  ///< KVM_SET_VCPU_EVENTS (4.32)

private:
    friend class Vm;
    Vcpu(uint32_t id, Fd fd, kvm_run* run, size_t run_size) noexcept
        : id_(id), fd_(std::move(fd)), run_(run), run_size_(run_size) {}
    void unmap() noexcept;

    uint32_t id_ = 0;
    Fd fd_;
    kvm_run* run_ = nullptr;
    size_t run_size_ = 0;
};

}  // namespace nanovm
