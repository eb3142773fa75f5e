// Guest RAM that a userfaultfd server fills (snapshot/uffd_backend.hpp) keeps no
// MADV_HUGEPAGE on any mapping of its memfds: Linux 6.1's khugepaged collapses a
// memfd's 2 MiB range through any mapping of it with VM_HUGEPAGE (under shmem_enabled
// advise), filling the range's holes with zeros that the guest then reads without a
// fault (GuestMemory::disable_huge_pages, tools/testhost/uffd-thp-probe.c). Checked
// in /proc/self/smaps ("hg" / "nh" in VmFlags) for a restore, its freeze (the new
// private mapping and the old one moved aside) and a fork child's mapping of the
// frozen layer. No /dev/kvm needed.
#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "snapshot/frozen_ram.hpp"
#include "snapshot/memory_layer.hpp"
#include "snapshot/uffd_backend.hpp"
#include "tests/support/temp_dir.hpp"
#include "vmm/guest_memory.hpp"

using namespace nanovm;
using namespace nanovm::snapshot;

namespace {

constexpr uint64_t kRam = 8 * MiB;

/// The smaps VmFlags of every mapping of the file with inode `ino` in this process.
std::vector<std::string> vm_flags_of_inode(ino_t ino) {
    std::ifstream smaps("/proc/self/smaps");
    std::string line;
    std::vector<std::string> out;
    bool wanted = false;
    while (std::getline(smaps, line)) {
        std::istringstream in(line);
        std::string first;
        in >> first;
        if (first == "VmFlags:") {
            if (wanted) {
                std::string flags;
                std::getline(in, flags);
                out.push_back(flags + " ");
            }
            wanted = false;
            continue;
        }
        if (first.back() == ':' || first.find('-') == std::string::npos) continue;
        std::string perms, offset, dev;
        unsigned long long inode = 0;
        in >> perms >> offset >> dev >> inode;
        wanted = inode == ino;
    }
    return out;
}

ino_t inode_of(int fd) {
    struct stat st {};
    REQUIRE(::fstat(fd, &st) == 0);
    return st.st_ino;
}

/// Every mapping of `fd`'s file: `count` of them, each MADV_NOHUGEPAGE ("nh"), none "hg".
void check_no_huge_pages(int fd, size_t count) {
    const std::vector<std::string> flags = vm_flags_of_inode(inode_of(fd));
    CHECK(flags.size() == count);
    for (const std::string& f : flags) {
        INFO("VmFlags:" << f);
        CHECK(f.find(" nh ") != std::string::npos);
        CHECK(f.find(" hg ") == std::string::npos);
    }
}

}  // namespace

TEST_CASE("RAM a userfaultfd server fills keeps no MADV_HUGEPAGE mapping: restore, freeze, fork child",
          "[snapshot][unit][uffd]") {
    test::TempDir dir("uffd-huge");
    const std::string layer = dir.file("memory.layer");
    {
        GuestMemory source = GuestMemory::create(kRam);
        source.write<uint64_t>(Gpa(5 * kPageSize), 0x1234);
        write_layer(source, nonzero_pages(source), layer, std::nullopt);
    }
    GuestMemory memory = GuestMemory::create(kRam);
    REQUIRE(memory.regions().size() == 1);
    const int memfd = memory.regions().front().memfd.get();
    {
        const std::vector<std::string> before = vm_flags_of_inode(inode_of(memfd));
        REQUIRE(before.size() == 1);
        CHECK(before.front().find(" hg ") != std::string::npos);  // create() asks for them
    }
    UffdServer server(memory, LayerChain::open(layer), {});
    check_no_huge_pages(memfd, 1);
    CHECK(memory.read<uint64_t>(Gpa(5 * kPageSize)) == 0x1234);

    // A snapshot's freeze: a MAP_PRIVATE mapping registered in place, the old one moved aside.
    FrozenRam ram = freeze_ram(memory, &server);
    check_no_huge_pages(memfd, 2);
    CHECK(memory.read<uint64_t>(Gpa(5 * kPageSize)) == 0x1234);

    // A fork child of this VM: its own private mapping of the frozen layer, served from the chain.
    std::vector<int> fds;
    for (const Fd& fd : ram.memfds) fds.push_back(fd.get());
    GuestMemory child = GuestMemory::map_memfds_private(fds, kRam);
    UffdServer child_server(child, LayerChain::open(layer), {});
    check_no_huge_pages(memfd, 3);
    CHECK(child.read<uint64_t>(Gpa(5 * kPageSize)) == 0x1234);
    CHECK(child.read<uint64_t>(Gpa(6 * kPageSize)) == 0);
}
