// The RAM check of snapshot/ram_verify.hpp, without KVM: a fork child's RAM compared
// with the parent's crc32c sums names exactly the pages that differ, by GPA; a frozen
// layer that nobody writes is reported unchanged, and nothing is checked unless
// NANOVM_DEBUG_RAM_VERIFY=1.
#include <catch2/catch.hpp>

#include <stdlib.h>

#include <fstream>
#include <iterator>
#include <string>

#include "snapshot/ram_verify.hpp"
#include "tests/support/temp_dir.hpp"
#include "vmm/guest_memory.hpp"

using namespace nanovm;
using namespace nanovm::snapshot;

namespace {

std::string read_text(const std::string& path) {
    std::ifstream in(path);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace

TEST_CASE("ram verify: a child's RAM against the parent's sums names the pages that differ", "[snapshot][verify]") {
    test::TempDir dir("ramverify");
    const std::string log = dir.file("verify.log");
    ::setenv("NANOVM_DEBUG_RAM_VERIFY_LOG", log.c_str(), 1);
    ::unsetenv("NANOVM_DEBUG_RAM_VERIFY");
    CHECK_FALSE(ram_verify_enabled());
    ::setenv("NANOVM_DEBUG_RAM_VERIFY", "1", 1);
    CHECK(ram_verify_enabled());

    GuestMemory parent = GuestMemory::create(4 * MiB);
    parent.write<uint64_t>(Gpa(0x3000 + 8), 0x1234);
    const std::vector<uint32_t> sums = guest_page_checksums(parent);
    REQUIRE(sums.size() == 4 * MiB / kPageSize);
    write_page_checksums(dir.path(), sums);

    GuestMemory child = GuestMemory::create(4 * MiB);
    child.write<uint64_t>(Gpa(0x3000 + 8), 0x1234);
    verify_against_page_checksums(child, dir.path(), "same");
    child.write<uint64_t>(Gpa(0x1f3d000 % (4 * MiB) + 16), 7);  // one page differs
    verify_against_page_checksums(child, dir.path(), "one off");

    const std::string text = read_text(log);
    CHECK_THAT(text, Catch::Contains("ram verify (same): RAM equals the parent's at the freeze (1024 pages)"));
    CHECK_THAT(text, Catch::Contains("ram verify (one off): NOT the parent's RAM at the freeze: 1 of 1024 pages "
                                     "differ: GPA 0x33d000"));
    ::unsetenv("NANOVM_DEBUG_RAM_VERIFY");
    ::unsetenv("NANOVM_DEBUG_RAM_VERIFY_LOG");
}
