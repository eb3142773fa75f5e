// load_initrd(): where the initrd goes and when it cannot go anywhere.
#include <catch2/catch.hpp>

#include <algorithm>

#include "tests/unit/x86/gpa_printer.hpp"
#include "vmm/error.hpp"
#include "vmm/x86/boot.hpp"

using namespace nanovm;
using namespace nanovm::x86;

namespace {

LoadedKernel kernel_ending_at(uint64_t end, uint64_t initrd_addr_max = 0x7fffffff) {
    LoadedKernel k;
    k.entry = Gpa(0x100200);
    k.load_start = Gpa(0x100000);
    k.load_end = Gpa(end);
    k.bzimage = true;
    k.initrd_addr_max = initrd_addr_max;
    return k;
}

std::vector<uint8_t> patterned(size_t n) {
    std::vector<uint8_t> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 13 + 1);
    return v;
}

}  // namespace

TEST_CASE("initrd goes page-aligned to the top of low RAM", "[x86][initrd]") {
    auto mem = GuestMemory::create(128 * MiB);
    const auto initrd = patterned(10000);
    const Gpa at = load_initrd(mem, kernel_ending_at(0x2000000), initrd);
    CHECK(at.value % kPageSize == 0);
    CHECK(at == Gpa((128 * MiB - 10000) & ~(kPageSize - 1)));
    const auto copied = mem.slice(at, initrd.size());
    CHECK(std::equal(copied.begin(), copied.end(), initrd.begin()));
}

TEST_CASE("initrd ends at or below initrd_addr_max", "[x86][initrd]") {
    auto mem = GuestMemory::create(128 * MiB);
    const Gpa at = load_initrd(mem, kernel_ending_at(0x2000000, 64 * MiB - 1), patterned(4096));
    CHECK(at == Gpa(64 * MiB - 4096));
}

TEST_CASE("initrd of a big guest stays below 2 GiB (initrd_addr_max 0x7fffffff)", "[x86][initrd]") {
    auto mem = GuestMemory::create(4096 * MiB);
    const Gpa at = load_initrd(mem, kernel_ending_at(0x2000000), patterned(5000));
    CHECK(at.value + 5000 <= 0x80000000);
    CHECK(at == Gpa((0x80000000 - 5000) & ~(kPageSize - 1)));
}

TEST_CASE("an initrd that does not fit above the kernel is rejected", "[x86][initrd]") {
    auto mem = GuestMemory::create(128 * MiB);
    SECTION("bigger than the RAM left above the kernel") {
        CHECK_THROWS_WITH(load_initrd(mem, kernel_ending_at(100 * MiB), std::vector<uint8_t>(28 * MiB + 1)),
                          Catch::StartsWith("initrd: "));
    }
    SECTION("exactly the RAM left above the kernel fits") {
        CHECK(load_initrd(mem, kernel_ending_at(100 * MiB), std::vector<uint8_t>(28 * MiB)) == Gpa(100 * MiB));
    }
    SECTION("kernel already above initrd_addr_max") {
        CHECK_THROWS_WITH(load_initrd(mem, kernel_ending_at(100 * MiB, 64 * MiB - 1), std::vector<uint8_t>(4096)),
                          Catch::StartsWith("initrd: "));
    }
    SECTION("empty file") {
        CHECK_THROWS_WITH(load_initrd(mem, kernel_ending_at(0x2000000), {}), Catch::Contains("empty"));
    }
}
