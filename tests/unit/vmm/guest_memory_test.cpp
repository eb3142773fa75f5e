// vmm/guest_memory.cpp: how GuestMemory::create maps guest RAM (no /dev/kvm needed).
#include <catch2/catch.hpp>

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>

#include "vmm/guest_memory.hpp"

using namespace nanovm;

namespace {

struct Vma {
    uintptr_t start = 0, end = 0;
    std::string perms;
    std::string vm_flags;  // smaps "VmFlags:" (e.g. "rd wr sh ... hg")
};

// The mapping of /proc/self/smaps that contains `addr`; start == end if none does.
Vma vma_at(uintptr_t addr) {
    std::ifstream smaps("/proc/self/smaps");
    std::string line;
    Vma current;
    bool found = false;
    while (std::getline(smaps, line)) {
        std::istringstream in(line);
        std::string first;
        in >> first;
        if (first == "VmFlags:") {
            if (found) {
                std::getline(in, current.vm_flags);
                return current;
            }
            continue;
        }
        const size_t dash = first.find('-');
        if (dash == std::string::npos || first.back() == ':') continue;
        current = Vma{std::stoull(first.substr(0, dash), nullptr, 16), std::stoull(first.substr(dash + 1), nullptr, 16)};
        in >> current.perms;
        found = current.start <= addr && addr < current.end;
    }
    return {};
}

}  // namespace

TEST_CASE("guest RAM is 2 MiB aligned, asks for huge pages and has a reserved page below", "[guest_memory]") {
    GuestMemory memory = GuestMemory::create(16 * MiB);
    REQUIRE(memory.regions().size() == 1);
    const MemoryRegion& ram = memory.regions().front();
    const auto host = reinterpret_cast<uintptr_t>(ram.host);
    CHECK(host % (2 * MiB) == 0);

    const Vma mapping = vma_at(host);
    REQUIRE(mapping.start == host);
    CHECK(mapping.end == host + 16 * MiB);
    CHECK(mapping.perms == "rw-s");
    CHECK(mapping.vm_flags.find(" hg") != std::string::npos);  // MADV_HUGEPAGE

    // No later mapping (a thread stack) can end on RAM's 2 MiB boundary, where its top
    // 2 MiB would take a transparent huge page.
    const Vma below = vma_at(host - 1);
    REQUIRE(below.start != below.end);
    CHECK(below.perms == "---p");
    CHECK(below.end == host);
}
