// x86-64 boot structures for a Linux guest: the pure, KVM-independent half of
// booting. Everything here writes into GuestMemory or fills KVM structs; nothing
// calls an ioctl, so all of it is unit-tested without /dev/kvm.
// Sources: Linux boot protocol (Documentation/arch/x86/boot.rst, "64-bit boot
// protocol"), Intel MP spec 1.4 (MP table), Intel SDM / AMD APM (CPUID, paging, GDT).
#pragma once

#include <linux/kvm.h>

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "vmm/address.hpp"
#include "vmm/guest_memory.hpp"

namespace nanovm::x86 {

/// Fixed guest-physical layout used for booting (all below 1 MiB except the kernel).
namespace layout {
inline constexpr Gpa kGdt{0x500};             ///< GDT: null, null, code64 0x10, data 0x18, TSS 0x20 (16 bytes): 48 bytes
inline constexpr Gpa kIdt{0x530};             ///< empty IDT (limit 0), right after the GDT
inline constexpr Gpa kBootParams{0x7000};     ///< struct boot_params ("zero page"), 4 KiB
inline constexpr Gpa kPml4{0x9000};           ///< identity page tables: PML4, PDPT, 4 PDs
inline constexpr Gpa kCmdline{0x20000};       ///< kernel command line, NUL-terminated
inline constexpr uint64_t kCmdlineMax = 4096; ///< bytes including the NUL
inline constexpr Gpa kMpTable{0x9fc00};       ///< MP floating pointer + config table (EBDA)
inline constexpr Gpa kEbdaStart{0x9fc00};     ///< e820: RAM below this, reserved from here to 1 MiB
inline constexpr Gpa kHighMemory{0x100000};   ///< 1 MiB: bzImage protected-mode kernel load address
inline constexpr uint64_t kStackTop = 0x8ff0; ///< initial RSP (below the page tables)
inline constexpr uint64_t kIoapicBase = 0xfec00000;
inline constexpr uint64_t kLapicBase = 0xfee00000;
}  // namespace layout

/// A kernel image loaded into guest memory.
struct LoadedKernel {
    Gpa entry;             ///< 64-bit entry point (RIP at start, RSI = boot_params)
    Gpa load_start;        ///< first byte of the loaded kernel
    Gpa load_end;          ///< one past the last byte the kernel occupies (incl. init_size/bss)
    bool bzimage = false;  ///< true: bzImage (setup header copied), false: ELF vmlinux
    bool unpacked_bzimage = false;  ///< an ELF vmlinux the VMM unpacked from a bzImage (bzimage false)
    uint16_t protocol_version = 0;  ///< boot protocol from the setup header; 0 for ELF
    uint64_t initrd_addr_max = 0;   ///< highest address the initrd may occupy (inclusive, as the boot protocol's field)
    std::vector<uint8_t> setup_header;  ///< bzImage: bytes 0x1f1.. of the image to copy into boot_params
};

/// Detects the format (bzImage by the "HdrS" magic at 0x202, ELF64 by its magic) and
/// loads it: bzImage protected-mode code at 1 MiB (needs boot protocol >= 2.12, the
/// first with xloadflags, and XLF_KERNEL_64), ELF PT_LOAD segments at their physical
/// addresses (p_paddr, all at or above 1 MiB; a virtual e_entry is translated). A
/// bzImage whose payload is an LZ4-compressed bare vmlinux is unpacked here and loaded
/// as that ELF (unpacked_bzimage), so the guest skips its decompressor.
/// Nothing is written to guest memory unless the whole image is valid.
/// Throws Error("kernel image: <why>") for anything malformed, truncated, or that does
/// not fit in guest RAM.
LoadedKernel load_kernel(GuestMemory& mem, std::span<const uint8_t> image);

/// Places the initrd in guest RAM: as high as possible below min(initrd_addr_max,
/// top of low RAM), page-aligned, above the kernel. Returns its GPA.
/// Throws Error("initrd: ...") if it does not fit or is empty.
Gpa load_initrd(GuestMemory& mem, const LoadedKernel& kernel, std::span<const uint8_t> initrd);

/// One e820 entry (Linux boot protocol "e820_table").
struct E820Entry {
    uint64_t addr;  ///< GPA, bytes
    uint64_t size;  ///< bytes
    uint32_t type;  ///< 1 = RAM, 2 = reserved
    bool operator==(const E820Entry&) const = default;
};
inline constexpr uint32_t kE820Ram = 1;
inline constexpr uint32_t kE820Reserved = 2;

/// The e820 map for a guest with the given memory layout: RAM [0, EBDA), reserved
/// [EBDA, 1 MiB), RAM [1 MiB, end of low region), RAM above 4 GiB if present.
std::vector<E820Entry> e820_map(const GuestMemory& mem);

/// Writes boot_params (zero page) at layout::kBootParams and the command line at
/// layout::kCmdline: setup header (bzImage) or a minimal one (ELF), type_of_loader
/// 0xff, cmd_line_ptr, initrd (ramdisk_image/size, ext_ramdisk_*), e820_table.
/// `initrd` may be empty (size 0). Throws Error if the command line is longer than the
/// kernel's cmdline_size (bzImage) or kCmdlineMax - 1, or contains a NUL byte.
void write_boot_params(GuestMemory& mem, const LoadedKernel& kernel, std::string_view cmdline,
                       Gpa initrd, uint64_t initrd_size);

/// Identity-maps [0, 4 GiB) with 2 MiB pages at layout::kPml4 (PML4, PDPT, 4 PDs).
/// Returns the CR3 value.
uint64_t write_identity_page_tables(GuestMemory& mem);

/// Writes the boot GDT (null, 64-bit code 0x10, data 0x18, TSS 0x20) and an empty IDT.
void write_gdt(GuestMemory& mem);

/// Writes an MP floating pointer structure and MP configuration table (MP spec 1.4)
/// at layout::kMpTable: one processor entry per vCPU (APIC ID = index, BSP = 0), one
/// ISA bus, one IOAPIC (id = vcpus, at kIoapicBase), I/O interrupt entries for IRQ
/// 0..23, local interrupt entries (ExtINT on LINT0, NMI on LINT1). Checksums valid.
/// Throws Error if vcpus is 0 or > 32.
void write_mptable(GuestMemory& mem, uint32_t vcpus);

/// Special registers for entering the kernel in 64-bit long mode: CR0 (PE|PG|...),
/// CR3 = cr3, CR4 (PAE), EFER (LME|LMA), flat 64-bit CS (selector 0x10), data
/// segments (0x18), TR (0x20), GDT/IDT bases from layout. Other fields of `sregs`
/// (as read from the vCPU, e.g. apic_base) are kept.
void setup_long_mode_sregs(kvm_sregs& sregs, uint64_t cr3);

/// General registers at kernel entry: RIP = entry, RSI = boot_params, RSP/RBP =
/// layout::kStackTop, RFLAGS = 0x2.
kvm_regs boot_regs(Gpa entry);

/// MSR values to set on every vCPU at boot (SYSENTER_*, STAR, LSTAR, CSTAR,
/// SYSCALL_MASK, KERNEL_GS_BASE, MISC_ENABLE fast-strings,
/// MTRRdefType write-back).
std::vector<kvm_msr_entry> boot_msrs();

/// Adjusts KVM_GET_SUPPORTED_CPUID output for vCPU `index` of `count`: APIC ID =
/// index in leaf 1 EBX[31:24] (+ logical count), leaf 0xB/0x1F x2APIC IDs and
/// topology (one core per vCPU, one thread per core), leaf 4 core counts (Intel),
/// leaf 0x8000001E / 0x80000008 (AMD), hypervisor bit in leaf 1 ECX[31], KVM
/// paravirt leaves kept. Throws Error if index >= count.
void patch_cpuid(std::vector<kvm_cpuid_entry2>& entries, uint32_t index, uint32_t count);

}  // namespace nanovm::x86
