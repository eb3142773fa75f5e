// load_kernel(): bzImage and ELF vmlinux loading, and rejection of bad images.
#include <catch2/catch.hpp>

#include <algorithm>
#include <random>
#include <string>

#include "tests/unit/x86/fake_kernels.hpp"
#include "tests/unit/x86/gpa_printer.hpp"
#include "vmm/error.hpp"
#include "vmm/x86/boot.hpp"

using namespace nanovm;
using namespace nanovm::x86;
using nanovm::x86::test::FakeBzImage;
using nanovm::x86::test::FakeSegment;
using nanovm::x86::test::make_elf;

namespace {

std::string load_error(GuestMemory& mem, const std::vector<uint8_t>& image) {
    try {
        load_kernel(mem, image);
    } catch (const Error& e) {
        return e.what();
    }
    return "(no error)";
}

bool guest_bytes_equal(const GuestMemory& mem, Gpa at, std::span<const uint8_t> expected) {
    const auto actual = mem.slice(at, expected.size());
    return std::equal(actual.begin(), actual.end(), expected.begin());
}

}  // namespace

TEST_CASE("bzImage: protected-mode code is copied to 1 MiB and entered at 1 MiB + 0x200", "[x86][kernel]") {
    auto mem = GuestMemory::create(128 * MiB);
    const FakeBzImage fake;
    const auto image = fake.build();
    const LoadedKernel k = load_kernel(mem, image);

    CHECK(k.bzimage);
    CHECK(k.entry == Gpa(0x100200));
    CHECK(k.load_start == Gpa(0x100000));
    CHECK(k.protocol_version == 0x020f);
    CHECK(k.initrd_addr_max == 0x7fffffff);
    const auto payload = std::span(image).subspan(fake.setup_size());
    CHECK(guest_bytes_equal(mem, Gpa(0x100000), payload));
}

TEST_CASE("bzImage: the setup header kept runs from 0x1f1 to 0x202 + the byte at 0x201", "[x86][kernel]") {
    auto mem = GuestMemory::create(128 * MiB);
    const auto image = FakeBzImage{}.build();
    const LoadedKernel k = load_kernel(mem, image);
    REQUIRE(k.setup_header.size() == 0x26c - 0x1f1);
    CHECK(std::equal(k.setup_header.begin(), k.setup_header.end(), image.begin() + 0x1f1));
}

TEST_CASE("bzImage: setup_sects 0 means 4 setup sectors", "[x86][kernel]") {
    auto mem = GuestMemory::create(128 * MiB);
    FakeBzImage fake;
    fake.setup_sects = 0;
    const auto image = fake.build();
    REQUIRE(fake.setup_size() == 5 * 512);
    load_kernel(mem, image);
    CHECK(guest_bytes_equal(mem, Gpa(0x100000), std::span(image).subspan(5 * 512)));
}

TEST_CASE("bzImage: load_end covers init_size from where the kernel decompresses itself", "[x86][kernel]") {
    auto mem = GuestMemory::create(256 * MiB);
    FakeBzImage fake;
    SECTION("relocatable: max(align_up(1 MiB, kernel_alignment), pref_address) + init_size") {
        fake.init_size = 0x3f98000;
        CHECK(load_kernel(mem, fake.build()).load_end == Gpa(0x1000000 + 0x3f98000));
    }
    SECTION("a payload longer than init_size is covered too") {
        fake.relocatable = 0;
        fake.init_size = 0x1000;
        fake.pref_address = 0;
        fake.payload_size = 0x40000;
        CHECK(load_kernel(mem, fake.build()).load_end == Gpa(0x100000 + 0x40000));
    }
    SECTION("non-relocatable: from pref_address") {
        fake.relocatable = 0;
        fake.pref_address = 0x2000000;
        CHECK(load_kernel(mem, fake.build()).load_end == Gpa(0x2000000 + 0x800000));
    }
}

TEST_CASE("bzImage: boot protocols older than 2.12 are rejected as too old", "[x86][kernel]") {
    auto mem = GuestMemory::create(128 * MiB);
    for (uint16_t version : {0x0200, 0x0205, 0x0206, 0x020b}) {
        FakeBzImage fake;
        fake.version = version;
        CAPTURE(version);
        CHECK_THAT(load_error(mem, fake.build()), Catch::Contains("too old"));
    }
}

TEST_CASE("bzImage: a kernel without XLF_KERNEL_64 is rejected", "[x86][kernel]") {
    auto mem = GuestMemory::create(128 * MiB);
    FakeBzImage fake;
    fake.xloadflags = 0x0002;
    CHECK_THAT(load_error(mem, fake.build()), Catch::Contains("XLF_KERNEL_64"));
}

TEST_CASE("bzImage: malformed headers are rejected with a reason", "[x86][kernel]") {
    auto mem = GuestMemory::create(128 * MiB);
    FakeBzImage fake;
    std::vector<uint8_t> image;
    std::string reason;
    SECTION("bad boot_flag") {
        image = fake.build();
        image[0x1fe] = 0;
        reason = "boot_flag";
    }
    SECTION("zImage (LOADED_HIGH clear)") {
        fake.loadflags = 0;
        image = fake.build();
        reason = "zImage";
    }
    SECTION("setup header too short to hold init_size") {
        fake.header_end_byte = 0x10;  // header ends at 0x212
        image = fake.build();
        reason = "before init_size";
    }
    SECTION("kernel_alignment not a power of two") {
        fake.kernel_alignment = 0x300000;
        image = fake.build();
        reason = "power of two";
    }
    SECTION("init_size larger than guest RAM") {
        fake.init_size = 0x7fffffff;
        image = fake.build();
        reason = "needs guest RAM";
    }
    SECTION("pref_address + init_size overflows") {
        fake.pref_address = UINT64_MAX - 0x10;
        image = fake.build();
        reason = "overflows";
    }
    SECTION("syssize promises more code than the file has") {
        image = fake.build();
        image.resize(image.size() - 16);
        reason = "syssize";
    }
    const std::string error = load_error(mem, image);
    CHECK_THAT(error, Catch::StartsWith("kernel image: "));
    CHECK_THAT(error, Catch::Contains(reason));
}

TEST_CASE("bzImage: every truncation of a valid image is rejected, none crashes", "[x86][kernel]") {
    auto mem = GuestMemory::create(128 * MiB);
    const auto image = FakeBzImage{}.build();
    for (size_t len = 0; len < image.size(); len += (len < 0x300 ? 1 : 61)) {
        CAPTURE(len);
        const std::vector<uint8_t> cut(image.begin(), image.begin() + static_cast<long>(len));
        CHECK_THAT(load_error(mem, cut), Catch::StartsWith("kernel image: "));
    }
    CHECK_THAT(load_error(mem, {image.begin(), image.end() - 1}), Catch::StartsWith("kernel image: "));
}

TEST_CASE("bzImage: randomly corrupted headers load or fail with an Error, never crash", "[x86][kernel]") {
    auto mem = GuestMemory::create(128 * MiB);
    const auto good = FakeBzImage{}.build();
    std::mt19937 rng(1234);
    std::uniform_int_distribution<size_t> offset(0x1f0, 0x270);
    std::uniform_int_distribution<int> byte(0, 255);
    for (int round = 0; round < 2000; ++round) {
        auto image = good;
        for (int flips = 0; flips < 3; ++flips) image[offset(rng)] = static_cast<uint8_t>(byte(rng));
        try {
            const LoadedKernel k = load_kernel(mem, image);
            CHECK(mem.contains(k.load_start, k.load_end.value - k.load_start.value));
        } catch (const Error&) {
        }
    }
}

TEST_CASE("an image that is neither bzImage nor ELF is rejected", "[x86][kernel]") {
    auto mem = GuestMemory::create(128 * MiB);
    CHECK_THAT(load_error(mem, std::vector<uint8_t>(4096, 0x90)), Catch::Contains("nor an ELF"));
    CHECK_THAT(load_error(mem, {}), Catch::Contains("empty"));
}

TEST_CASE("ELF: PT_LOAD segments go to p_paddr, memsz beyond filesz is zeroed", "[x86][kernel]") {
    auto mem = GuestMemory::create(128 * MiB);
    auto dirty = mem.slice(Gpa(0x1000000), 0x10000);
    std::fill(dirty.begin(), dirty.end(), uint8_t{0xcc});

    const auto image = make_elf(0x1000000, {
                                               {0x1000000, 0xffffffff81000000, 0x2345, 0x2345},
                                               {0x1004000, 0xffffffff81004000, 0x1000, 0x3000},
                                           });
    const LoadedKernel k = load_kernel(mem, image);
    CHECK_FALSE(k.bzimage);
    CHECK(k.entry == Gpa(0x1000000));
    CHECK(k.load_start == Gpa(0x1000000));
    CHECK(k.load_end == Gpa(0x1007000));
    CHECK(k.protocol_version == 0);
    CHECK(k.setup_header.empty());

    CHECK(guest_bytes_equal(mem, Gpa(0x1000000),
                            std::span(image).subspan(test::elf_segment_offset(image, 0), 0x2345)));
    CHECK(guest_bytes_equal(mem, Gpa(0x1004000),
                            std::span(image).subspan(test::elf_segment_offset(image, 1), 0x1000)));
    const auto bss = mem.slice(Gpa(0x1005000), 0x2000);
    CHECK(std::all_of(bss.begin(), bss.end(), [](uint8_t b) { return b == 0; }));
    CHECK(mem.read<uint8_t>(Gpa(0x1002345)) == 0xcc);  // the gap between segments is not touched
}

TEST_CASE("ELF: a virtual e_entry is translated through its PT_LOAD segment", "[x86][kernel]") {
    auto mem = GuestMemory::create(128 * MiB);
    const auto image = make_elf(0xffffffff81000040, {
                                                         {0x3044000, 0x0, 0x1000, 0x1000},  // percpu-style vaddr 0
                                                         {0x1000000, 0xffffffff81000000, 0x1000, 0x1000},
                                                     });
    CHECK(load_kernel(mem, image).entry == Gpa(0x1000040));
}

TEST_CASE("ELF: malformed or misplaced images are rejected with a reason", "[x86][kernel]") {
    auto mem = GuestMemory::create(128 * MiB);
    std::vector<uint8_t> image = make_elf(0x1000000, {{0x1000000, 0xffffffff81000000, 0x1000, 0x1000}});
    std::string reason;
    SECTION("segment outside guest RAM") {
        image = make_elf(0x1000000, {{0x1000000, 0, 0x1000, 0x1000}, {128 * MiB - 0x1000, 0, 0x1000, 0x2000}});
        reason = "outside guest RAM";
    }
    SECTION("segment in the MMIO hole of a big guest") {
        mem = GuestMemory::create(4096 * MiB);
        image = make_elf(0x1000000, {{0x1000000, 0, 0x1000, 0x1000}, {3 * GiB, 0, 0x1000, 0x1000}});
        reason = "outside guest RAM";
    }
    SECTION("segment below 1 MiB") {
        image = make_elf(0x1000000, {{0x1000000, 0, 0x1000, 0x1000}, {0x7000, 0, 0x100, 0x100}});
        reason = "below 1 MiB";
    }
    SECTION("segment data past the end of the file") {
        image.resize(image.size() - 1);
        reason = "truncated";
    }
    SECTION("p_filesz > p_memsz") {
        image = make_elf(0x1000000, {{0x1000000, 0, 0x2000, 0x1000}});
        reason = "p_filesz";
    }
    SECTION("entry point outside every segment") {
        image = make_elf(0x5000000, {{0x1000000, 0, 0x1000, 0x1000}});
        reason = "entry point";
    }
    SECTION("32-bit ELF") {
        image[EI_CLASS] = ELFCLASS32;
        reason = "64-bit";
    }
    SECTION("not x86-64") {
        image[offsetof(Elf64_Ehdr, e_machine)] = EM_AARCH64;
        reason = "not x86-64";
    }
    SECTION("program headers past the end of the file") {
        image[offsetof(Elf64_Ehdr, e_phoff) + 3] = 0x7f;
        reason = "truncated";
    }
    SECTION("no PT_LOAD") {
        image[sizeof(Elf64_Ehdr)] = PT_NULL;
        reason = "no PT_LOAD";
    }
    const std::string error = load_error(mem, image);
    CHECK_THAT(error, Catch::StartsWith("kernel image: "));
    CHECK_THAT(error, Catch::Contains(reason));
}

TEST_CASE("ELF: a rejected image leaves guest memory untouched", "[x86][kernel]") {
    auto mem = GuestMemory::create(128 * MiB);
    const auto image =
        make_elf(0x1000000, {{0x1000000, 0, 0x1000, 0x1000}, {200 * MiB, 0, 0x1000, 0x1000}});
    CHECK_THROWS_AS(load_kernel(mem, image), Error);
    CHECK(mem.read<uint64_t>(Gpa(0x1000000)) == 0);
}

TEST_CASE("ELF: every truncation of a valid image is rejected, none crashes", "[x86][kernel]") {
    auto mem = GuestMemory::create(128 * MiB);
    const auto image = make_elf(0x1000000, {{0x1000000, 0, 0x800, 0x1000}});
    for (size_t len = 0; len < image.size(); len += (len < 0x200 ? 1 : 37)) {
        CAPTURE(len);
        const std::vector<uint8_t> cut(image.begin(), image.begin() + static_cast<long>(len));
        CHECK_THAT(load_error(mem, cut), Catch::StartsWith("kernel image: "));
    }
}
