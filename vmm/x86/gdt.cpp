// write_gdt(): the boot GDT (null, null, 64-bit code 0x10, data 0x18, TSS 0x20) and
// an empty IDT. The 64-bit boot protocol requires flat __BOOT_CS/__BOOT_DS descriptors.
#include "vmm/x86/gdt.hpp"

#include "vmm/x86/boot.hpp"

namespace nanovm::x86 {

namespace gdt {

static_assert(kTable[kCodeSelector / 8] == kCode64);
static_assert(kTable[kDataSelector / 8] == kData);
static_assert(kTable[kTssSelector / 8] == kTssLow);
static_assert(layout::kGdt.value + sizeof(kTable) <= layout::kIdt.value, "GDT overlaps the IDT");

kvm_segment segment_from_descriptor(uint64_t d, uint16_t selector) {
    kvm_segment s{};
    s.base = ((d >> 16) & 0xffffff) | (((d >> 56) & 0xff) << 24);
    const uint32_t limit = static_cast<uint32_t>((d & 0xffff) | (((d >> 48) & 0xf) << 16));
    s.g = static_cast<uint8_t>((d >> 55) & 1);
    s.limit = s.g ? (limit << 12) | 0xfff : limit;
    s.selector = selector;
    s.type = static_cast<uint8_t>((d >> 40) & 0xf);
    s.s = static_cast<uint8_t>((d >> 44) & 1);
    s.dpl = static_cast<uint8_t>((d >> 45) & 3);
    s.present = static_cast<uint8_t>((d >> 47) & 1);
    s.avl = static_cast<uint8_t>((d >> 52) & 1);
    s.l = static_cast<uint8_t>((d >> 53) & 1);
    s.db = static_cast<uint8_t>((d >> 54) & 1);
    s.unusable = s.present ? 0 : 1;
    return s;
}

}  // namespace gdt

void write_gdt(GuestMemory& mem) {
    mem.write(layout::kGdt, gdt::kTable);
    mem.write(layout::kIdt, uint64_t{0});  // empty IDT (limit 0): no gate is valid
}

}  // namespace nanovm::x86
