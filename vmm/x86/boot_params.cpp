// write_boot_params(): the zero page (struct boot_params) and the command line, as the
// 64-bit boot protocol asks: zeroed, the kernel's own setup header copied in (bzImage)
// or a minimal one (ELF), then the loader's fields: type_of_loader, cmd_line_ptr,
// ramdisk, e820_table.
#include <algorithm>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "vmm/error.hpp"
#include "vmm/x86/boot.hpp"
#include "vmm/x86/boot_params_layout.hpp"

namespace nanovm::x86 {

namespace {

using bootproto::BootParams;

constexpr uint16_t kElfProtocol = 0x020c;             ///< what we claim for a vmlinux
constexpr uint32_t kElfKernelAlignment = 0x1000000;   ///< 16 MiB, x86-64 CONFIG_PHYSICAL_ALIGN default
constexpr uint16_t kCmdlineSizeProtocol = 0x0206;     ///< cmdline_size exists from 2.06
constexpr uint64_t kLegacyCmdlineMax = 255;           ///< limit before protocol 2.06

static_assert(layout::kBootParams.value + sizeof(BootParams) <= layout::kPml4.value - 0x1000,
              "boot_params overlaps the boot stack / page tables");
static_assert(layout::kCmdline.value >= layout::kPml4.value + 6 * kPageSize, "command line overlaps page tables");
static_assert(layout::kCmdline.value + layout::kCmdlineMax <= layout::kMpTable.value);

void fill_header(BootParams& bp, const LoadedKernel& kernel) {
    if (!kernel.bzimage) {
        bp.hdr.boot_flag = bootproto::kBootFlag;
        bp.hdr.header = bootproto::kHeaderMagic;
        bp.hdr.version = kElfProtocol;
        bp.hdr.loadflags = bootproto::kLoadedHigh;
        bp.hdr.kernel_alignment = kElfKernelAlignment;
        bp.hdr.cmdline_size = static_cast<uint32_t>(layout::kCmdlineMax - 1);
        bp.hdr.initrd_addr_max = static_cast<uint32_t>(std::min<uint64_t>(kernel.initrd_addr_max, UINT32_MAX));
        return;
    }
    const auto& header = kernel.setup_header;
    if (header.size() < offsetof(bootproto::SetupHeader, version) + 2 || header.size() > bootproto::kSetupHeaderSpace)
        throw Error(fmt::format("boot_params: a bzImage setup header of {} bytes is impossible", header.size()));
    std::memcpy(reinterpret_cast<uint8_t*>(&bp) + bootproto::kSetupHeaderOffset, header.data(), header.size());
    bp.hdr.loadflags |= bootproto::kLoadedHigh | bootproto::kCanUseHeap;
    bp.hdr.heap_end_ptr = bootproto::kHeapEnd;
}

uint64_t max_cmdline(const BootParams& bp) {
    const uint64_t max = layout::kCmdlineMax - 1;
    const uint16_t version = bp.hdr.version;       // packed fields: copied out by value
    const uint64_t cmdline_size = bp.hdr.cmdline_size;
    return std::min(max, version < kCmdlineSizeProtocol ? kLegacyCmdlineMax : cmdline_size);
}

void write_cmdline(GuestMemory& mem, const BootParams& bp, std::string_view cmdline) {
    if (cmdline.find('\0') != std::string_view::npos) throw Error("kernel command line contains a NUL byte");
    const uint64_t max = max_cmdline(bp);
    if (cmdline.size() > max)
        throw Error(fmt::format("kernel command line is {} bytes; this kernel accepts at most {}", cmdline.size(), max));
    std::vector<uint8_t> buffer(layout::kCmdlineMax, 0);  // NUL-terminated and no stale bytes
    std::memcpy(buffer.data(), cmdline.data(), cmdline.size());
    mem.write_bytes(layout::kCmdline, buffer);
}

void fill_e820(BootParams& bp, const GuestMemory& mem) {
    const auto map = e820_map(mem);
    if (map.size() > bootproto::kE820MaxEntries)
        throw Error(fmt::format("boot_params: {} e820 entries exceed the zero page's {}", map.size(),
                                bootproto::kE820MaxEntries));
    for (size_t i = 0; i < map.size(); ++i) bp.e820_table[i] = {map[i].addr, map[i].size, map[i].type};
    bp.e820_entries = static_cast<uint8_t>(map.size());
}

}  // namespace

void write_boot_params(GuestMemory& mem, const LoadedKernel& kernel, std::string_view cmdline, Gpa initrd,
                       uint64_t initrd_size) {
    BootParams bp{};
    fill_header(bp, kernel);
    write_cmdline(mem, bp, cmdline);

    bp.hdr.type_of_loader = bootproto::kLoaderUndefined;
    bp.hdr.cmd_line_ptr = static_cast<uint32_t>(layout::kCmdline.value);
    bp.ext_cmd_line_ptr = static_cast<uint32_t>(layout::kCmdline.value >> 32);

    if (initrd_size != 0) {
        if (!mem.contains(initrd, initrd_size))
            throw Error(fmt::format("boot_params: initrd [{:#x}, +{:#x}) is outside guest RAM", initrd.value, initrd_size));
        bp.hdr.ramdisk_image = static_cast<uint32_t>(initrd.value);
        bp.ext_ramdisk_image = static_cast<uint32_t>(initrd.value >> 32);
        bp.hdr.ramdisk_size = static_cast<uint32_t>(initrd_size);
        bp.ext_ramdisk_size = static_cast<uint32_t>(initrd_size >> 32);
    }

    fill_e820(bp, mem);
    mem.write(layout::kBootParams, bp);
}

}  // namespace nanovm::x86
