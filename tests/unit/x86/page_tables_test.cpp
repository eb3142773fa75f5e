// write_identity_page_tables(): 4-level tables that identity-map [0, 4 GiB) with 2 MiB pages.
#include <catch2/catch.hpp>

#include <algorithm>
#include <optional>
#include <vector>

#include "tests/unit/x86/gpa_printer.hpp"
#include "vmm/x86/boot.hpp"

using namespace nanovm;
using namespace nanovm::x86;

namespace {

constexpr uint64_t kPresent = 1, kWritable = 2, kPs = 0x80;
constexpr uint64_t kAddrMask = 0x000ffffffffff000;

uint64_t entry(const GuestMemory& mem, uint64_t table, uint64_t index) {
    return mem.read<uint64_t>(Gpa(table + index * 8));
}

/// Walks the tables like the MMU would for a 2 MiB mapping; nullopt if not mapped.
std::optional<uint64_t> translate(const GuestMemory& mem, uint64_t cr3, uint64_t va) {
    const uint64_t pml4e = entry(mem, cr3 & kAddrMask, (va >> 39) & 511);
    if (!(pml4e & kPresent)) return std::nullopt;
    const uint64_t pdpte = entry(mem, pml4e & kAddrMask, (va >> 30) & 511);
    if (!(pdpte & kPresent) || (pdpte & kPs)) return std::nullopt;
    const uint64_t pde = entry(mem, pdpte & kAddrMask, (va >> 21) & 511);
    if (!(pde & kPresent) || !(pde & kPs)) return std::nullopt;
    return (pde & 0x000fffffffe00000) | (va & 0x1fffff);
}

}  // namespace

TEST_CASE("page tables: PML4[0] -> PDPT, PDPT[0..3] -> four page directories, nothing else", "[x86][paging]") {
    auto mem = GuestMemory::create(128 * MiB);
    const uint64_t cr3 = write_identity_page_tables(mem);
    CHECK(cr3 == layout::kPml4.value);

    const uint64_t pml4e = entry(mem, cr3, 0);
    CHECK((pml4e & 0xfff) == (kPresent | kWritable));
    for (uint64_t i = 1; i < 512; ++i) CHECK(entry(mem, cr3, i) == 0);

    const uint64_t pdpt = pml4e & kAddrMask;
    std::vector<uint64_t> pds;
    for (uint64_t i = 0; i < 4; ++i) {
        const uint64_t e = entry(mem, pdpt, i);
        CHECK((e & 0xfff) == (kPresent | kWritable));
        pds.push_back(e & kAddrMask);
    }
    for (uint64_t i = 4; i < 512; ++i) CHECK(entry(mem, pdpt, i) == 0);
    std::sort(pds.begin(), pds.end());
    CHECK(std::adjacent_find(pds.begin(), pds.end()) == pds.end());

    for (uint64_t gib = 0; gib < 4; ++gib)
        for (uint64_t j = 0; j < 512; ++j)
            REQUIRE(entry(mem, entry(mem, pdpt, gib) & kAddrMask, j) ==
                    (((gib * 512 + j) << 21) | kPresent | kWritable | kPs));
}

TEST_CASE("page tables: every address below 4 GiB maps to itself, 4 GiB and up is unmapped", "[x86][paging]") {
    auto mem = GuestMemory::create(128 * MiB);
    const uint64_t cr3 = write_identity_page_tables(mem);
    for (uint64_t va : {0x0ull, 0x7000ull, 0x100200ull, 0x1000000ull, 0x7fffffffull, 0xbfffffffull, 0xfec00000ull,
                        0xfee00000ull, 0xffffffffull})
        CHECK(translate(mem, cr3, va) == va);
    CHECK_FALSE(translate(mem, cr3, 4 * GiB).has_value());
    CHECK_FALSE(translate(mem, cr3, 0xffffffff81000000).has_value());
}

TEST_CASE("page tables fit between the boot stack and the command line", "[x86][paging]") {
    auto mem = GuestMemory::create(128 * MiB);
    write_identity_page_tables(mem);
    const uint64_t pdpt = entry(mem, layout::kPml4.value, 0) & kAddrMask;
    for (uint64_t i = 0; i < 4; ++i) {
        const uint64_t pd = entry(mem, pdpt, i) & kAddrMask;
        CHECK(pd >= layout::kPml4.value);
        CHECK(pd + 4096 <= layout::kCmdline.value);
    }
    CHECK(layout::kStackTop <= layout::kPml4.value);
}
