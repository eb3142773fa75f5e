// Register state at kernel entry (64-bit boot protocol): long mode with paging on,
// flat __BOOT_CS/__BOOT_DS from our GDT, RSI = boot_params, interrupts off; plus
// the MSRs every vCPU starts with.
#include "vmm/x86/boot.hpp"
#include "vmm/x86/gdt.hpp"

namespace nanovm::x86 {

namespace {

// CR0: PE | MP | ET | NE | WP | AM | PG
constexpr uint64_t kCr0 = (1ull << 0) | (1ull << 1) | (1ull << 4) | (1ull << 5) | (1ull << 16) | (1ull << 18) |
                          (1ull << 31);
static_assert(kCr0 == 0x80050033);
constexpr uint64_t kCr4Pae = 1ull << 5;
constexpr uint64_t kEferLme = 1ull << 8;
constexpr uint64_t kEferLma = 1ull << 10;
constexpr uint64_t kRflagsReserved = 1ull << 1;  ///< bit 1 always reads 1; IF = 0

// MSR indices (Intel SDM vol. 4; the same numbers on AMD).
constexpr uint32_t kMsrSysenterCs = 0x174;
constexpr uint32_t kMsrSysenterEsp = 0x175;
constexpr uint32_t kMsrSysenterEip = 0x176;
constexpr uint32_t kMsrMiscEnable = 0x1a0;
constexpr uint32_t kMsrMtrrDefType = 0x2ff;
constexpr uint32_t kMsrStar = 0xc0000081;
constexpr uint32_t kMsrLstar = 0xc0000082;
constexpr uint32_t kMsrCstar = 0xc0000083;
constexpr uint32_t kMsrSyscallMask = 0xc0000084;
constexpr uint32_t kMsrKernelGsBase = 0xc0000102;

constexpr uint64_t kMiscEnableFastStrings = 1ull << 0;
constexpr uint64_t kMtrrEnable = 1ull << 11;
constexpr uint64_t kMtrrTypeWriteBack = 6;

kvm_msr_entry msr(uint32_t index, uint64_t data) {
    kvm_msr_entry e{};
    e.index = index;
    e.data = data;
    return e;
}

}  // namespace

void setup_long_mode_sregs(kvm_sregs& sregs, uint64_t cr3) {
    sregs.gdt.base = layout::kGdt.value;
    sregs.gdt.limit = static_cast<uint16_t>(sizeof(gdt::kTable) - 1);
    sregs.idt.base = layout::kIdt.value;
    sregs.idt.limit = 0;

    sregs.cs = gdt::segment_from_descriptor(gdt::kCode64, gdt::kCodeSelector);
    const kvm_segment data = gdt::segment_from_descriptor(gdt::kData, gdt::kDataSelector);
    sregs.ds = data;
    sregs.es = data;
    sregs.fs = data;
    sregs.gs = data;
    sregs.ss = data;
    sregs.tr = gdt::segment_from_descriptor(gdt::kTssLow, gdt::kTssSelector);

    sregs.cr0 = kCr0;
    sregs.cr3 = cr3;
    sregs.cr4 = kCr4Pae;
    sregs.efer = kEferLme | kEferLma;
}

kvm_regs boot_regs(Gpa entry) {
    kvm_regs regs{};
    regs.rip = entry.value;
    regs.rsi = layout::kBootParams.value;
    regs.rsp = layout::kStackTop;
    regs.rbp = layout::kStackTop;
    regs.rflags = kRflagsReserved;
    return regs;
}

std::vector<kvm_msr_entry> boot_msrs() {
    return {
        msr(kMsrSysenterCs, 0),
        msr(kMsrSysenterEsp, 0),
        msr(kMsrSysenterEip, 0),
        msr(kMsrStar, 0),
        msr(kMsrLstar, 0),
        msr(kMsrCstar, 0),
        msr(kMsrSyscallMask, 0),
        msr(kMsrKernelGsBase, 0),
        msr(kMsrMiscEnable, kMiscEnableFastStrings),
        msr(kMsrMtrrDefType, kMtrrEnable | kMtrrTypeWriteBack),
    };
}

}  // namespace nanovm::x86
