// write_gdt(), setup_long_mode_sregs(), boot_regs(), boot_msrs(): the CPU state at entry.
#include <catch2/catch.hpp>

#include <map>
#include <set>

#include "tests/unit/x86/gpa_printer.hpp"
#include "vmm/x86/boot.hpp"

using namespace nanovm;
using namespace nanovm::x86;

namespace {

uint64_t gdt_entry(const GuestMemory& mem, uint16_t selector) {
    return mem.read<uint64_t>(layout::kGdt + selector);
}

/// The test's own decoding of a descriptor, compared field by field with the sregs.
void check_matches_descriptor(const kvm_segment& s, uint64_t d, uint16_t selector) {
    CAPTURE(selector, d);
    CHECK(s.selector == selector);
    CHECK(s.base == (((d >> 16) & 0xffffff) | ((d >> 56) << 24)));
    const uint64_t raw_limit = (d & 0xffff) | (((d >> 48) & 0xf) << 16);
    CHECK(s.g == ((d >> 55) & 1));
    CHECK(s.limit == (s.g ? (raw_limit << 12 | 0xfff) : raw_limit));
    CHECK(s.type == ((d >> 40) & 0xf));
    CHECK(s.s == ((d >> 44) & 1));
    CHECK(s.dpl == ((d >> 45) & 3));
    CHECK(s.present == ((d >> 47) & 1));
    CHECK(s.l == ((d >> 53) & 1));
    CHECK(s.db == ((d >> 54) & 1));
    CHECK(s.unusable == 0);
}

kvm_sregs reset_like_sregs() {
    kvm_sregs sregs{};
    sregs.apic_base = 0xfee00900;  // what a fresh vCPU reports; must survive
    sregs.cr0 = 0x60000010;
    return sregs;
}

}  // namespace

TEST_CASE("GDT: null, null, 64-bit code at 0x10, data at 0x18, busy TSS at 0x20", "[x86][cpu]") {
    auto mem = GuestMemory::create(128 * MiB);
    write_gdt(mem);
    CHECK(gdt_entry(mem, 0x00) == 0);
    CHECK(gdt_entry(mem, 0x08) == 0);
    CHECK(gdt_entry(mem, 0x10) == 0x00af9b000000ffff);
    CHECK(gdt_entry(mem, 0x18) == 0x00cf93000000ffff);
    CHECK(gdt_entry(mem, 0x20) == 0x00008b0000000067);
    CHECK(gdt_entry(mem, 0x28) == 0);  // high half of the 16-byte TSS descriptor
    CHECK(mem.read<uint64_t>(layout::kIdt) == 0);
}

TEST_CASE("sregs: long mode with paging, CR3 = page tables, segments from the GDT", "[x86][cpu]") {
    auto mem = GuestMemory::create(128 * MiB);
    write_gdt(mem);
    kvm_sregs sregs = reset_like_sregs();
    setup_long_mode_sregs(sregs, 0x9000);

    CHECK(sregs.cr0 == 0x80050033);
    CHECK(sregs.cr3 == 0x9000);
    CHECK((sregs.cr4 & 0x20) == 0x20);  // PAE
    CHECK(sregs.efer == 0x500);         // LME | LMA
    CHECK(sregs.apic_base == 0xfee00900);

    CHECK(sregs.gdt.base == layout::kGdt.value);
    CHECK(sregs.gdt.limit == 6 * 8 - 1);
    CHECK(sregs.idt.base == layout::kIdt.value);
    CHECK(sregs.idt.limit == 0);
    CHECK(sregs.idt.base >= sregs.gdt.base + sregs.gdt.limit + 1);  // GDT and IDT do not overlap

    CHECK(sregs.cs.l == 1);
    CHECK(sregs.cs.db == 0);
    CHECK(sregs.cs.type == 0xb);
    CHECK(sregs.cs.limit == 0xffffffff);
    CHECK(sregs.ds.type == 0x3);
    CHECK(sregs.ds.db == 1);
    CHECK(sregs.tr.type == 0xb);
    CHECK(sregs.tr.s == 0);
    CHECK(sregs.tr.limit == 0x67);

    check_matches_descriptor(sregs.cs, gdt_entry(mem, 0x10), 0x10);
    for (const kvm_segment* s : {&sregs.ds, &sregs.es, &sregs.fs, &sregs.gs, &sregs.ss})
        check_matches_descriptor(*s, gdt_entry(mem, 0x18), 0x18);
    check_matches_descriptor(sregs.tr, gdt_entry(mem, 0x20), 0x20);
}

TEST_CASE("regs: RIP = entry, RSI = boot_params, stack below the page tables, IF clear", "[x86][cpu]") {
    const kvm_regs regs = boot_regs(Gpa(0x1000000));
    CHECK(regs.rip == 0x1000000);
    CHECK(regs.rsi == 0x7000);
    CHECK(regs.rsp == layout::kStackTop);
    CHECK(regs.rbp == layout::kStackTop);
    CHECK(regs.rflags == 0x2);
    CHECK(regs.rax == 0);
    CHECK(regs.rbx == 0);
    CHECK(regs.rdi == 0);
}

TEST_CASE("boot MSRs: syscall MSRs, fast strings, write-back MTRR default; TSC left to KVM (keeps vCPUs in sync)", "[x86][cpu]") {
    std::map<uint32_t, uint64_t> msrs;
    std::set<uint32_t> seen;
    for (const auto& e : boot_msrs()) {
        CHECK(seen.insert(e.index).second);  // no MSR twice
        msrs[e.index] = e.data;
    }
    const std::map<uint32_t, uint64_t> expected = {
        {0x174, 0}, {0x175, 0}, {0x176, 0},             // SYSENTER_CS/ESP/EIP
        {0xc0000081, 0}, {0xc0000082, 0}, {0xc0000083, 0}, {0xc0000084, 0},  // STAR LSTAR CSTAR SFMASK
        {0xc0000102, 0},                                // KERNEL_GS_BASE
        {0x1a0, 1},                                     // MISC_ENABLE: fast strings
        {0x2ff, 0x806},                                 // MTRRdefType: enabled, write-back
    };
    CHECK(msrs == expected);
}
