// patch_cpuid(): per-vCPU APIC IDs and a consistent topology on AMD and Intel hosts.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <optional>

#include "tests/unit/x86/gpa_printer.hpp"
#include "vmm/error.hpp"
#include "vmm/x86/boot.hpp"

using namespace nanovm;
using namespace nanovm::x86;

namespace {

kvm_cpuid_entry2 leaf(uint32_t function, uint32_t index, uint32_t eax, uint32_t ebx, uint32_t ecx, uint32_t edx,
                      bool indexed = false) {
    kvm_cpuid_entry2 e{};
    e.function = function;
    e.index = index;
    e.flags = indexed ? KVM_CPUID_FLAG_SIGNIFCANT_INDEX : 0;
    e.eax = eax;
    e.ebx = ebx;
    e.ecx = ecx;
    e.edx = edx;
    return e;
}

kvm_cpuid_entry2 vendor(uint32_t max_leaf, const char (&name)[13]) {
    uint32_t b, d, c;
    std::memcpy(&b, name, 4);
    std::memcpy(&d, name + 4, 4);
    std::memcpy(&c, name + 8, 4);
    return leaf(0, 0, max_leaf, b, c, d);
}

/// Cache descriptor EAX for leaf 4 / 0x8000001D: type, level, host sharing bits set.
uint32_t cache_eax(uint32_t type, uint32_t level) { return type | (level << 5) | (0xfffu << 14) | (0x3fu << 26); }

/// Roughly what KVM_GET_SUPPORTED_CPUID returns on an AMD EPYC host (as in the test host).
std::vector<kvm_cpuid_entry2> amd_host() {
    return {
        vendor(0xd, "AuthenticAMD"),
        leaf(1, 0, 0x00830f10, 0xff080800, 0x7ed8320b, 0x078bfbff),  // host APIC id 0xff, 8 logical
        leaf(4, 0, 0, 0, 0, 0, true),                                 // reserved on AMD
        leaf(7, 0, 0, 0x219c91a9, 0x00400004, 0, true),
        leaf(0xb, 0, 0, 0, 0, 0x3f, true),                             // KVM: "no topology"
        leaf(0x40000000, 0, 0x40000001, 0x4b4d564b, 0x564b4d56, 0x4d),
        leaf(0x40000001, 0, 0x01007afb, 0, 0, 0),
        leaf(0x80000000, 0, 0x8000001f, 0x68747541, 0x444d4163, 0x69746e65),
        leaf(0x80000008, 0, 0x3030, 0x1001b000, 0x0000703f, 0),        // host: 64 cores
        leaf(0x8000001d, 0, cache_eax(1, 1), 0x01c0003f, 0x3f, 0, true),
        leaf(0x8000001d, 1, cache_eax(2, 1), 0x01c0003f, 0x3f, 0, true),
        leaf(0x8000001d, 2, cache_eax(3, 2), 0x01c0003f, 0x3ff, 0x2, true),
        leaf(0x8000001d, 3, cache_eax(3, 3), 0x03c0003f, 0x3fff, 0x1, true),
        leaf(0x8000001d, 4, 0, 0, 0, 0, true),
        leaf(0x8000001e, 0, 0x7f, 0x0000013f, 0x00000303, 0),
    };
}

std::vector<kvm_cpuid_entry2> intel_host() {
    return {
        vendor(0x1f, "GenuineIntel"),
        leaf(1, 0, 0x000806f8, 0x5a400800, 0x7ffefbff, 0xbfebfbff),
        leaf(4, 0, cache_eax(1, 1), 0x02c0003f, 0x3f, 0, true),
        leaf(4, 1, cache_eax(2, 1), 0x01c0003f, 0x3f, 0, true),
        leaf(4, 2, cache_eax(3, 2), 0x03c0003f, 0x7ff, 0, true),
        leaf(4, 3, cache_eax(3, 3), 0x03c0003f, 0xfffff, 0x6, true),
        leaf(4, 4, 0, 0, 0, 0, true),
        leaf(0xb, 0, 1, 2, 0x100, 0x5a, true),
        leaf(0xb, 1, 7, 112, 0x201, 0x5a, true),
        leaf(0x1f, 0, 1, 2, 0x100, 0x5a, true),
        leaf(0x1f, 1, 7, 112, 0x201, 0x5a, true),
        leaf(0x1f, 2, 0, 0, 2, 0x5a, true),
        leaf(0x80000008, 0, 0x3030, 0, 0, 0),
    };
}

std::optional<kvm_cpuid_entry2> find(const std::vector<kvm_cpuid_entry2>& entries, uint32_t function,
                                     uint32_t index = 0) {
    for (const auto& e : entries)
        if (e.function == function && e.index == index) return e;
    return std::nullopt;
}

size_t count_leaf(const std::vector<kvm_cpuid_entry2>& entries, uint32_t function) {
    return static_cast<size_t>(
        std::count_if(entries.begin(), entries.end(), [&](const auto& e) { return e.function == function; }));
}

void check_topology_leaf(const std::vector<kvm_cpuid_entry2>& entries, uint32_t function, uint32_t index,
                         uint32_t count, uint32_t core_shift) {
    CAPTURE(function);
    REQUIRE(count_leaf(entries, function) == 3);
    const auto smt = find(entries, function, 0).value();
    CHECK(smt.eax == 0);                    // no thread bits: one thread per core
    CHECK(smt.ebx == 1);
    CHECK(smt.ecx == 0x100);                // level type SMT, level 0
    CHECK(smt.edx == index);                // x2APIC ID
    CHECK(smt.flags == KVM_CPUID_FLAG_SIGNIFCANT_INDEX);
    const auto core = find(entries, function, 1).value();
    CHECK(core.eax == core_shift);
    CHECK(core.ebx == count);
    CHECK(core.ecx == 0x201);               // level type core, level 1
    CHECK(core.edx == index);
    const auto end = find(entries, function, 2).value();
    CHECK(((end.ecx >> 8) & 0xff) == 0);    // invalid level: enumeration ends
    CHECK(end.edx == index);
}

}  // namespace

TEST_CASE("CPUID on AMD: each vCPU sees its APIC ID in leaves 1, 0xB and 0x8000001E", "[x86][cpuid]") {
    const uint32_t count = 4;
    for (uint32_t index = 0; index < count; ++index) {
        CAPTURE(index);
        auto entries = amd_host();
        patch_cpuid(entries, index, count);

        const auto l1 = find(entries, 1).value();
        CHECK(l1.ebx >> 24 == index);                 // initial APIC ID
        CHECK(((l1.ebx >> 16) & 0xff) == count);      // logical processors
        CHECK((l1.ebx & 0xffff) == 0x0800);           // CLFLUSH size, brand index kept
        CHECK((l1.ecx >> 31) == 1);                   // hypervisor
        CHECK(((l1.edx >> 28) & 1) == 1);             // HTT: count is valid
        CHECK(l1.eax == 0x00830f10);

        check_topology_leaf(entries, 0xb, index, count, 2);

        const auto topo = find(entries, 0x8000001e).value();
        CHECK(topo.eax == index);                     // extended APIC ID
        CHECK((topo.ebx & 0xff) == index);            // core ID
        CHECK(((topo.ebx >> 8) & 0xff) == 0);         // one thread per core
        CHECK((topo.ecx & 0x7ff) == 0);               // node 0 of 1

        const auto sizes = find(entries, 0x80000008).value();
        CHECK((sizes.ecx & 0xff) == count - 1);       // NC
        CHECK(((sizes.ecx >> 12) & 0xf) == 2);        // ApicIdCoreIdSize
        CHECK(sizes.eax == 0x3030);

        CHECK(((find(entries, 0x8000001d, 0)->eax >> 14) & 0xfff) == 0);          // L1d per core
        CHECK(((find(entries, 0x8000001d, 2)->eax >> 14) & 0xfff) == 0);          // L2 per core
        CHECK(((find(entries, 0x8000001d, 3)->eax >> 14) & 0xfff) == count - 1);  // L3 shared
        CHECK(find(entries, 0x8000001d, 4)->eax == 0);                             // end marker kept
    }
}

TEST_CASE("CPUID on Intel: leaf 4 core counts and leaves 0xB/0x1F describe n cores", "[x86][cpuid]") {
    const uint32_t count = 2;
    auto entries = intel_host();
    patch_cpuid(entries, 1, count);

    const auto l1 = find(entries, 1).value();
    CHECK(l1.ebx >> 24 == 1);
    CHECK(((l1.ebx >> 16) & 0xff) == count);

    for (uint32_t sub = 0; sub < 4; ++sub) {
        const auto c = find(entries, 4, sub).value();
        CAPTURE(sub);
        CHECK(c.eax >> 26 == count - 1);  // cores per package - 1
        const uint32_t level = (c.eax >> 5) & 7;
        CHECK(((c.eax >> 14) & 0xfff) == (level >= 3 ? count - 1 : 0));
        const auto host = find(intel_host(), 4, sub).value();
        CHECK((c.eax & 0x3fff) == (host.eax & 0x3fff));  // type, level, ... kept
        CHECK(c.ebx == host.ebx);
        CHECK(c.ecx == host.ecx);
    }
    CHECK(find(entries, 4, 4)->eax == 0);  // the null descriptor stays null

    check_topology_leaf(entries, 0xb, 1, count, 1);
    check_topology_leaf(entries, 0x1f, 1, count, 1);
    CHECK(find(entries, 0x80000008)->ecx == 0);  // AMD-only fields untouched on Intel
}

TEST_CASE("CPUID for a single vCPU: HTT clear, one core at every level", "[x86][cpuid]") {
    auto entries = amd_host();
    patch_cpuid(entries, 0, 1);
    CHECK(((find(entries, 1)->edx >> 28) & 1) == 0);
    CHECK(((find(entries, 1)->ebx >> 16) & 0xff) == 1);
    check_topology_leaf(entries, 0xb, 0, 1, 0);
    CHECK((find(entries, 0x80000008)->ecx & 0xf0ff) == 0);
}

TEST_CASE("CPUID leaves patch_cpuid does not own stay as KVM gave them", "[x86][cpuid]") {
    const auto before = amd_host();
    auto entries = before;
    patch_cpuid(entries, 2, 3);
    for (uint32_t function : {0x0u, 0x7u, 0x40000000u, 0x40000001u, 0x80000000u}) {
        CAPTURE(function);
        const auto a = find(before, function).value();
        const auto b = find(entries, function).value();
        CHECK(std::memcmp(&a, &b, sizeof a) == 0);
    }
    CHECK(count_leaf(entries, 0x1f) == 0);  // not invented when KVM did not report it
}

TEST_CASE("CPUID: an index not below the count is rejected", "[x86][cpuid]") {
    auto entries = amd_host();
    CHECK_THROWS_AS(patch_cpuid(entries, 2, 2), Error);
    CHECK_THROWS_AS(patch_cpuid(entries, 0, 0), Error);
}
