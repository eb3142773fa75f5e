// write_identity_page_tables(): the 4-level page tables the kernel starts on. The
// 64-bit boot protocol needs the kernel, boot_params and the command line identity
// mapped; mapping all of [0, 4 GiB) with 2 MiB pages covers every one of them.
#include <array>
#include <cstdint>

#include "vmm/x86/boot.hpp"

namespace nanovm::x86 {

namespace {

constexpr uint64_t kPresent = 1ull << 0;
constexpr uint64_t kWritable = 1ull << 1;
constexpr uint64_t kPageSize2M = 1ull << 7;  ///< PS: this PD entry maps a 2 MiB page
constexpr uint64_t kEntries = 512;
constexpr uint64_t kPageDirectories = 4;     ///< one per GiB of [0, 4 GiB)

constexpr Gpa kPdpt = layout::kPml4 + kPageSize;
constexpr Gpa kFirstPd = kPdpt + kPageSize;
constexpr Gpa kTablesEnd = kFirstPd + kPageDirectories * kPageSize;

static_assert(layout::kPml4.value % kPageSize == 0);
static_assert(layout::kStackTop <= layout::kPml4.value, "the boot stack would grow into the page tables");
static_assert(kTablesEnd <= layout::kCmdline, "page tables overlap the command line");

using Table = std::array<uint64_t, kEntries>;

}  // namespace

uint64_t write_identity_page_tables(GuestMemory& mem) {
    Table pml4{};
    pml4[0] = kPdpt.value | kPresent | kWritable;
    mem.write(layout::kPml4, pml4);

    Table pdpt{};
    for (uint64_t i = 0; i < kPageDirectories; ++i)
        pdpt[i] = (kFirstPd.value + i * kPageSize) | kPresent | kWritable;
    mem.write(kPdpt, pdpt);

    for (uint64_t i = 0; i < kPageDirectories; ++i) {
        Table pd{};
        for (uint64_t j = 0; j < kEntries; ++j)
            pd[j] = ((i * kEntries + j) << 21) | kPresent | kWritable | kPageSize2M;
        mem.write(kFirstPd + i * kPageSize, pd);
    }
    return layout::kPml4.value;
}

}  // namespace nanovm::x86
