// Loads a real guest kernel, if one is given: NANOVM_KERNEL_DIR=<dir> with bzImage
// and/or vmlinux in it (e.g. ~/.cache/nanovm/kernel/<hash>). Skipped when unset.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "tests/unit/x86/gpa_printer.hpp"
#include "vmm/x86/boot.hpp"

using namespace nanovm;
using namespace nanovm::x86;

namespace {

std::vector<uint8_t> read_file(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace

TEST_CASE("a real kernel from NANOVM_KERNEL_DIR loads and gets boot_params", "[x86][kernel][real]") {
    const char* dir = std::getenv("NANOVM_KERNEL_DIR");
    if (!dir) {
        WARN("NANOVM_KERNEL_DIR is not set: no real kernel to load");
        SUCCEED();
        return;
    }
    int loaded = 0;
    for (const char* name : {"bzImage", "vmlinux"}) {
        const std::filesystem::path path = std::filesystem::path(dir) / name;
        if (!std::filesystem::exists(path)) continue;
        CAPTURE(path.string());
        const auto image = read_file(path);
        auto mem = GuestMemory::create(512 * MiB);
        const LoadedKernel k = load_kernel(mem, image);
        // The project's bzImage (LZ4) is unpacked by the VMM and loaded as its vmlinux.
        CHECK((k.bzimage || k.unpacked_bzimage) == (std::string(name) == "bzImage"));
        CHECK(k.load_start >= Gpa(0x100000));
        CHECK(k.entry >= k.load_start);
        CHECK(k.entry < k.load_end);
        if (k.bzimage) {
            CHECK(k.entry == Gpa(0x100200));
            CHECK(k.protocol_version >= 0x020c);
        }
        const Gpa initrd = load_initrd(mem, k, std::vector<uint8_t>(1 * MiB, 0x42));
        write_boot_params(mem, k, "console=ttyS0 reboot=k panic=1", initrd, 1 * MiB);
        CHECK(mem.read<uint16_t>(layout::kBootParams + 0x1fe) == 0xaa55);
        CHECK(mem.read<uint32_t>(layout::kBootParams + 0x218) == initrd.value);
        ++loaded;
    }
    if (loaded == 0) WARN("no bzImage or vmlinux in " << dir);
}
