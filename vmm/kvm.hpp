// The KVM system object: the open /dev/kvm and the queries that need no VM
// (API version, capabilities, supported CPUID, MSR list, kvm_run size).
// Source: Documentation/virt/kvm/api.rst ("System ioctls"), Linux 6.1.
#pragma once

#include <linux/kvm.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "vmm/fd.hpp"

namespace nanovm {

/// KVM capabilities newer than Linux 6.1's <linux/kvm.h>: probed by number at run time.
namespace kvm_cap {
inline constexpr long kUserMemory2 = 231;  ///< KVM_CAP_USER_MEMORY2 (Linux 6.8)
inline constexpr long kGuestMemfd = 234;   ///< KVM_CAP_GUEST_MEMFD (Linux 6.8)
}  // namespace kvm_cap

/// An open /dev/kvm. Move-only; no global state: every VM is created from one of these.
class Kvm {
public:
    /// The device node nanovm opens by default.
    static constexpr const char* kDefaultPath = "/dev/kvm";
    /// The only KVM API version there has ever been (KVM_GET_API_VERSION).
    static constexpr int kApiVersion = 12;

    /// Opens `path` O_RDWR|O_CLOEXEC and checks KVM_GET_API_VERSION == 12.
    /// Throws SysError("open /dev/kvm", errno) or Error if the API version differs.
    static Kvm open(const std::string& path = kDefaultPath);

    Kvm(Kvm&&) noexcept = default;
    Kvm& operator=(Kvm&&) noexcept = default;

    /// The /dev/kvm fd (for KVM_CREATE_VM).
    int fd() const noexcept { return fd_.get(); }
    /// KVM_GET_API_VERSION.
    int api_version() const;
    /// KVM_CHECK_EXTENSION on the system fd: 0 = not supported, > 0 = supported
    /// (some capabilities answer a number, e.g. a count or a size in bytes).
    int check_extension(long capability) const;
    /// KVM_GET_SUPPORTED_CPUID: every leaf/subleaf this KVM can expose to a guest.
    /// Grows its buffer on E2BIG. Throws SysError("KVM_GET_SUPPORTED_CPUID").
    std::vector<kvm_cpuid_entry2> supported_cpuid() const;
    /// KVM_GET_MSR_INDEX_LIST: the MSRs KVM can save and restore.
    std::vector<uint32_t> msr_index_list() const;
    /// KVM_GET_VCPU_MMAP_SIZE: bytes to mmap from a vCPU fd (struct kvm_run + pages).
    size_t vcpu_mmap_size() const;

private:
    explicit Kvm(Fd fd) : fd_(std::move(fd)) {}
    Fd fd_;
};

}  // namespace nanovm
