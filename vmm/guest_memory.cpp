#include "vmm/guest_memory.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <utility>

#include <fmt/format.h>

#include "vmm/error.hpp"

namespace nanovm {

namespace {

MemoryRegion map_region(Gpa gpa, uint64_t size, uint32_t slot) {
    MemoryRegion region;
    region.gpa = gpa;
    region.size = size;
    region.slot = slot;
    const std::string name = fmt::format("nanovm-ram-{:#x}", gpa.value);
    region.memfd = Fd(::memfd_create(name.c_str(), MFD_CLOEXEC));
    if (!region.memfd) throw_errno("memfd_create");
    if (::ftruncate(region.memfd.get(), static_cast<off_t>(size)) != 0) throw_errno("ftruncate(guest RAM)");
    void* host = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE,
                        region.memfd.get(), 0);
    if (host == MAP_FAILED) throw_errno("mmap(guest RAM)");
    region.host = static_cast<uint8_t*>(host);
    return region;
}

}  // namespace

GuestMemory GuestMemory::create(uint64_t ram_bytes) {
    if (ram_bytes == 0 || ram_bytes % kPageSize != 0)
        throw Error(fmt::format("guest RAM size {} is not a positive multiple of {} bytes", ram_bytes, kPageSize));
    GuestMemory mem;
    const uint64_t low = std::min(ram_bytes, kMmioHoleStart);
    mem.regions_.push_back(map_region(Gpa(0), low, 0));
    if (ram_bytes > low) mem.regions_.push_back(map_region(Gpa(kHighRamStart), ram_bytes - low, 1));
    mem.ram_bytes_ = ram_bytes;
    return mem;
}

GuestMemory::GuestMemory(GuestMemory&& other) noexcept
    : regions_(std::move(other.regions_)), ram_bytes_(other.ram_bytes_) {
    other.regions_.clear();
    other.ram_bytes_ = 0;
}

GuestMemory& GuestMemory::operator=(GuestMemory&& other) noexcept {
    if (this != &other) {
        unmap();
        regions_ = std::move(other.regions_);
        ram_bytes_ = other.ram_bytes_;
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

void GuestMemory::write_bytes(Gpa gpa, std::span<const uint8_t> bytes) {
    if (bytes.empty()) return;
    std::memcpy(slice(gpa, bytes.size()).data(), bytes.data(), bytes.size());
}

}  // namespace nanovm
