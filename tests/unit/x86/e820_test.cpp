// e820_map(): the memory map the guest kernel is given.
#include <catch2/catch.hpp>

#include "tests/unit/x86/gpa_printer.hpp"
#include "vmm/x86/boot.hpp"

using namespace nanovm;
using namespace nanovm::x86;

TEST_CASE("e820 for a 128 MiB guest: low RAM, reserved EBDA..1 MiB, RAM from 1 MiB", "[x86][e820]") {
    const auto mem = GuestMemory::create(128 * MiB);
    const std::vector<E820Entry> expected = {
        {0, 0x9fc00, kE820Ram},
        {0x9fc00, 0x100000 - 0x9fc00, kE820Reserved},
        {0x100000, 128 * MiB - 0x100000, kE820Ram},
    };
    CHECK(e820_map(mem) == expected);
}

TEST_CASE("e820 for a 4096 MiB guest: RAM [1 MiB, 3 GiB) and [4 GiB, 5 GiB)", "[x86][e820]") {
    const auto mem = GuestMemory::create(4096 * MiB);
    const std::vector<E820Entry> expected = {
        {0, 0x9fc00, kE820Ram},
        {0x9fc00, 0x100000 - 0x9fc00, kE820Reserved},
        {0x100000, 3 * GiB - 0x100000, kE820Ram},
        {4 * GiB, 1 * GiB, kE820Ram},
    };
    CHECK(e820_map(mem) == expected);
}

TEST_CASE("e820 for exactly 3 GiB has no RAM above 4 GiB", "[x86][e820]") {
    const auto map = e820_map(GuestMemory::create(3072 * MiB));
    REQUIRE(map.size() == 3);
    CHECK(map.back() == E820Entry{0x100000, 3 * GiB - 0x100000, kE820Ram});
}

TEST_CASE("e820 RAM entries add up to the guest's RAM minus the reserved hole", "[x86][e820]") {
    for (uint64_t mib : {128, 1024, 3072, 3073, 8192}) {
        CAPTURE(mib);
        const auto mem = GuestMemory::create(mib * MiB);
        uint64_t ram = 0;
        for (const auto& e : e820_map(mem))
            if (e.type == kE820Ram) ram += e.size;
        CHECK(ram == mib * MiB - (0x100000 - 0x9fc00));
    }
}
