// Byte layout of the Linux x86 "zero page" (struct boot_params) and of the setup
// header inside it, written from the boot protocol (Documentation/arch/x86/boot.rst,
// zero-page.rst). Internal to vmm/x86/: the public API is boot.hpp.
// Every offset the loader relies on is pinned by a static_assert below.
#pragma once

#include <cstddef>
#include <cstdint>

namespace nanovm::x86::bootproto {

inline constexpr uint16_t kBootFlag = 0xaa55;          ///< setup_header.boot_flag
inline constexpr uint32_t kHeaderMagic = 0x53726448;   ///< "HdrS", little-endian
inline constexpr uint8_t kLoaderUndefined = 0xff;      ///< type_of_loader: "no assigned id"
inline constexpr uint16_t kHeapEnd = 0xfe00;           ///< heap_end_ptr we report (setup + heap)

// loadflags (setup_header.loadflags)
inline constexpr uint8_t kLoadedHigh = 0x01;  ///< protected-mode code loaded at 1 MiB
inline constexpr uint8_t kCanUseHeap = 0x80;  ///< heap_end_ptr is valid

// xloadflags (setup_header.xloadflags, protocol 2.12+)
inline constexpr uint16_t kXlfKernel64 = 0x0001;  ///< 64-bit entry at load address + 0x200

/// Offset of the setup header, both in the image file and in boot_params.
inline constexpr size_t kSetupHeaderOffset = 0x1f1;
/// Offset of the byte whose value + 0x202 is the end of the setup header.
inline constexpr size_t kHeaderEndByte = 0x201;
/// Space boot_params reserves for the setup header: [0x1f1, 0x290).
inline constexpr size_t kSetupHeaderSpace = 0x290 - kSetupHeaderOffset;

#pragma pack(push, 1)

/// struct setup_header as of boot protocol 2.15.
struct SetupHeader {
    uint8_t setup_sects;            // 0x1f1
    uint16_t root_flags;            // 0x1f2
    uint32_t syssize;               // 0x1f4
    uint16_t ram_size;              // 0x1f8
    uint16_t vid_mode;              // 0x1fa
    uint16_t root_dev;              // 0x1fc
    uint16_t boot_flag;             // 0x1fe
    uint16_t jump;                  // 0x200
    uint32_t header;                // 0x202 "HdrS"
    uint16_t version;               // 0x206
    uint32_t realmode_swtch;        // 0x208
    uint16_t start_sys_seg;         // 0x20c
    uint16_t kernel_version;        // 0x20e
    uint8_t type_of_loader;         // 0x210
    uint8_t loadflags;              // 0x211
    uint16_t setup_move_size;       // 0x212
    uint32_t code32_start;          // 0x214
    uint32_t ramdisk_image;         // 0x218
    uint32_t ramdisk_size;          // 0x21c
    uint32_t bootsect_kludge;       // 0x220
    uint16_t heap_end_ptr;          // 0x224
    uint8_t ext_loader_ver;         // 0x226
    uint8_t ext_loader_type;        // 0x227
    uint32_t cmd_line_ptr;          // 0x228
    uint32_t initrd_addr_max;       // 0x22c
    uint32_t kernel_alignment;      // 0x230
    uint8_t relocatable_kernel;     // 0x234
    uint8_t min_alignment;          // 0x235
    uint16_t xloadflags;            // 0x236
    uint32_t cmdline_size;          // 0x238
    uint32_t hardware_subarch;      // 0x23c
    uint64_t hardware_subarch_data; // 0x240
    uint32_t payload_offset;        // 0x248
    uint32_t payload_length;        // 0x24c
    uint64_t setup_data;            // 0x250
    uint64_t pref_address;          // 0x258
    uint32_t init_size;             // 0x260
    uint32_t handover_offset;       // 0x264
    uint32_t kernel_info_offset;    // 0x268
};

/// struct boot_e820_entry.
struct E820Raw {
    uint64_t addr;
    uint64_t size;
    uint32_t type;
};

inline constexpr size_t kE820MaxEntries = 128;  ///< E820_MAX_ENTRIES_ZEROPAGE

/// struct boot_params, the 4 KiB "zero page". Fields we never touch are byte arrays.
struct BootParams {
    uint8_t screen_info[0x40];          // 0x000
    uint8_t apm_bios_info[0x14];        // 0x040
    uint8_t pad2[4];                    // 0x054
    uint64_t tboot_addr;                // 0x058
    uint8_t ist_info[0x10];             // 0x060
    uint64_t acpi_rsdp_addr;            // 0x070
    uint8_t pad3[8];                    // 0x078
    uint8_t hd0_info[16];               // 0x080
    uint8_t hd1_info[16];               // 0x090
    uint8_t sys_desc_table[16];         // 0x0a0
    uint8_t olpc_ofw_header[16];        // 0x0b0
    uint32_t ext_ramdisk_image;         // 0x0c0
    uint32_t ext_ramdisk_size;          // 0x0c4
    uint32_t ext_cmd_line_ptr;          // 0x0c8
    uint8_t pad4[112];                  // 0x0cc
    uint32_t cc_blob_address;           // 0x13c
    uint8_t edid_info[0x80];            // 0x140
    uint8_t efi_info[0x20];             // 0x1c0
    uint32_t alt_mem_k;                 // 0x1e0
    uint32_t scratch;                   // 0x1e4
    uint8_t e820_entries;               // 0x1e8
    uint8_t eddbuf_entries;             // 0x1e9
    uint8_t edd_mbr_sig_buf_entries;    // 0x1ea
    uint8_t kbd_status;                 // 0x1eb
    uint8_t secure_boot;                // 0x1ec
    uint8_t pad5[2];                    // 0x1ed
    uint8_t sentinel;                   // 0x1ef
    uint8_t pad6[1];                    // 0x1f0
    SetupHeader hdr;                    // 0x1f1
    uint8_t pad7[kSetupHeaderSpace - sizeof(SetupHeader)];
    uint32_t edd_mbr_sig_buffer[16];    // 0x290
    E820Raw e820_table[kE820MaxEntries];  // 0x2d0
    uint8_t pad8[48];                   // 0xcd0
    uint8_t eddbuf[0x1ec];              // 0xd00
    uint8_t pad9[276];                  // 0xeec
};

#pragma pack(pop)

// Setup header offsets, as boot_params offsets (the file uses the same ones).
#define NANOVM_HDR_AT(field, off) \
    static_assert(offsetof(BootParams, hdr) + offsetof(SetupHeader, field) == (off), #field)
NANOVM_HDR_AT(setup_sects, 0x1f1);
NANOVM_HDR_AT(syssize, 0x1f4);
NANOVM_HDR_AT(vid_mode, 0x1fa);
NANOVM_HDR_AT(boot_flag, 0x1fe);
NANOVM_HDR_AT(jump, 0x200);
NANOVM_HDR_AT(header, 0x202);
NANOVM_HDR_AT(version, 0x206);
NANOVM_HDR_AT(type_of_loader, 0x210);
NANOVM_HDR_AT(loadflags, 0x211);
NANOVM_HDR_AT(code32_start, 0x214);
NANOVM_HDR_AT(ramdisk_image, 0x218);
NANOVM_HDR_AT(ramdisk_size, 0x21c);
NANOVM_HDR_AT(heap_end_ptr, 0x224);
NANOVM_HDR_AT(cmd_line_ptr, 0x228);
NANOVM_HDR_AT(initrd_addr_max, 0x22c);
NANOVM_HDR_AT(kernel_alignment, 0x230);
NANOVM_HDR_AT(relocatable_kernel, 0x234);
NANOVM_HDR_AT(xloadflags, 0x236);
NANOVM_HDR_AT(cmdline_size, 0x238);
NANOVM_HDR_AT(setup_data, 0x250);
NANOVM_HDR_AT(pref_address, 0x258);
NANOVM_HDR_AT(init_size, 0x260);
NANOVM_HDR_AT(kernel_info_offset, 0x268);
#undef NANOVM_HDR_AT
static_assert(sizeof(SetupHeader) == 0x26c - 0x1f1);

static_assert(offsetof(BootParams, ext_ramdisk_image) == 0x0c0);
static_assert(offsetof(BootParams, ext_ramdisk_size) == 0x0c4);
static_assert(offsetof(BootParams, ext_cmd_line_ptr) == 0x0c8);
static_assert(offsetof(BootParams, cc_blob_address) == 0x13c);
static_assert(offsetof(BootParams, e820_entries) == 0x1e8);
static_assert(offsetof(BootParams, sentinel) == 0x1ef);
static_assert(offsetof(BootParams, hdr) == 0x1f1);
static_assert(offsetof(BootParams, edd_mbr_sig_buffer) == 0x290);
static_assert(offsetof(BootParams, e820_table) == 0x2d0);
static_assert(offsetof(BootParams, eddbuf) == 0xd00);
static_assert(sizeof(E820Raw) == 20);
static_assert(sizeof(BootParams) == 4096);

}  // namespace nanovm::x86::bootproto
