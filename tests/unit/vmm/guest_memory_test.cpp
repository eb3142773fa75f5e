// vmm/guest_memory.cpp: how GuestMemory::create maps guest RAM (no /dev/kvm needed).
#include <catch2/catch.hpp>

#include <cerrno>
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

namespace {

// A "Field:   N kB" line of /proc/self/smaps for the mapping that contains `addr`, in KiB
// (-1 if there is none).
long smaps_kib(uintptr_t addr, const std::string& field) {
    std::ifstream smaps("/proc/self/smaps");
    std::string line;
    bool in_mapping = false;
    while (std::getline(smaps, line)) {
        std::istringstream in(line);
        std::string first;
        in >> first;
        const size_t dash = first.find('-');
        if (first.back() != ':' && dash != std::string::npos) {
            in_mapping = std::stoull(first.substr(0, dash), nullptr, 16) <= addr &&
                         addr < std::stoull(first.substr(dash + 1), nullptr, 16);
        } else if (in_mapping && first == field + ":") {
            long kib = -1;
            in >> kib;
            return kib;
        }
    }
    return -1;
}

}  // namespace

TEST_CASE("collapse_huge_pages puts written 2 MiB blocks on huge pages, keeping their bytes", "[guest_memory]") {
    GuestMemory memory = GuestMemory::create(8 * MiB);
    // Some pages of the block [2, 4) MiB written, as a kernel image loaded there.
    for (uint64_t page = 0; page < 512; page += 3) memory.write<uint64_t>(Gpa(2 * MiB + page * kPageSize), page + 1);
    const auto host = reinterpret_cast<uintptr_t>(memory.regions().front().host);

    // The range rounds out to its whole block.
    const GuestMemory::Collapsed c = memory.collapse_huge_pages(Gpa(2 * MiB + 5 * kPageSize), 2 * kPageSize);
    if (c.error == EINVAL && c.bytes == 0) {
        WARN("this kernel has no MADV_COLLAPSE (Linux >= 6.1 with THP): nothing to check");
        return;
    }
    CHECK(c.error == 0);
    CHECK(c.bytes == 2 * MiB);
    CHECK(smaps_kib(host, "ShmemPmdMapped") == 2048);  // whatever shmem_enabled says
    for (uint64_t page = 0; page < 512; ++page)
        CHECK(memory.read<uint64_t>(Gpa(2 * MiB + page * kPageSize)) == (page % 3 == 0 ? page + 1 : 0));

    // A block with nothing written: the kernel refuses it, nothing changes.
    const GuestMemory::Collapsed empty = memory.collapse_huge_pages(Gpa(6 * MiB), kPageSize);
    CHECK(empty.bytes == 0);
    CHECK(empty.error == EINVAL);
    CHECK(smaps_kib(host, "ShmemPmdMapped") == 2048);
}

TEST_CASE("collapse_huge_pages leaves a block that crosses the end of RAM alone", "[guest_memory]") {
    GuestMemory memory = GuestMemory::create(3 * MiB);
    memory.write<uint64_t>(Gpa(2 * MiB), 7);
    const GuestMemory::Collapsed c = memory.collapse_huge_pages(Gpa(2 * MiB), kPageSize);
    CHECK(c.bytes == 0);
    CHECK(c.error == 0);
    CHECK(memory.read<uint64_t>(Gpa(2 * MiB)) == 7);
}
