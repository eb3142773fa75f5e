#include "devices/virtio/vsock/byte_queue.hpp"

#include <algorithm>

namespace nanovm::virtio::vsock {

void ByteQueue::append(std::span<const uint8_t> bytes) {
    while (!bytes.empty()) {
        if (chunks_.empty() || chunks_.back().size() == chunk_bytes_) {
            chunks_.emplace_back();
            chunks_.back().reserve(chunk_bytes_);
        }
        std::vector<uint8_t>& last = chunks_.back();
        const size_t n = std::min(bytes.size(), chunk_bytes_ - last.size());
        last.insert(last.end(), bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(n));
        bytes = bytes.subspan(n);
        size_ += n;
    }
}

size_t ByteQueue::front_iovecs(std::span<iovec> out) const {
    size_t filled = 0;
    size_t skip = head_;
    for (const std::vector<uint8_t>& chunk : chunks_) {
        if (filled == out.size()) break;
        out[filled++] = {const_cast<uint8_t*>(chunk.data() + skip), chunk.size() - skip};
        skip = 0;
    }
    return filled;
}

void ByteQueue::consume(size_t bytes) {
    bytes = std::min(bytes, size_);
    size_ -= bytes;
    while (bytes > 0) {
        const size_t in_front = chunks_.front().size() - head_;
        if (bytes < in_front) {
            head_ += bytes;
            return;
        }
        bytes -= in_front;
        chunks_.pop_front();
        head_ = 0;
    }
    if (size_ == 0) clear();
}

void ByteQueue::clear() noexcept {
    chunks_.clear();
    head_ = 0;
    size_ = 0;
}

}  // namespace nanovm::virtio::vsock
