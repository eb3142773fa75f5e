// Internal to vmm/x86/: the boot GDT's descriptors, shared by write_gdt() (which puts
// them in guest memory) and setup_long_mode_sregs() (which loads the same values into
// the hidden segment registers), so the two can never disagree.
#pragma once

#include <linux/kvm.h>

#include <array>
#include <cstdint>

namespace nanovm::x86::gdt {

inline constexpr uint16_t kCodeSelector = 0x10;  ///< __BOOT_CS
inline constexpr uint16_t kDataSelector = 0x18;  ///< __BOOT_DS
inline constexpr uint16_t kTssSelector = 0x20;   ///< task register

/// 64-bit code: base 0, limit 0xfffff pages, P, DPL 0, S, type 0xb (execute/read,
/// accessed), G, L (long mode), D = 0.
inline constexpr uint64_t kCode64 = 0x00af9b000000ffff;
/// Flat data: base 0, limit 0xfffff pages, P, DPL 0, S, type 0x3 (read/write,
/// accessed), G, D/B.
inline constexpr uint64_t kData = 0x00cf93000000ffff;
/// Low half of a 64-bit TSS descriptor: base 0, limit 0x67, P, type 0xb (busy TSS).
/// The high half (base[63:32]) is 0. The kernel loads its own TSS; this one only
/// has to be valid.
inline constexpr uint64_t kTssLow = 0x00008b0000000067;

/// The table as written at layout::kGdt, indexed by selector / 8.
inline constexpr std::array<uint64_t, 6> kTable = {0, 0, kCode64, kData, kTssLow, 0};

/// The hidden segment-register state KVM wants for `descriptor` loaded with
/// `selector` (limit expanded to bytes when G is set; base bits 63:32 taken as 0).
kvm_segment segment_from_descriptor(uint64_t descriptor, uint16_t selector);

}  // namespace nanovm::x86::gdt
