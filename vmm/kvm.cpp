#include "vmm/kvm.hpp"

#include <fcntl.h>

#include <cerrno>

#include <fmt/format.h>

#include "vmm/error.hpp"
#include "vmm/kvm_abi.hpp"
#include "vmm/kvm_ioctl.hpp"

namespace nanovm {

using detail::checked_ioctl;

Kvm Kvm::open(const std::string& path) {
    Fd fd(::open(path.c_str(), O_RDWR | O_CLOEXEC));
    if (!fd) throw_errno("open " + path);
    Kvm kvm(std::move(fd));
    const int version = kvm.api_version();
    if (version != kApiVersion)
        throw Error(fmt::format("{}: KVM API version {}, nanovm needs {}", path, version, kApiVersion));
    return kvm;
}

int Kvm::api_version() const { return checked_ioctl(fd(), KVM_GET_API_VERSION, 0UL, "KVM_GET_API_VERSION"); }

int Kvm::check_extension(long capability) const {
    return checked_ioctl(fd(), KVM_CHECK_EXTENSION, capability, "KVM_CHECK_EXTENSION");
}

std::vector<kvm_cpuid_entry2> Kvm::supported_cpuid() const {
    // KVM answers E2BIG while the buffer is too small: grow it (KVM caps nent at
    // KVM_MAX_CPUID_ENTRIES, 256 in 6.1).
    for (uint32_t capacity = 64; capacity <= 4096; capacity *= 2) {
        kvm_abi::FlexBuffer<kvm_abi::Cpuid2Header, kvm_cpuid_entry2> cpuid(capacity);
        cpuid.set_header({capacity, 0});
        if (::ioctl(fd(), kvm_abi::kGetSupportedCpuid, cpuid.data()) < 0) {
            if (errno == E2BIG) continue;
            throw_errno("KVM_GET_SUPPORTED_CPUID");
        }
        const uint32_t count = cpuid.header().nent;
        return cpuid.entries(count < capacity ? count : capacity);
    }
    throw SysError("KVM_GET_SUPPORTED_CPUID", E2BIG);
}

std::vector<uint32_t> Kvm::msr_index_list() const {
    // With nmsrs too small KVM answers E2BIG and writes the count it needs.
    kvm_abi::FlexBuffer<kvm_abi::MsrListHeader, uint32_t> probe(0);
    probe.set_header({0});
    if (::ioctl(fd(), kvm_abi::kGetMsrIndexList, probe.data()) < 0 && errno != E2BIG)
        throw_errno("KVM_GET_MSR_INDEX_LIST");
    const uint32_t count = probe.header().nmsrs;
    kvm_abi::FlexBuffer<kvm_abi::MsrListHeader, uint32_t> list(count);
    list.set_header({count});
    checked_ioctl(fd(), kvm_abi::kGetMsrIndexList, list.data(), "KVM_GET_MSR_INDEX_LIST");
    const uint32_t got = list.header().nmsrs;
    return list.entries(got < count ? got : count);
}

size_t Kvm::vcpu_mmap_size() const {
    return static_cast<size_t>(checked_ioctl(fd(), KVM_GET_VCPU_MMAP_SIZE, 0UL, "KVM_GET_VCPU_MMAP_SIZE"));
}

}  // namespace nanovm
