// write_boot_params(): zero-page fields at the boot protocol's offsets, the command line.
#include <catch2/catch.hpp>

#include <string>

#include "tests/unit/x86/fake_kernels.hpp"
#include "tests/unit/x86/gpa_printer.hpp"
#include "vmm/error.hpp"
#include "vmm/x86/boot.hpp"

using namespace nanovm;
using namespace nanovm::x86;
using nanovm::x86::test::FakeBzImage;
using nanovm::x86::test::make_elf;

namespace {

/// A field of the zero page, read at its boot-protocol offset.
template <typename T>
T zp(const GuestMemory& mem, uint64_t offset) {
    return mem.read<T>(layout::kBootParams + offset);
}

std::string guest_cstring(const GuestMemory& mem, Gpa at, size_t max) {
    const auto bytes = mem.slice(at, max);
    return {bytes.begin(), std::find(bytes.begin(), bytes.end(), uint8_t{0})};
}

struct E820Raw {
    uint64_t addr, size;
    uint32_t type;
};

E820Raw e820_at(const GuestMemory& mem, size_t i) {
    const uint64_t at = 0x2d0 + i * 20;
    return {zp<uint64_t>(mem, at), zp<uint64_t>(mem, at + 8), zp<uint32_t>(mem, at + 16)};
}

}  // namespace

TEST_CASE("boot_params for a bzImage: setup header copied, loader fields set", "[x86][boot_params]") {
    auto mem = GuestMemory::create(128 * MiB);
    auto stale = mem.slice(layout::kBootParams, 4096);
    std::fill(stale.begin(), stale.end(), uint8_t{0xee});  // e.g. left over from an earlier boot

    const auto image = FakeBzImage{}.build();
    const LoadedKernel k = load_kernel(mem, image);
    const std::string cmdline = "console=ttyS0 reboot=k panic=1";
    write_boot_params(mem, k, cmdline, Gpa(0x7000000), 0x12345);

    // Copied from the image's header.
    CHECK(zp<uint8_t>(mem, 0x1f1) == 4);             // setup_sects
    CHECK(zp<uint16_t>(mem, 0x1fa) == 0xffff);       // vid_mode
    CHECK(zp<uint16_t>(mem, 0x1fe) == 0xaa55);       // boot_flag
    CHECK(zp<uint32_t>(mem, 0x202) == 0x53726448);   // "HdrS"
    CHECK(zp<uint16_t>(mem, 0x206) == 0x020f);       // version
    CHECK(zp<uint32_t>(mem, 0x230) == 0x200000);     // kernel_alignment
    CHECK(zp<uint8_t>(mem, 0x234) == 1);             // relocatable_kernel
    CHECK(zp<uint16_t>(mem, 0x236) == 0x0001);       // xloadflags
    CHECK(zp<uint32_t>(mem, 0x238) == 0x7ff);        // cmdline_size
    CHECK(zp<uint64_t>(mem, 0x258) == 0x1000000);    // pref_address
    CHECK(zp<uint32_t>(mem, 0x260) == 0x800000);     // init_size

    // Set by us.
    CHECK(zp<uint8_t>(mem, 0x210) == 0xff);          // type_of_loader
    CHECK(zp<uint8_t>(mem, 0x211) == (0x01 | 0x80)); // loadflags: LOADED_HIGH | CAN_USE_HEAP
    CHECK(zp<uint16_t>(mem, 0x224) == 0xfe00);       // heap_end_ptr
    CHECK(zp<uint32_t>(mem, 0x228) == 0x20000);      // cmd_line_ptr
    CHECK(zp<uint32_t>(mem, 0x0c8) == 0);            // ext_cmd_line_ptr
    CHECK(zp<uint32_t>(mem, 0x218) == 0x7000000);    // ramdisk_image
    CHECK(zp<uint32_t>(mem, 0x21c) == 0x12345);      // ramdisk_size
    CHECK(zp<uint32_t>(mem, 0x0c0) == 0);            // ext_ramdisk_image
    CHECK(zp<uint32_t>(mem, 0x0c4) == 0);            // ext_ramdisk_size
    CHECK(zp<uint8_t>(mem, 0x1e8) == 3);             // e820_entries

    // Zeroed: the rest of the page, including the sentinel byte the file had at 0x1ef.
    CHECK(zp<uint8_t>(mem, 0x1ef) == 0);
    CHECK(zp<uint64_t>(mem, 0x000) == 0);
    CHECK(zp<uint64_t>(mem, 0x070) == 0);            // acpi_rsdp_addr
    CHECK(zp<uint64_t>(mem, 0x250) == 0);            // setup_data
    CHECK(zp<uint64_t>(mem, 0xff8) == 0);

    CHECK(guest_cstring(mem, layout::kCmdline, layout::kCmdlineMax) == cmdline);
}

TEST_CASE("boot_params for an ELF vmlinux: a minimal header is made up", "[x86][boot_params]") {
    auto mem = GuestMemory::create(128 * MiB);
    const LoadedKernel k = load_kernel(mem, make_elf(0x1000000, {{0x1000000, 0xffffffff81000000, 0x1000, 0x1000}}));
    write_boot_params(mem, k, "console=hvc0", Gpa(0), 0);

    CHECK(zp<uint16_t>(mem, 0x1fe) == 0xaa55);       // boot_flag
    CHECK(zp<uint32_t>(mem, 0x202) == 0x53726448);   // "HdrS"
    CHECK(zp<uint16_t>(mem, 0x206) == 0x020c);       // version
    CHECK(zp<uint32_t>(mem, 0x230) == 0x1000000);    // kernel_alignment
    CHECK(zp<uint8_t>(mem, 0x210) == 0xff);          // type_of_loader
    CHECK(zp<uint8_t>(mem, 0x211) == 0x01);          // loadflags: LOADED_HIGH only
    CHECK(zp<uint32_t>(mem, 0x228) == 0x20000);      // cmd_line_ptr
    CHECK(zp<uint32_t>(mem, 0x22c) == 0x7fffffff);   // initrd_addr_max
    CHECK(zp<uint32_t>(mem, 0x218) == 0);            // no ramdisk
    CHECK(zp<uint32_t>(mem, 0x21c) == 0);
    CHECK(zp<uint8_t>(mem, 0x1e8) == 3);
    CHECK(guest_cstring(mem, layout::kCmdline, layout::kCmdlineMax) == "console=hvc0");
}

TEST_CASE("boot_params carries the e820 map at 0x2d0", "[x86][boot_params]") {
    auto mem = GuestMemory::create(4096 * MiB);
    const LoadedKernel k = load_kernel(mem, FakeBzImage{}.build());
    write_boot_params(mem, k, "", Gpa(0), 0);

    const auto expected = e820_map(mem);
    REQUIRE(size_t{zp<uint8_t>(mem, 0x1e8)} == expected.size());
    for (size_t i = 0; i < expected.size(); ++i) {
        const E820Raw raw = e820_at(mem, i);
        CHECK(raw.addr == expected[i].addr);
        CHECK(raw.size == expected[i].size);
        CHECK(raw.type == expected[i].type);
    }
    CHECK(e820_at(mem, expected.size()).size == 0);
}

TEST_CASE("a command line longer than the kernel accepts is rejected", "[x86][boot_params]") {
    auto mem = GuestMemory::create(128 * MiB);
    SECTION("bzImage: cmdline_size from its header (0x7ff) is the limit") {
        const LoadedKernel k = load_kernel(mem, FakeBzImage{}.build());
        CHECK_NOTHROW(write_boot_params(mem, k, std::string(0x7ff, 'a'), Gpa(0), 0));
        CHECK(guest_cstring(mem, layout::kCmdline, layout::kCmdlineMax).size() == 0x7ff);
        CHECK_THROWS_WITH(write_boot_params(mem, k, std::string(0x800, 'a'), Gpa(0), 0),
                          Catch::Contains("at most 2047"));
    }
    SECTION("ELF: our buffer (kCmdlineMax including the NUL) is the limit") {
        const LoadedKernel k = load_kernel(mem, make_elf(0x1000000, {{0x1000000, 0, 0x1000, 0x1000}}));
        CHECK_NOTHROW(write_boot_params(mem, k, std::string(layout::kCmdlineMax - 1, 'a'), Gpa(0), 0));
        CHECK_THROWS_AS(write_boot_params(mem, k, std::string(layout::kCmdlineMax, 'a'), Gpa(0), 0), Error);
    }
}

TEST_CASE("a command line with a NUL byte in it is rejected", "[x86][boot_params]") {
    auto mem = GuestMemory::create(128 * MiB);
    const LoadedKernel k = load_kernel(mem, FakeBzImage{}.build());
    CHECK_THROWS_WITH(write_boot_params(mem, k, std::string("a\0b", 3), Gpa(0), 0), Catch::Contains("NUL"));
}

TEST_CASE("a shorter command line leaves no bytes of a longer earlier one", "[x86][boot_params]") {
    auto mem = GuestMemory::create(128 * MiB);
    const LoadedKernel k = load_kernel(mem, FakeBzImage{}.build());
    write_boot_params(mem, k, std::string(1000, 'x'), Gpa(0), 0);
    write_boot_params(mem, k, "quiet", Gpa(0), 0);
    CHECK(guest_cstring(mem, layout::kCmdline, layout::kCmdlineMax) == "quiet");
    CHECK(mem.read<uint8_t>(layout::kCmdline + 999) == 0);
}

TEST_CASE("an initrd range outside guest RAM is rejected", "[x86][boot_params]") {
    auto mem = GuestMemory::create(128 * MiB);
    const LoadedKernel k = load_kernel(mem, FakeBzImage{}.build());
    CHECK_THROWS_WITH(write_boot_params(mem, k, "", Gpa(127 * MiB), 2 * MiB), Catch::Contains("initrd"));
}
