// Which MSRs a snapshot saves: KVM_GET_MSR_INDEX_LIST (KVM API doc 4.3: "the MSRs
// that are supported by KVM_GET_MSRS/KVM_SET_MSRS", architectural ones plus KVM's
// emulated ones such as MSR_IA32_TSC, MSR_IA32_TSC_DEADLINE and the kvmclock MSRs
// 0x4b564d00..) filtered down to those this vCPU's KVM_GET_MSRS actually accepts:
// the list depends on host features, and some listed MSRs fail on a given CPU.
#pragma once

#include <cstdint>
#include <vector>

#include "vmm/kvm.hpp"
#include "vmm/vcpu.hpp"

namespace nanovm::snapshot {

/// The indices of KVM_GET_MSR_INDEX_LIST that KVM_GET_MSRS on `vcpu` reads, in list
/// order. One KVM_GET_MSRS per listed MSR (about 50 ioctls; done once per capture).
std::vector<uint32_t> saveable_msrs(const Kvm& kvm, const Vcpu& vcpu);

}  // namespace nanovm::snapshot
