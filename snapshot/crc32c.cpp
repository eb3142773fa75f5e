#include "snapshot/crc32c.hpp"

#include <array>
#include <cstring>

namespace nanovm::snapshot {

namespace {

constexpr uint32_t kPoly = 0x82f63b78;  // reflected Castagnoli

using Tables = std::array<std::array<uint32_t, 256>, 8>;

constexpr Tables make_tables() {
    Tables t{};
    for (uint32_t i = 0; i < 256; ++i) {
        uint32_t c = i;
        for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ kPoly : c >> 1;
        t[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; ++i)
        for (size_t s = 1; s < 8; ++s) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xff];
    return t;
}

constexpr Tables kTables = make_tables();

uint32_t crc_table(const uint8_t* p, size_t n, uint32_t c) noexcept {
    while (n >= 8) {
        uint64_t v;
        std::memcpy(&v, p, 8);
        v ^= c;
        c = kTables[7][v & 0xff] ^ kTables[6][(v >> 8) & 0xff] ^ kTables[5][(v >> 16) & 0xff] ^
            kTables[4][(v >> 24) & 0xff] ^ kTables[3][(v >> 32) & 0xff] ^ kTables[2][(v >> 40) & 0xff] ^
            kTables[1][(v >> 48) & 0xff] ^ kTables[0][v >> 56];
        p += 8;
        n -= 8;
    }
    while (n--) c = (c >> 8) ^ kTables[0][(c ^ *p++) & 0xff];
    return c;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t crc_sse42(const uint8_t* p, size_t n, uint32_t c) noexcept {
    uint64_t c64 = c;
    while (n >= 8) {
        uint64_t v;
        std::memcpy(&v, p, 8);
        c64 = __builtin_ia32_crc32di(c64, v);
        p += 8;
        n -= 8;
    }
    uint32_t c32 = static_cast<uint32_t>(c64);
    while (n--) c32 = __builtin_ia32_crc32qi(c32, *p++);
    return c32;
}

bool have_sse42() noexcept {
    static const bool have = __builtin_cpu_supports("sse4.2");
    return have;
}
#endif

}  // namespace

uint32_t crc32c(std::span<const uint8_t> bytes, uint32_t crc) noexcept {
    const uint32_t c = ~crc;
#if defined(__x86_64__)
    if (have_sse42()) return ~crc_sse42(bytes.data(), bytes.size(), c);
#endif
    return ~crc_table(bytes.data(), bytes.size(), c);
}

namespace {

constexpr uint32_t kReflectedPoly = 0x82F63B78u;

// a * b modulo the polynomial, both reflected (bit 31 is x^0).
uint32_t multmodp(uint32_t a, uint32_t b) noexcept {
    uint32_t m = 1u << 31, p = 0;
    for (;;) {
        if (a & m) {
            p ^= b;
            if ((a & (m - 1)) == 0) break;
        }
        m >>= 1;
        b = b & 1 ? (b >> 1) ^ kReflectedPoly : b >> 1;
    }
    return p;
}

// x^(n * 2^k) modulo the polynomial.
uint32_t x2nmodp(uint64_t n, unsigned k) noexcept {
    uint32_t table[32];
    uint32_t p = 1u << 30;  // x^1
    for (uint32_t& t : table) {
        t = p;  // x^(2^i)
        p = multmodp(p, p);
    }
    p = 1u << 31;  // x^0
    while (n) {
        if (n & 1) p = multmodp(table[k & 31], p);
        n >>= 1;
        ++k;
    }
    return p;
}

}  // namespace

uint32_t crc32c_zeros(uint32_t crc, uint64_t zeros) noexcept {
    if (zeros == 0) return crc;
    // The register (~crc) times x^(8 * zeros): what feeding zero bytes does to it.
    return ~multmodp(x2nmodp(zeros, 3), ~crc);
}

uint32_t crc32c_combine_op(uint64_t len_b) noexcept { return x2nmodp(len_b, 3); }

uint32_t crc32c_combine_with(uint32_t op, uint32_t crc_a, uint32_t crc_b) noexcept {
    return multmodp(op, crc_a) ^ crc_b;
}

uint32_t crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b) noexcept {
    return crc32c_combine_with(crc32c_combine_op(len_b), crc_a, crc_b);
}

}  // namespace nanovm::snapshot
