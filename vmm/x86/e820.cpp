// e820_map(): the guest's physical memory map as the kernel will see it.
#include <algorithm>

#include "vmm/x86/boot.hpp"

namespace nanovm::x86 {

std::vector<E820Entry> e820_map(const GuestMemory& mem) {
    const uint64_t ebda = layout::kEbdaStart.value;
    const uint64_t high = layout::kHighMemory.value;
    std::vector<E820Entry> map;
    for (const auto& region : mem.regions()) {
        const uint64_t start = region.gpa.value;
        const uint64_t end = start + region.size;
        if (start < ebda) {
            // Low RAM: [0, EBDA) usable, [EBDA, 1 MiB) reserved (MP table, legacy ROM
            // and VGA holes), the rest usable from 1 MiB.
            map.push_back({start, std::min(end, ebda) - start, kE820Ram});
            map.push_back({ebda, high - ebda, kE820Reserved});
            if (end > high) map.push_back({high, end - high, kE820Ram});
        } else {
            map.push_back({start, region.size, kE820Ram});
        }
    }
    return map;
}

}  // namespace nanovm::x86
