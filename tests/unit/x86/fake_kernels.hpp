// Synthetic kernel images for the x86 boot tests: a bzImage with a valid setup header
// and a patterned payload, and an ELF64 vmlinux with chosen PT_LOAD segments. Built
// byte by byte from the boot protocol / ELF spec offsets, independently of the
// loader's own layout structs.
#pragma once

#include <elf.h>

#include <cstdint>
#include <cstring>
#include <vector>

namespace nanovm::x86::test {

template <typename T>
inline void put(std::vector<uint8_t>& bytes, size_t offset, T value) {
    std::memcpy(bytes.data() + offset, &value, sizeof value);
}

inline uint8_t pattern(size_t i) { return static_cast<uint8_t>(i * 7 + 3); }

/// A bzImage whose header fields can be varied one at a time.
struct FakeBzImage {
    uint8_t setup_sects = 4;
    uint16_t version = 0x020f;
    uint8_t loadflags = 0x01;          // LOADED_HIGH
    uint16_t xloadflags = 0x0001;      // XLF_KERNEL_64
    uint8_t header_end_byte = 0x6a;    // header ends at 0x202 + 0x6a = 0x26c
    uint32_t kernel_alignment = 0x200000;
    uint8_t relocatable = 1;
    uint32_t cmdline_size = 0x7ff;
    uint32_t initrd_addr_max = 0x7fffffff;
    uint64_t pref_address = 0x1000000;
    uint32_t init_size = 0x800000;     // 8 MiB
    size_t payload_size = 0x3000;

    size_t setup_size() const { return (size_t{setup_sects ? setup_sects : uint8_t{4}} + 1) * 512; }

    std::vector<uint8_t> build() const {
        std::vector<uint8_t> image(setup_size() + payload_size, 0);
        for (size_t i = 0; i < image.size(); ++i) image[i] = pattern(i);
        image[0x1ef] = 0x5a;  // boot_params.sentinel's byte in the file: must not leak
        image[0x1f1] = setup_sects;
        put<uint32_t>(image, 0x1f4, static_cast<uint32_t>(payload_size / 16));  // syssize
        put<uint16_t>(image, 0x1fa, 0xffff);                                    // vid_mode
        put<uint16_t>(image, 0x1fe, 0xaa55);
        image[0x200] = 0xeb;  // jmp short
        image[0x201] = header_end_byte;
        std::memcpy(image.data() + 0x202, "HdrS", 4);
        put<uint16_t>(image, 0x206, version);
        image[0x210] = 0;  // type_of_loader
        image[0x211] = loadflags;
        put<uint32_t>(image, 0x218, 0);  // ramdisk_image
        put<uint32_t>(image, 0x21c, 0);  // ramdisk_size
        put<uint16_t>(image, 0x224, 0);  // heap_end_ptr
        put<uint32_t>(image, 0x228, 0);  // cmd_line_ptr
        put<uint32_t>(image, 0x22c, initrd_addr_max);
        put<uint32_t>(image, 0x230, kernel_alignment);
        image[0x234] = relocatable;
        put<uint16_t>(image, 0x236, xloadflags);
        put<uint32_t>(image, 0x238, cmdline_size);
        put<uint64_t>(image, 0x250, 0);  // setup_data
        put<uint64_t>(image, 0x258, pref_address);
        put<uint32_t>(image, 0x260, init_size);
        return image;
    }
};

/// One PT_LOAD segment of a fake vmlinux.
struct FakeSegment {
    uint64_t paddr;
    uint64_t vaddr;
    uint64_t filesz;
    uint64_t memsz;
};

/// An ELF64 x86-64 executable with the given segments (data patterned by file offset).
inline std::vector<uint8_t> make_elf(uint64_t entry, const std::vector<FakeSegment>& segments) {
    const size_t phoff = sizeof(Elf64_Ehdr);
    std::vector<uint8_t> image(0x1000, 0);  // headers; segment data from 0x1000, page-aligned

    Elf64_Ehdr eh{};
    std::memcpy(eh.e_ident, ELFMAG, SELFMAG);
    eh.e_ident[EI_CLASS] = ELFCLASS64;
    eh.e_ident[EI_DATA] = ELFDATA2LSB;
    eh.e_ident[EI_VERSION] = EV_CURRENT;
    eh.e_type = ET_EXEC;
    eh.e_machine = EM_X86_64;
    eh.e_version = EV_CURRENT;
    eh.e_entry = entry;
    eh.e_phoff = phoff;
    eh.e_ehsize = sizeof(Elf64_Ehdr);
    eh.e_phentsize = sizeof(Elf64_Phdr);
    eh.e_phnum = static_cast<uint16_t>(segments.size() + 1);  // + a PT_NOTE the loader must skip
    std::memcpy(image.data(), &eh, sizeof eh);

    for (size_t i = 0; i < segments.size(); ++i) {
        const auto& s = segments[i];
        const size_t data_offset = (image.size() + 0xfff) & ~size_t{0xfff};
        Elf64_Phdr ph{};
        ph.p_type = PT_LOAD;
        ph.p_flags = PF_R | PF_X;
        ph.p_offset = data_offset;
        ph.p_vaddr = s.vaddr;
        ph.p_paddr = s.paddr;
        ph.p_filesz = s.filesz;
        ph.p_memsz = s.memsz;
        ph.p_align = 0x1000;
        std::memcpy(image.data() + phoff + i * sizeof ph, &ph, sizeof ph);
        image.resize(data_offset + s.filesz, 0);  // no padding after the last segment
        for (size_t b = 0; b < s.filesz; ++b) image[data_offset + b] = pattern(data_offset + b);
    }
    Elf64_Phdr note{};
    note.p_type = PT_NOTE;
    note.p_offset = 0x800;
    note.p_filesz = 0x10;
    std::memcpy(image.data() + phoff + segments.size() * sizeof note, &note, sizeof note);
    return image;
}

/// File offset of segment `i`'s data in an image from make_elf.
inline uint64_t elf_segment_offset(const std::vector<uint8_t>& image, size_t i) {
    Elf64_Phdr ph;
    std::memcpy(&ph, image.data() + sizeof(Elf64_Ehdr) + i * sizeof ph, sizeof ph);
    return ph.p_offset;
}

}  // namespace nanovm::x86::test
