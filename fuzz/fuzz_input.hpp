// Decoding a libFuzzer input front to back: little-endian integers and byte runs.
// Past the end everything reads as zero, so every input decodes to something and a
// seed generator (fuzz/make_seeds.py) can write the same fields in the same order.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

namespace nanovm::fuzz {

/// A cursor over one fuzz input.
class FuzzInput {
public:
    FuzzInput(const uint8_t* data, size_t size) : data_(data), size_(size) {}

    /// Bytes not yet consumed.
    size_t remaining() const noexcept { return size_ - at_; }
    bool empty() const noexcept { return at_ == size_; }

    /// The next sizeof(T) bytes as a little-endian T (zero-filled past the end).
    template <typename T>
    T integer() {
        uint8_t bytes[sizeof(T)] = {};
        const size_t n = std::min(sizeof(T), remaining());
        if (n > 0) std::memcpy(bytes, data_ + at_, n);
        at_ += n;
        T value;
        std::memcpy(&value, bytes, sizeof(T));
        return value;
    }
    uint8_t u8() { return integer<uint8_t>(); }
    uint16_t u16() { return integer<uint16_t>(); }
    uint32_t u32() { return integer<uint32_t>(); }
    uint64_t u64() { return integer<uint64_t>(); }

    /// The next `n` bytes, or fewer at the end.
    std::span<const uint8_t> bytes(size_t n) {
        n = std::min(n, remaining());
        const std::span<const uint8_t> out(data_ + at_, n);
        at_ += n;
        return out;
    }

private:
    const uint8_t* data_;
    size_t size_;
    size_t at_ = 0;
};

}  // namespace nanovm::fuzz
