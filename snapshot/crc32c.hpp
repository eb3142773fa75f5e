// CRC-32C (Castagnoli, polynomial 0x1EDC6F41 reflected = 0x82F63B78), the checksum
// of every part of a snapshot. Uses the SSE 4.2 crc32 instruction when the CPU has
// it (about 8 bytes per cycle), else a table (slicing-by-8).
// Source: RFC 3720 appendix B.4 (iSCSI) for the polynomial and check value.
#pragma once

#include <cstdint>
#include <span>

namespace nanovm::snapshot {

/// Continues a CRC-32C over `bytes` from a previous result `crc` (0 to start).
/// crc32c("123456789") == 0xE3069283.
uint32_t crc32c(std::span<const uint8_t> bytes, uint32_t crc = 0) noexcept;

/// crc32c over the bytes of a trivially copyable object.
template <typename T>
uint32_t crc32c_of(const T& value, uint32_t crc = 0) noexcept {
    return crc32c({reinterpret_cast<const uint8_t*>(&value), sizeof(T)}, crc);
}

}  // namespace nanovm::snapshot
