// ELF vmlinux loading: PT_LOAD segments are copied to their physical addresses
// (p_paddr), the rest of each segment (p_memsz - p_filesz) is zeroed, and the kernel
// is entered at e_entry in 64-bit mode (startup_64). x86-64 vmlinux links its entry
// as a physical address (ENTRY(phys_startup_64)); a virtual e_entry is translated
// through the PT_LOAD segment whose virtual range contains it.
#include <elf.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "vmm/x86/boot.hpp"
#include "vmm/x86/kernel_formats.hpp"

namespace nanovm::x86::detail {

namespace {

/// What the kernel header would say if vmlinux had one (boot.rst: 0x7fffffff is
/// the value every 2.03+ kernel reports).
constexpr uint64_t kElfInitrdAddrMax = 0x7fffffff;

struct Segment {
    uint64_t offset, filesz, memsz, paddr, vaddr;
    bool contains_phys(uint64_t a) const { return a >= paddr && a - paddr < memsz; }
    bool contains_virt(uint64_t a) const { return a >= vaddr && a - vaddr < memsz; }
};

Elf64_Ehdr read_header(std::span<const uint8_t> image) {
    const auto eh = read_at<Elf64_Ehdr>(image, 0, "ELF header");
    if (eh.e_ident[EI_CLASS] != ELFCLASS64) image_error("ELF file is not 64-bit (ELFCLASS64)");
    if (eh.e_ident[EI_DATA] != ELFDATA2LSB) image_error("ELF file is not little-endian");
    if (eh.e_machine != EM_X86_64) image_error(fmt::format("ELF machine {} is not x86-64 ({})", eh.e_machine, EM_X86_64));
    if (eh.e_type != ET_EXEC) image_error(fmt::format("ELF type {} is not an executable (ET_EXEC)", eh.e_type));
    if (eh.e_phentsize != sizeof(Elf64_Phdr))
        image_error(fmt::format("ELF program header size {} is not {}", eh.e_phentsize, sizeof(Elf64_Phdr)));
    if (eh.e_phnum == 0 || eh.e_phnum == PN_XNUM) image_error("ELF file has no program headers");
    return eh;
}

std::vector<Segment> read_segments(const GuestMemory& mem, std::span<const uint8_t> image, const Elf64_Ehdr& eh) {
    std::vector<Segment> segments;
    for (uint64_t i = 0; i < eh.e_phnum; ++i) {
        const uint64_t at = checked_add(eh.e_phoff, i * sizeof(Elf64_Phdr), "e_phoff");
        const auto ph = read_at<Elf64_Phdr>(image, at, fmt::format("program header {}", i));
        if (ph.p_type != PT_LOAD || ph.p_memsz == 0) continue;
        const Segment s{ph.p_offset, ph.p_filesz, ph.p_memsz, ph.p_paddr, ph.p_vaddr};
        if (s.filesz > s.memsz)
            image_error(fmt::format("segment {}: p_filesz {:#x} > p_memsz {:#x}", i, s.filesz, s.memsz));
        if (checked_add(s.offset, s.filesz, "p_offset + p_filesz") > image.size())
            throw_truncated(fmt::format("segment {}", i), s.offset, s.filesz, image.size());
        if (s.paddr < layout::kHighMemory.value)
            image_error(fmt::format("segment {} at {:#x} overlaps the boot area below 1 MiB", i, s.paddr));
        if (!mem.contains(Gpa(s.paddr), s.memsz))
            image_error(fmt::format("segment {} [{:#x}, {:#x}) is outside guest RAM", i, s.paddr,
                                    checked_add(s.paddr, s.memsz, "p_paddr + p_memsz")));
        segments.push_back(s);
    }
    if (segments.empty()) image_error("ELF file has no PT_LOAD segment");
    return segments;
}

uint64_t physical_entry(const std::vector<Segment>& segments, uint64_t entry) {
    for (const auto& s : segments)
        if (s.contains_phys(entry)) return entry;
    for (const auto& s : segments)
        if (s.contains_virt(entry)) return s.paddr + (entry - s.vaddr);
    image_error(fmt::format("entry point {:#x} is in no PT_LOAD segment", entry));
}

}  // namespace

bool is_elf(std::span<const uint8_t> image) {
    return image.size() >= SELFMAG && std::memcmp(image.data(), ELFMAG, SELFMAG) == 0;
}

LoadedKernel load_elf(GuestMemory& mem, std::span<const uint8_t> image) {
    const Elf64_Ehdr eh = read_header(image);
    // Everything is validated before the first byte is written to guest memory.
    const std::vector<Segment> segments = read_segments(mem, image, eh);
    const uint64_t entry = physical_entry(segments, eh.e_entry);

    LoadedKernel kernel;
    kernel.load_start = Gpa(UINT64_MAX);
    for (const auto& s : segments) {
        mem.prefault_for_write(Gpa(s.paddr), s.memsz);  // ~20 MiB for a kernel: ~5,000 page faults less
        mem.write_bytes(Gpa(s.paddr), image.subspan(s.offset, s.filesz));
        auto bss = mem.slice(Gpa(s.paddr + s.filesz), s.memsz - s.filesz);
        std::fill(bss.begin(), bss.end(), uint8_t{0});
        kernel.load_start = std::min(kernel.load_start, Gpa(s.paddr));
        kernel.load_end = std::max(kernel.load_end, Gpa(s.paddr + s.memsz));
    }
    kernel.entry = Gpa(entry);
    kernel.bzimage = false;
    kernel.protocol_version = 0;
    kernel.initrd_addr_max = kElfInitrdAddrMax;
    return kernel;
}

}  // namespace nanovm::x86::detail
