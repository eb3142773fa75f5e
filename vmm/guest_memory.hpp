// Guest RAM: one memfd per region, mapped MAP_SHARED into the VMM, so snapshot,
// fork and a userfaultfd handler can all reach it by fd (DESIGN.md "vmm/").
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "vmm/address.hpp"
#include "vmm/fd.hpp"

namespace nanovm {

/// Start of the 32-bit MMIO hole: RAM above this GPA moves to kHighRamStart.
inline constexpr uint64_t kMmioHoleStart = 3 * GiB;
/// Where RAM continues above the hole (4 GiB).
inline constexpr uint64_t kHighRamStart = 4 * GiB;

/// One contiguous range of guest RAM backed by its own memfd.
struct MemoryRegion {
    Gpa gpa;            ///< first guest-physical byte
    uint64_t size = 0;  ///< bytes, a multiple of kPageSize
    uint8_t* host = nullptr;  ///< HVA of gpa in this process (MAP_SHARED of memfd)
    Fd memfd;           ///< backing memfd, size bytes
    uint32_t slot = 0;  ///< KVM memslot number this region is registered as

    bool contains(Gpa addr, uint64_t len) const {
        return addr.value >= gpa.value && len <= size && addr.value - gpa.value <= size - len;
    }
};

/// All guest RAM of one VM. Layout for `ram_bytes` of RAM: [0, min(ram, 3 GiB)) and,
/// when ram > 3 GiB, [4 GiB, 4 GiB + ram - 3 GiB). Not copyable; owns the mappings.
class GuestMemory {
public:
    /// Creates and maps the regions. `ram_bytes` must be a positive multiple of
    /// kPageSize. Throws SysError (memfd_create, ftruncate, mmap) or Error.
    static GuestMemory create(uint64_t ram_bytes);

    GuestMemory() = default;
    GuestMemory(GuestMemory&&) noexcept;
    GuestMemory& operator=(GuestMemory&&) noexcept;
    GuestMemory(const GuestMemory&) = delete;
    GuestMemory& operator=(const GuestMemory&) = delete;
    ~GuestMemory();

    /// Regions in ascending GPA order (1 or 2).
    std::span<const MemoryRegion> regions() const { return regions_; }
    /// Total RAM in bytes (sum of region sizes).
    uint64_t ram_bytes() const { return ram_bytes_; }
    /// True if [gpa, gpa+len) lies entirely inside one region.
    bool contains(Gpa gpa, uint64_t len) const;
    /// Host view of [gpa, gpa+len). Throws Error if the range is not entirely inside
    /// one region (so a guest-controlled range can never reach outside guest RAM).
    std::span<uint8_t> slice(Gpa gpa, uint64_t len);
    std::span<const uint8_t> slice(Gpa gpa, uint64_t len) const;

    /// Copies bytes into guest RAM at gpa. Throws Error if out of range.
    void write_bytes(Gpa gpa, std::span<const uint8_t> bytes);
    /// Writes a trivially copyable object at gpa (unaligned is fine).
    template <typename T>
    void write(Gpa gpa, const T& value) {
        static_assert(std::is_trivially_copyable_v<T>);
        std::memcpy(slice(gpa, sizeof(T)).data(), &value, sizeof(T));
    }
    /// Reads a trivially copyable object from gpa.
    template <typename T>
    T read(Gpa gpa) const {
        static_assert(std::is_trivially_copyable_v<T>);
        T value;
        std::memcpy(&value, slice(gpa, sizeof(T)).data(), sizeof(T));
        return value;
    }

private:
    void unmap() noexcept;
    const MemoryRegion* find(Gpa gpa, uint64_t len) const;

    std::vector<MemoryRegion> regions_;
    uint64_t ram_bytes_ = 0;
};

}  // namespace nanovm
