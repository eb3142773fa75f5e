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

/// The CRC-32C of the bytes seen by `crc` followed by `zeros` zero bytes, in
/// O(log zeros) time: lets a sparse file's holes be checksummed without reading
/// them. crc32c_zeros(crc32c(a), n) == crc32c(a + n zero bytes).
/// Source: zlib crc32.c (multmodp, x2nmodp: multiplication by x^(8n) modulo the polynomial).
uint32_t crc32c_zeros(uint32_t crc, uint64_t zeros) noexcept;

/// The CRC-32C of a + b from crc32c(a) and crc32c(b) of b's `len_b` bytes, without
/// the bytes: crc32c_combine(crc32c(a), crc32c(b), b.size()) == crc32c(a + b). Costs
/// O(log len_b); for many blocks of one length take its operator once
/// (crc32c_combine_op) and use crc32c_combine_with, one multiplication a block.
/// Source: zlib crc32.c crc32_combine64 (the same pre- and post-inversion).
uint32_t crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b) noexcept;
/// The operator of crc32c_combine for blocks of `len_b` bytes (x^(8 len_b) mod P).
uint32_t crc32c_combine_op(uint64_t len_b) noexcept;
/// crc32c_combine with the operator of b's length (crc32c_combine_op).
uint32_t crc32c_combine_with(uint32_t op, uint32_t crc_a, uint32_t crc_b) noexcept;

/// crc32c over the bytes of a trivially copyable object.
template <typename T>
uint32_t crc32c_of(const T& value, uint32_t crc = 0) noexcept {
    return crc32c({reinterpret_cast<const uint8_t*>(&value), sizeof(T)}, crc);
}

}  // namespace nanovm::snapshot
