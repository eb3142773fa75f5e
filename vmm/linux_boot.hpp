// Booting a Linux kernel on a Machine (x86-64 64-bit boot protocol): first place the
// kernel, initrd and boot structures in guest memory (no KVM needed, so a bad image
// is reported before /dev/kvm is touched), then set up the vCPUs.
// Source: Documentation/arch/x86/boot.rst; Firecracker's and kvmtool's x86 set-up.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "vmm/address.hpp"
#include "vmm/guest_memory.hpp"
#include "vmm/kvm.hpp"
#include "vmm/machine.hpp"

namespace nanovm {

/// Where load_linux put things.
struct LinuxLayout {
    Gpa entry;                 ///< 64-bit kernel entry point
    uint64_t cr3 = 0;          ///< identity page tables
    Gpa initrd;                ///< initrd GPA (0 if none)
    uint64_t initrd_size = 0;  ///< bytes (0 if none)
    uint32_t vcpus = 0;        ///< vCPUs described in the MP table
    Gpa kernel_start;          ///< first byte of the loaded kernel
    Gpa kernel_end;            ///< one past its last byte (bss and init_size included)
};

/// A kernel or initrd image and the name to use for it in messages (its path).
struct BootImage {
    std::span<const uint8_t> bytes;
    std::string_view name;
};

/// Loads `kernel` (bzImage or ELF vmlinux) and `initrd` (may be empty) into `memory`
/// and writes boot_params + `cmdline`, the identity page tables, the GDT/IDT and the
/// MP table for `vcpus` CPUs. Throws Error("<kernel name>: kernel image: ...") or
/// Error("<initrd name>: initrd: ...") for an image that is malformed or does not fit,
/// Error for a command line that is too long.
LinuxLayout load_linux(GuestMemory& memory, BootImage kernel, BootImage initrd, std::string_view cmdline,
                       uint32_t vcpus);

/// Prepares every vCPU of `machine` to boot the kernel placed by load_linux:
/// per-vCPU CPUID (KVM_GET_SUPPORTED_CPUID, + the TSC-deadline timer when KVM has
/// KVM_CAP_TSC_DEADLINE_TIMER, patched by x86::patch_cpuid), boot MSRs;
/// on the BSP (vCPU 0) LAPIC LINT0 = ExtINT and LINT1 = NMI, 64-bit long-mode sregs,
/// registers (RIP = entry, RSI = boot_params), FPU (FCW 0x37f, MXCSR 0x1f80); the APs
/// wait in KVM_MP_STATE_UNINITIALIZED for the kernel's INIT/SIPI. Needs the in-kernel
/// irqchip and machine.vcpu_count() == layout.vcpus. Throws Error / SysError.
void setup_linux_vcpus(Machine& machine, const Kvm& kvm, const LinuxLayout& layout);

}  // namespace nanovm
