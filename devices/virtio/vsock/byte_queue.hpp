// A FIFO of bytes in fixed-size chunks: the bytes a guest sent on a vsock stream that
// the host socket has not taken yet. Memory grows with what is queued and is freed as
// it drains; the caller bounds the size (the stream's advertised buf_alloc).
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <span>
#include <vector>

namespace nanovm::virtio::vsock {

/// Byte FIFO. Not thread-safe.
class ByteQueue {
public:
    /// Chunks hold `chunk_bytes` each (> 0).
    explicit ByteQueue(size_t chunk_bytes = 64 * 1024) : chunk_bytes_(chunk_bytes) {}

    /// Bytes queued.
    size_t size() const noexcept { return size_; }
    bool empty() const noexcept { return size_ == 0; }
    /// Copies `bytes` to the back.
    void append(std::span<const uint8_t> bytes);
    /// Describes the front bytes as up to out.size() iovecs (for sendmsg); returns
    /// how many it filled. The iovecs stay valid until the next append or consume.
    size_t front_iovecs(std::span<iovec> out) const;
    /// Drops `bytes` (<= size()) from the front.
    void consume(size_t bytes);
    /// Drops everything and frees the chunks.
    void clear() noexcept;

private:
    size_t chunk_bytes_;
    std::deque<std::vector<uint8_t>> chunks_;  // each holds its bytes (size() = used)
    size_t head_ = 0;                          // bytes already consumed from chunks_.front()
    size_t size_ = 0;
};

}  // namespace nanovm::virtio::vsock
