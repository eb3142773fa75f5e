// load_initrd(): puts the initrd as high as the kernel allows in low guest RAM, as
// boot loaders traditionally do, so it stays clear of the kernel's decompression area.
#include <algorithm>

#include <fmt/format.h>

#include "vmm/error.hpp"
#include "vmm/x86/boot.hpp"

namespace nanovm::x86 {

Gpa load_initrd(GuestMemory& mem, const LoadedKernel& kernel, std::span<const uint8_t> initrd) {
    if (initrd.empty()) throw Error("initrd: the file is empty");
    const auto regions = mem.regions();
    if (regions.empty() || regions.front().gpa.value != 0) throw Error("initrd: guest has no low RAM");

    // initrd_addr_max is the highest address the initrd may occupy (inclusive).
    const uint64_t low_end = regions.front().gpa.value + regions.front().size;
    const uint64_t top = std::min(low_end, kernel.initrd_addr_max + 1);
    const uint64_t floor = (kernel.load_end.value + kPageSize - 1) & ~(kPageSize - 1);
    const uint64_t size = initrd.size();
    if (top < floor || top - floor < size)
        throw Error(fmt::format("initrd: {} bytes do not fit in guest RAM between the kernel's end {:#x} and {:#x}",
                                size, floor, top));
    const uint64_t start = (top - size) & ~(kPageSize - 1);
    mem.write_bytes(Gpa(start), initrd);
    return Gpa(start);
}

}  // namespace nanovm::x86
