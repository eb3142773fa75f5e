#include "vmm/guest_memory.hpp"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <utility>

#include <fmt/format.h>

#include "vmm/error.hpp"

namespace nanovm {

namespace {

constexpr uint64_t kPmdBytes = 2 * MiB;

/// `size` bytes of address space (PROT_NONE) starting on a 2 MiB boundary. With
/// `guard_below`, the page below the start stays reserved as well (PROT_NONE, for the
/// life of the process: 4 KiB of address space, no memory), so that no later mapping
/// can end on that 2 MiB boundary: glibc puts the next thread's 8 MiB stack right
/// below the RAM, and a stack whose top 2 MiB block is whole and aligned takes a
/// transparent huge page at its first touch where THP is "always" (2 MiB of RSS for a
/// few KiB of stack: the boot bench's VMM in the test host, 2026-12-01 and -02).
uint8_t* reserve_aligned(uint64_t size, bool guard_below = false) {
    const uint64_t guard = guard_below ? kPageSize : 0;
    const uint64_t reserved = size + kPmdBytes + guard;
    void* base = ::mmap(nullptr, reserved, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (base == MAP_FAILED) throw_errno("mmap(reserve guest RAM address space)");
    const uintptr_t b = reinterpret_cast<uintptr_t>(base);
    const uintptr_t a = (b + guard + kPmdBytes - 1) & ~(kPmdBytes - 1);
    if (a - guard > b) ::munmap(base, a - guard - b);
    if (b + reserved > a + size) ::munmap(reinterpret_cast<void*>(a + size), b + reserved - (a + size));
    return reinterpret_cast<uint8_t*>(a);
}

MemoryRegion map_region(Gpa gpa, uint64_t size, uint32_t slot) {
    MemoryRegion region;
    region.gpa = gpa;
    region.size = size;
    region.slot = slot;
    const std::string name = fmt::format("nanovm-ram-{:#x}", gpa.value);
    // Sealable: a fork seals it (F_SEAL_WRITE) once nobody maps it shared any more.
    region.memfd = Fd(::memfd_create(name.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING));
    if (!region.memfd) throw_errno("memfd_create");
    if (::ftruncate(region.memfd.get(), static_cast<off_t>(size)) != 0) throw_errno("ftruncate(guest RAM)");
    // 2 MiB aligned, so that a fork's mremap moves whole page tables (move_pgt_entry)
    // and huge pages can back it.
    uint8_t* at = reserve_aligned(size, /*guard_below=*/true);
    void* host = ::mmap(at, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE | MAP_FIXED,
                        region.memfd.get(), 0);
    if (host == MAP_FAILED) {
        const int err = errno;
        ::munmap(at, size);
        throw SysError("mmap(guest RAM)", err);
    }
    region.host = static_cast<uint8_t*>(host);
    // Transparent huge pages for guest RAM where the host gives shmem huge pages on
    // request (/sys/kernel/mm/transparent_hugepage/shmem_enabled "advise"; "always" and
    // "within_size" need no request; "never", Linux's default, ignores it). KVM maps
    // the guest's 2 MiB pages in one nested page fault each instead of 512: a boot
    // touches ~40 MiB, ~8k faults at 4 KiB. Failure only costs that speed.
    (void)::madvise(host, size, MADV_HUGEPAGE);
    return region;
}

}  // namespace

std::vector<GuestMemory::Extent> GuestMemory::layout(uint64_t ram_bytes) {
    if (ram_bytes == 0 || ram_bytes % kPageSize != 0)
        throw Error(fmt::format("guest RAM size {} is not a positive multiple of {} bytes", ram_bytes, kPageSize));
    std::vector<Extent> extents;
    const uint64_t low = std::min(ram_bytes, kMmioHoleStart);
    extents.push_back({Gpa(0), low});
    if (ram_bytes > low) extents.push_back({Gpa(kHighRamStart), ram_bytes - low});
    return extents;
}

GuestMemory GuestMemory::create(uint64_t ram_bytes) {
    GuestMemory mem;
    uint32_t slot = 0;
    for (const Extent& extent : layout(ram_bytes)) mem.regions_.push_back(map_region(extent.gpa, extent.size, slot++));
    mem.ram_bytes_ = ram_bytes;
    return mem;
}

GuestMemory GuestMemory::map_file_private(int fd, uint64_t ram_bytes, uint64_t data_offset) {
    if (data_offset % kPageSize != 0)
        throw Error(fmt::format("memory file data offset {} is not a multiple of {} bytes", data_offset, kPageSize));
    GuestMemory mem;
    mem.backing_ = Backing::private_file;
    uint64_t offset = data_offset;
    uint32_t slot = 0;
    for (const Extent& extent : layout(ram_bytes)) {
        MemoryRegion region;
        region.gpa = extent.gpa;
        region.size = extent.size;
        region.slot = slot++;
        region.file_offset = offset;
        region.memfd = Fd(::fcntl(fd, F_DUPFD_CLOEXEC, 0));
        if (!region.memfd) throw_errno("dup(memory file)");
        void* host = ::mmap(nullptr, extent.size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_NORESERVE, fd,
                            static_cast<off_t>(offset));
        if (host == MAP_FAILED) throw_errno("mmap(memory file, MAP_PRIVATE)");
        region.host = static_cast<uint8_t*>(host);
        mem.regions_.push_back(std::move(region));
        offset += extent.size;
    }
    mem.ram_bytes_ = ram_bytes;
    return mem;
}

namespace {

/// dup(fd) after checking it is at least `size` bytes (fstat).
Fd dup_sized(int fd, uint64_t size, size_t index) {
    struct stat st {};
    if (::fstat(fd, &st) != 0) throw_errno(fmt::format("fstat(guest RAM memfd {})", index));
    if (static_cast<uint64_t>(st.st_size) < size)
        throw Error(fmt::format("guest RAM memfd {} holds {} bytes, its region needs {}", index, st.st_size, size));
    Fd copy(::fcntl(fd, F_DUPFD_CLOEXEC, 0));
    if (!copy) throw_errno("dup(guest RAM memfd)");
    return copy;
}

}  // namespace

GuestMemory GuestMemory::map_memfds_private(std::span<const int> memfds, uint64_t ram_bytes) {
    const std::vector<Extent> extents = layout(ram_bytes);
    if (memfds.size() != extents.size())
        throw Error(fmt::format("{} guest RAM memfds for {} regions", memfds.size(), extents.size()));
    GuestMemory mem;
    mem.backing_ = Backing::private_memfd;
    mem.ram_bytes_ = ram_bytes;
    for (size_t k = 0; k < extents.size(); ++k) {
        MemoryRegion region;
        region.gpa = extents[k].gpa;
        region.size = extents[k].size;
        region.slot = static_cast<uint32_t>(k);
        region.memfd = dup_sized(memfds[k], region.size, k);
        void* host = ::mmap(nullptr, region.size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_NORESERVE,
                            region.memfd.get(), 0);
        if (host == MAP_FAILED) throw_errno("mmap(guest RAM memfd, MAP_PRIVATE)");
        region.host = static_cast<uint8_t*>(host);
        mem.regions_.push_back(std::move(region));
    }
    return mem;
}

GuestMemory::RetiredMappings& GuestMemory::RetiredMappings::operator=(RetiredMappings&& other) noexcept {
    if (this != &other) {
        release();
        ranges_ = std::move(other.ranges_);
        other.ranges_.clear();
    }
    return *this;
}

void GuestMemory::RetiredMappings::release() noexcept {
    for (const Range& r : ranges_) ::munmap(r.addr, r.bytes);
    ranges_.clear();
}

GuestMemory::RetiredMappings GuestMemory::remap_private(std::span<const int> memfds) {
    if (memfds.size() != regions_.size())
        throw Error(fmt::format("{} guest RAM memfds for {} regions", memfds.size(), regions_.size()));
    std::vector<Fd> copies;
    for (size_t k = 0; k < regions_.size(); ++k) copies.push_back(dup_sized(memfds[k], regions_[k].size, k));
    RetiredMappings retired;
    for (size_t k = 0; k < regions_.size(); ++k) {
        MemoryRegion& r = regions_[k];
        // Move the old mapping aside (its page tables go with it, PMD by PMD when both
        // ends are 2 MiB aligned); the range at r.host is then empty.
        uint8_t* aside = reserve_aligned(r.size);
        void* moved = ::mremap(r.host, r.size, r.size, MREMAP_MAYMOVE | MREMAP_FIXED, aside);
        if (moved == MAP_FAILED) {
            ::munmap(aside, r.size);  // MAP_FIXED below replaces the old mapping instead (slower)
        } else {
            retired.add(moved, r.size);
        }
        void* host = ::mmap(r.host, r.size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_NORESERVE | MAP_FIXED,
                            copies[k].get(), 0);
        if (host == MAP_FAILED) throw_errno("mmap(guest RAM memfd, MAP_PRIVATE | MAP_FIXED)");
        r.memfd = std::move(copies[k]);
        r.file_offset = 0;
    }
    backing_ = Backing::private_memfd;
    return retired;
}

GuestMemory::GuestMemory(GuestMemory&& other) noexcept
    : regions_(std::move(other.regions_)),
      ram_bytes_(other.ram_bytes_),
      backing_(other.backing_),
      tracker_(other.tracker_.exchange(nullptr)) {
    other.regions_.clear();
    other.ram_bytes_ = 0;
}

GuestMemory& GuestMemory::operator=(GuestMemory&& other) noexcept {
    if (this != &other) {
        unmap();
        regions_ = std::move(other.regions_);
        ram_bytes_ = other.ram_bytes_;
        backing_ = other.backing_;
        tracker_.store(other.tracker_.exchange(nullptr));
        other.regions_.clear();
        other.ram_bytes_ = 0;
    }
    return *this;
}

GuestMemory::~GuestMemory() { unmap(); }

void GuestMemory::unmap() noexcept {
    for (auto& region : regions_)
        if (region.host) ::munmap(region.host, region.size);
    regions_.clear();
}

const MemoryRegion* GuestMemory::find(Gpa gpa, uint64_t len) const {
    for (const auto& region : regions_)
        if (region.contains(gpa, len)) return &region;
    return nullptr;
}

bool GuestMemory::contains(Gpa gpa, uint64_t len) const { return find(gpa, len) != nullptr; }

std::span<const uint8_t> GuestMemory::slice(Gpa gpa, uint64_t len) const {
    const MemoryRegion* region = find(gpa, len);
    if (!region)
        throw Error(fmt::format("guest range [{:#x}, +{:#x}) is outside guest RAM", gpa.value, len));
    return {region->host + (gpa.value - region->gpa.value), len};
}

std::span<uint8_t> GuestMemory::slice(Gpa gpa, uint64_t len) {
    auto view = std::as_const(*this).slice(gpa, len);
    return {const_cast<uint8_t*>(view.data()), view.size()};
}

void GuestMemory::disable_huge_pages() {
    for (const MemoryRegion& r : regions_) (void)::madvise(r.host, r.size, MADV_NOHUGEPAGE);
}

GuestMemory::Collapsed GuestMemory::collapse_huge_pages(Gpa gpa, uint64_t len) noexcept {
#ifndef MADV_COLLAPSE
    constexpr int MADV_COLLAPSE = 25;  // Linux 6.1 (uapi asm-generic/mman-common.h)
#endif
    Collapsed out;
    if (len == 0) return out;
    const uint64_t first = gpa.value & ~(kPmdBytes - 1);
    const uint64_t end = gpa.value + len;
    for (uint64_t block = first; block < end; block += kPmdBytes) {
        const MemoryRegion* region = find(Gpa(block), kPmdBytes);
        // A block that straddles a region's end (RAM not a multiple of 2 MiB, the MMIO
        // hole) stays on 4 KiB pages; so does RAM that is not a shared memfd.
        if (region == nullptr || backing_ != Backing::memfd) continue;
        void* at = region->host + (block - region->gpa.value);
        if (::madvise(at, kPmdBytes, MADV_COLLAPSE) == 0) {
            out.bytes += kPmdBytes;
        } else if (out.error == 0) {
            out.error = errno;
        }
    }
    return out;
}

void GuestMemory::prefault_for_write(Gpa gpa, uint64_t len) {
#ifndef MADV_POPULATE_WRITE
    constexpr int MADV_POPULATE_WRITE = 23;  // Linux 5.14 (uapi asm-generic/mman-common.h)
#endif
    if (len == 0) return;
    const std::span<uint8_t> range = slice(gpa, len);
    const uintptr_t start = reinterpret_cast<uintptr_t>(range.data()) & ~uintptr_t{kPageSize - 1};
    const uintptr_t end = reinterpret_cast<uintptr_t>(range.data()) + range.size();
    (void)::madvise(reinterpret_cast<void*>(start), end - start, MADV_POPULATE_WRITE);
}

void GuestMemory::write_bytes(Gpa gpa, std::span<const uint8_t> bytes) {
    if (bytes.empty()) return;
    std::memcpy(slice(gpa, bytes.size()).data(), bytes.data(), bytes.size());
    mark_dirty(gpa, bytes.size());
}

}  // namespace nanovm
