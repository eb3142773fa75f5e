// patch_cpuid(): turns KVM_GET_SUPPORTED_CPUID's answer (the host's view) into what
// vCPU `index` of `count` should see: its own APIC ID everywhere the CPU reports one,
// and a topology of one package with `count` cores of one thread each, described
// consistently in the Intel leaves (1, 4, 0xB, 0x1F) and the AMD ones (0x80000008,
// 0x8000001D, 0x8000001E). Leaves not named here stay as KVM gave them.
// Sources: Intel SDM vol. 2A "CPUID"; AMD APM vol. 3 appendix E.
#include <algorithm>
#include <cstring>
#include <iterator>

#include <fmt/format.h>

#include "vmm/error.hpp"
#include "vmm/x86/boot.hpp"

namespace nanovm::x86 {

namespace {

constexpr uint32_t kLeafVendor = 0x0;
constexpr uint32_t kLeafFeatures = 0x1;
constexpr uint32_t kLeafCacheParams = 0x4;
constexpr uint32_t kLeafTopology = 0xb;
constexpr uint32_t kLeafTopologyV2 = 0x1f;
constexpr uint32_t kLeafAmdSizes = 0x80000008;
constexpr uint32_t kLeafAmdCacheTopology = 0x8000001d;
constexpr uint32_t kLeafAmdTopology = 0x8000001e;

constexpr uint32_t kHypervisorBit = 1u << 31;  ///< leaf 1 ECX
constexpr uint32_t kHttBit = 1u << 28;         ///< leaf 1 EDX
constexpr uint32_t kLevelSmt = 1;              ///< leaf 0xB/0x1F ECX[15:8]
constexpr uint32_t kLevelCore = 2;

/// reg with bits [lo, lo + width) replaced by value (truncated to width bits).
uint32_t set_bits(uint32_t reg, unsigned lo, unsigned width, uint32_t value) {
    const uint32_t mask = ((width >= 32) ? ~0u : ((1u << width) - 1)) << lo;
    return (reg & ~mask) | ((value << lo) & mask);
}

/// Smallest b with 2^b >= n: the APIC ID bits that n cores need.
uint32_t id_bits(uint32_t n) {
    uint32_t bits = 0;
    while ((1ull << bits) < n) ++bits;
    return bits;
}

bool vendor_is(const kvm_cpuid_entry2& leaf0, const char (&name)[13]) {
    uint32_t ebx, edx, ecx;  // the vendor string is EBX, EDX, ECX in that order
    std::memcpy(&ebx, name, 4);
    std::memcpy(&edx, name + 4, 4);
    std::memcpy(&ecx, name + 8, 4);
    return leaf0.ebx == ebx && leaf0.edx == edx && leaf0.ecx == ecx;
}

bool is_amd(const std::vector<kvm_cpuid_entry2>& entries) {
    for (const auto& e : entries)
        if (e.function == kLeafVendor) return vendor_is(e, "AuthenticAMD") || vendor_is(e, "HygonGenuine");
    return false;
}

void patch_features(kvm_cpuid_entry2& e, uint32_t index, uint32_t count) {
    e.ebx = set_bits(e.ebx, 16, 8, count);  // addressable logical processor IDs in the package
    e.ebx = set_bits(e.ebx, 24, 8, index);  // initial APIC ID
    e.ecx |= kHypervisorBit;
    e.edx = count > 1 ? (e.edx | kHttBit) : (e.edx & ~kHttBit);  // HTT: EBX[23:16] is valid
}

/// Leaf 4 and 0x8000001D share EAX: [4:0] cache type (0 = no more caches),
/// [7:5] level, [25:14] logical processors sharing this cache - 1.
void patch_cache_sharing(kvm_cpuid_entry2& e, uint32_t count) {
    if ((e.eax & 0x1f) == 0) return;
    const uint32_t level = (e.eax >> 5) & 0x7;
    e.eax = set_bits(e.eax, 14, 12, level >= 3 ? count - 1 : 0);  // L1/L2 per core, L3 shared
}

kvm_cpuid_entry2 topology_subleaf(uint32_t function, uint32_t subleaf, uint32_t eax, uint32_t ebx,
                                  uint32_t level_type, uint32_t x2apic_id) {
    kvm_cpuid_entry2 e{};
    e.function = function;
    e.index = subleaf;
    e.flags = KVM_CPUID_FLAG_SIGNIFCANT_INDEX;
    e.eax = eax;                            // bits to shift the x2APIC ID to reach the next level
    e.ebx = ebx;                            // logical processors at this level
    e.ecx = (level_type << 8) | subleaf;    // level type, level number
    e.edx = x2apic_id;
    return e;
}

/// Replaces every subleaf of leaf 0xB or 0x1F (if KVM reported the leaf at all) with
/// SMT (1 thread), core (`count` cores) and the terminating invalid level.
void replace_topology(std::vector<kvm_cpuid_entry2>& entries, uint32_t function, uint32_t index, uint32_t count) {
    auto first = std::find_if(entries.begin(), entries.end(), [&](const auto& e) { return e.function == function; });
    if (first == entries.end()) return;
    const auto position = std::distance(entries.begin(), first);
    std::erase_if(entries, [&](const auto& e) { return e.function == function; });
    const kvm_cpuid_entry2 levels[] = {
        topology_subleaf(function, 0, 0, 1, kLevelSmt, index),
        topology_subleaf(function, 1, id_bits(count), count, kLevelCore, index),
        topology_subleaf(function, 2, 0, 0, 0, index),
    };
    entries.insert(entries.begin() + position, std::begin(levels), std::end(levels));
}

void patch_amd(kvm_cpuid_entry2& e, uint32_t index, uint32_t count) {
    switch (e.function) {
    case kLeafAmdSizes:
        e.ecx = set_bits(e.ecx, 0, 8, count - 1);        // NC: cores - 1
        e.ecx = set_bits(e.ecx, 12, 4, id_bits(count));  // ApicIdCoreIdSize
        break;
    case kLeafAmdCacheTopology:
        patch_cache_sharing(e, count);
        break;
    case kLeafAmdTopology:
        e.eax = index;                      // extended APIC ID
        e.ebx = set_bits(e.ebx, 0, 8, index);  // core (compute unit) ID
        e.ebx = set_bits(e.ebx, 8, 8, 0);      // threads per core - 1
        e.ecx = set_bits(e.ecx, 0, 8, 0);      // node ID
        e.ecx = set_bits(e.ecx, 8, 3, 0);      // nodes per processor - 1
        break;
    default:
        break;
    }
}

}  // namespace

void patch_cpuid(std::vector<kvm_cpuid_entry2>& entries, uint32_t index, uint32_t count) {
    if (index >= count) throw Error(fmt::format("cpuid: vCPU index {} is not below the vCPU count {}", index, count));
    if (count > 255) throw Error(fmt::format("cpuid: {} vCPUs exceed the 8-bit APIC IDs of leaf 1", count));

    const bool amd = is_amd(entries);
    for (auto& e : entries) {
        if (e.function == kLeafFeatures) {
            patch_features(e, index, count);
        } else if (e.function == kLeafCacheParams && (e.eax & 0x1f) != 0) {
            patch_cache_sharing(e, count);
            e.eax = set_bits(e.eax, 26, 6, std::min<uint32_t>(count - 1, 63));  // cores in the package - 1
        } else if (amd) {
            patch_amd(e, index, count);
        }
    }
    replace_topology(entries, kLeafTopology, index, count);
    replace_topology(entries, kLeafTopologyV2, index, count);
}

}  // namespace nanovm::x86
