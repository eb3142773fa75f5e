// KVM structures with a trailing array, laid out as the kernel's C ABI expects.
//
// Why: Debian 12's <linux/kvm.h> (linux-libc-dev, Linux 6.1 uapi) declares those
// arrays with __DECLARE_FLEX_ARRAY, which wraps them in an anonymous struct holding an
// empty struct. In C an empty struct has size 0; in C++ it has size 1. So in C++ the
// array moves (kvm_cpuid2::entries at offset 12, not 8), sizeof grows, and every
// ioctl number that encodes the size changes: KVM_GET_SUPPORTED_CPUID is 0xc00cae05
// in C++ and 0xc008ae05 in C, and the kernel answers the C++ one with EINVAL.
// Affected: kvm_cpuid2, kvm_msrs, kvm_msr_list, kvm_cpuid, kvm_xsave (extra[]),
// kvm_irq_routing, kvm_signal_mask, kvm_reg_list, kvm_pmu_event_filter,
// kvm_coalesced_mmio_ring, kvm_stats_desc.
//
// Rule for nanovm: never use those structs' array members, and never the ioctl macros
// built on them (KVM_GET_SUPPORTED_CPUID, KVM_SET_CPUID2, KVM_GET_MSRS, KVM_SET_MSRS,
// KVM_GET_MSR_INDEX_LIST, KVM_GET_XSAVE/KVM_SET_XSAVE, KVM_SET_GSI_ROUTING, ...).
// Use the headers and ioctl numbers below; add new ones here, with a static_assert
// of the C value.
#pragma once

#include <linux/kvm.h>

#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

namespace nanovm::kvm_abi {

/// struct kvm_cpuid2 without its array: kvm_cpuid_entry2 entries[] follow at offset 8.
struct Cpuid2Header {
    uint32_t nent;
    uint32_t padding;
};
/// struct kvm_msrs without its array: kvm_msr_entry entries[] follow at offset 8.
struct MsrsHeader {
    uint32_t nmsrs;
    uint32_t pad;
};
/// struct kvm_msr_list without its array: uint32_t indices[] follow at offset 4.
struct MsrListHeader {
    uint32_t nmsrs;
};
static_assert(sizeof(Cpuid2Header) == 8 && sizeof(MsrsHeader) == 8 && sizeof(MsrListHeader) == 4);

inline constexpr unsigned long kGetSupportedCpuid = _IOWR(KVMIO, 0x05, Cpuid2Header);
inline constexpr unsigned long kSetCpuid2 = _IOW(KVMIO, 0x90, Cpuid2Header);
inline constexpr unsigned long kGetMsrs = _IOWR(KVMIO, 0x88, MsrsHeader);
inline constexpr unsigned long kSetMsrs = _IOW(KVMIO, 0x89, MsrsHeader);
inline constexpr unsigned long kGetMsrIndexList = _IOWR(KVMIO, 0x02, MsrListHeader);
// The values a C compiler gives the kernel's macros.
static_assert(kGetSupportedCpuid == 0xc008ae05UL);
static_assert(kSetCpuid2 == 0x4008ae90UL);
static_assert(kGetMsrs == 0xc008ae88UL);
static_assert(kSetMsrs == 0x4008ae89UL);
static_assert(kGetMsrIndexList == 0xc004ae02UL);

/// struct kvm_xsave without its extra[] array: the legacy 4096-byte XSAVE area
/// (KVM_GET_XSAVE / KVM_SET_XSAVE). KVM_GET_XSAVE2 (KVM_CAP_XSAVE2, Linux 5.17) fills
/// as many bytes as KVM_CHECK_EXTENSION(KVM_CAP_XSAVE2) answers (>= 4096), and
/// KVM_SET_XSAVE then takes a buffer of that size. KVM API doc 4.42, 4.43, 4.134.
struct XsaveHeader {
    uint32_t region[1024];
};
static_assert(sizeof(XsaveHeader) == 4096);
inline constexpr unsigned long kGetCpuid2 = _IOWR(KVMIO, 0x91, Cpuid2Header);
inline constexpr unsigned long kGetXsave = _IOR(KVMIO, 0xa4, XsaveHeader);
inline constexpr unsigned long kSetXsave = _IOW(KVMIO, 0xa5, XsaveHeader);
inline constexpr unsigned long kGetXsave2 = _IOR(KVMIO, 0xcf, XsaveHeader);
static_assert(kGetCpuid2 == 0xc008ae91UL);
static_assert(kGetXsave == 0x9000aea4UL);
static_assert(kSetXsave == 0x5000aea5UL);
static_assert(kGetXsave2 == 0x9000aecfUL);

/// One ioctl argument: a Header followed by `count` Entry values, in one 8-byte
/// aligned buffer, filled and read with memcpy.
template <typename Header, typename Entry>
class FlexBuffer {
public:
    explicit FlexBuffer(size_t count)
        : count_(count), storage_((sizeof(Header) + count * sizeof(Entry) + 7) / 8, 0) {
        static_assert(sizeof(Header) % alignof(Entry) == 0, "entries must be aligned after the header");
    }
    /// What to pass to ioctl().
    void* data() noexcept { return storage_.data(); }
    size_t capacity() const noexcept { return count_; }

    Header header() const {
        Header h;
        std::memcpy(&h, storage_.data(), sizeof(h));
        return h;
    }
    void set_header(const Header& h) { std::memcpy(storage_.data(), &h, sizeof(h)); }

    /// Copies out the first `n` entries (n <= capacity()).
    std::vector<Entry> entries(size_t n) const {
        std::vector<Entry> out(n);
        if (n) std::memcpy(out.data(), bytes() + sizeof(Header), n * sizeof(Entry));
        return out;
    }
    /// Copies `in` into the entries (in.size() <= capacity()).
    void set_entries(std::span<const Entry> in) {
        if (!in.empty()) std::memcpy(bytes() + sizeof(Header), in.data(), in.size_bytes());
    }

private:
    uint8_t* bytes() noexcept { return reinterpret_cast<uint8_t*>(storage_.data()); }
    const uint8_t* bytes() const noexcept { return reinterpret_cast<const uint8_t*>(storage_.data()); }
    size_t count_;
    std::vector<uint64_t> storage_;
};

}  // namespace nanovm::kvm_abi
