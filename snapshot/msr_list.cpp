#include "snapshot/msr_list.hpp"

#include <sys/ioctl.h>

#include <linux/kvm.h>

#include "vmm/kvm_abi.hpp"

namespace nanovm::snapshot {

std::vector<uint32_t> saveable_msrs(const Kvm& kvm, const Vcpu& vcpu) {
    std::vector<uint32_t> out;
    for (uint32_t index : kvm.msr_index_list()) {
        kvm_abi::FlexBuffer<kvm_abi::MsrsHeader, kvm_msr_entry> one(1);
        one.set_header({1, 0});
        kvm_msr_entry entry{};
        entry.index = index;
        one.set_entries(std::span<const kvm_msr_entry>(&entry, 1));
        // KVM_GET_MSRS returns how many entries it read: 1 = this MSR is readable.
        if (::ioctl(vcpu.fd(), kvm_abi::kGetMsrs, one.data()) == 1) out.push_back(index);
    }
    return out;
}

}  // namespace nanovm::snapshot
