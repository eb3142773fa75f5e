// Copying request bytes out of, and response bytes into, the buffers of a validated
// descriptor chain (devices/virtio/queue.hpp). Devices never touch a chain's guest
// memory any other way, so every guest-memory write a device makes is accounted for
// here (bytes written = the used length it reports).
#pragma once

#include <sys/uio.h>

#include <cstdint>
#include <cstring>
#include <span>
#include <type_traits>
#include <vector>

#include "devices/virtio/queue.hpp"
#include "vmm/guest_memory.hpp"

namespace nanovm::virtio {

/// Reads the readable buffers of a chain as one byte stream, front to back.
class ChainReader {
public:
    ChainReader(const GuestMemory& memory, const DescriptorChain& chain)
        : memory_(memory), segments_(chain.readable), remaining_(chain.readable_bytes) {}

    /// Bytes not yet read.
    uint64_t remaining() const noexcept { return remaining_; }
    /// Copies up to out.size() bytes; returns how many (less only at the end).
    size_t read(std::span<uint8_t> out);
    /// Reads a T; throws QueueError (naming `what`) if fewer than sizeof(T) bytes remain.
    template <typename T>
    T read_obj(const char* what) {
        static_assert(std::is_trivially_copyable_v<T>);
        T value;
        read_exact({reinterpret_cast<uint8_t*>(&value), sizeof(T)}, what);
        return value;
    }
    /// Copies exactly out.size() bytes or throws QueueError naming `what`.
    void read_exact(std::span<uint8_t> out, const char* what);
    /// Skips up to `bytes`; returns how many.
    uint64_t skip(uint64_t bytes);
    /// Host iovecs for the next `bytes` (or fewer, at the end) without consuming them.
    std::vector<iovec> peek_iovecs(uint64_t bytes) const;

private:
    const GuestMemory& memory_;
    std::span<const BufferSegment> segments_;
    size_t segment_ = 0;
    uint64_t offset_ = 0;  // inside segments_[segment_]
    uint64_t remaining_;
};

/// Writes into the writable buffers of a chain as one byte stream; written() is the
/// used length to report in push_used.
class ChainWriter {
public:
    ChainWriter(GuestMemory& memory, const DescriptorChain& chain)
        : memory_(memory), segments_(chain.writable), remaining_(chain.writable_bytes) {}

    uint64_t remaining() const noexcept { return remaining_; }
    uint64_t written() const noexcept { return written_; }
    /// Copies up to bytes.size() bytes; returns how many (less when the buffers end).
    size_t write(std::span<const uint8_t> bytes);
    /// Writes all of `bytes` or throws QueueError naming `what`.
    void write_exact(std::span<const uint8_t> bytes, const char* what);
    template <typename T>
    void write_obj(const T& value, const char* what) {
        static_assert(std::is_trivially_copyable_v<T>);
        write_exact({reinterpret_cast<const uint8_t*>(&value), sizeof(T)}, what);
    }
    /// Host iovecs for the next `bytes` (or fewer) of buffer space, not consumed: for
    /// I/O that fills guest memory directly (readv, io_uring). Call advance() after.
    std::vector<iovec> peek_iovecs(uint64_t bytes) const;
    /// Counts `bytes` as written (after filling them through peek_iovecs).
    void advance(uint64_t bytes);

private:
    GuestMemory& memory_;
    std::span<const BufferSegment> segments_;
    size_t segment_ = 0;
    uint64_t offset_ = 0;
    uint64_t remaining_;
    uint64_t written_ = 0;
};

}  // namespace nanovm::virtio
