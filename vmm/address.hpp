// Guest and host addresses as distinct types, so a GPA can never be passed where an
// HVA is expected. GPA = guest-physical address; HVA = host-virtual address.
#pragma once

#include <compare>
#include <cstdint>

namespace nanovm {

/// A guest-physical address, in bytes.
struct Gpa {
    uint64_t value = 0;
    constexpr Gpa() = default;
    constexpr explicit Gpa(uint64_t v) : value(v) {}
    constexpr Gpa operator+(uint64_t off) const { return Gpa(value + off); }
    constexpr auto operator<=>(const Gpa&) const = default;
};

/// A host-virtual address inside the VMM process.
struct Hva {
    uint8_t* ptr = nullptr;
    constexpr Hva() = default;
    constexpr explicit Hva(uint8_t* p) : ptr(p) {}
};

inline constexpr uint64_t kPageSize = 4096;  ///< x86 base page, bytes
inline constexpr uint64_t KiB = 1024;
inline constexpr uint64_t MiB = 1024 * KiB;
inline constexpr uint64_t GiB = 1024 * MiB;

}  // namespace nanovm
