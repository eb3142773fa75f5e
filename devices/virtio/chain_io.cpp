#include "devices/virtio/chain_io.hpp"

#include <algorithm>

#include <fmt/format.h>

namespace nanovm::virtio {

namespace {

// Walks `segments` from (segment, offset) for up to `bytes`, calling fn(host span).
template <typename Span, typename Memory, typename Fn>
uint64_t for_each_piece(Memory& memory, std::span<const BufferSegment> segments, size_t segment, uint64_t offset,
                        uint64_t bytes, Fn&& fn) {
    uint64_t done = 0;
    while (done < bytes && segment < segments.size()) {
        const BufferSegment& s = segments[segment];
        const uint64_t n = std::min<uint64_t>(s.len - offset, bytes - done);
        Span host = memory.slice(s.addr + offset, n);
        fn(host, done);
        done += n;
        offset += n;
        if (offset == s.len) {
            ++segment;
            offset = 0;
        }
    }
    return done;
}

void step(std::span<const BufferSegment> segments, size_t& segment, uint64_t& offset, uint64_t bytes) {
    while (bytes > 0 && segment < segments.size()) {
        const uint64_t n = std::min<uint64_t>(segments[segment].len - offset, bytes);
        bytes -= n;
        offset += n;
        if (offset == segments[segment].len) {
            ++segment;
            offset = 0;
        }
    }
}

}  // namespace

size_t ChainReader::read(std::span<uint8_t> out) {
    const uint64_t n = for_each_piece<std::span<const uint8_t>>(
        memory_, segments_, segment_, offset_, std::min<uint64_t>(out.size(), remaining_),
        [&](std::span<const uint8_t> host, uint64_t at) { std::memcpy(out.data() + at, host.data(), host.size()); });
    step(segments_, segment_, offset_, n);
    remaining_ -= n;
    return n;
}

void ChainReader::read_exact(std::span<uint8_t> out, const char* what) {
    if (remaining_ < out.size())
        throw QueueError(fmt::format("{}: needs {} bytes, the chain's readable buffers hold {}", what, out.size(),
                                     remaining_));
    read(out);
}

uint64_t ChainReader::skip(uint64_t bytes) {
    const uint64_t n = std::min(bytes, remaining_);
    step(segments_, segment_, offset_, n);
    remaining_ -= n;
    return n;
}

std::vector<iovec> ChainReader::peek_iovecs(uint64_t bytes) const {
    std::vector<iovec> iov;
    for_each_piece<std::span<const uint8_t>>(
        memory_, segments_, segment_, offset_, std::min(bytes, remaining_), [&](std::span<const uint8_t> host, uint64_t) {
            iov.push_back({const_cast<uint8_t*>(host.data()), host.size()});
        });
    return iov;
}

size_t ChainWriter::write(std::span<const uint8_t> bytes) {
    const uint64_t n = for_each_piece<std::span<uint8_t>>(
        memory_, segments_, segment_, offset_, std::min<uint64_t>(bytes.size(), remaining_),
        [&](std::span<uint8_t> host, uint64_t at) { std::memcpy(host.data(), bytes.data() + at, host.size()); });
    advance(n);
    return n;
}

void ChainWriter::write_exact(std::span<const uint8_t> bytes, const char* what) {
    if (remaining_ < bytes.size())
        throw QueueError(fmt::format("{}: needs {} bytes, the chain's writable buffers hold {}", what, bytes.size(),
                                     remaining_));
    write(bytes);
}

std::vector<iovec> ChainWriter::peek_iovecs(uint64_t bytes) const {
    std::vector<iovec> iov;
    for_each_piece<std::span<uint8_t>>(memory_, segments_, segment_, offset_, std::min(bytes, remaining_),
                                       [&](std::span<uint8_t> host, uint64_t) {
                                           iov.push_back({host.data(), host.size()});
                                       });
    return iov;
}

void ChainWriter::advance(uint64_t bytes) {
    const uint64_t n = std::min(bytes, remaining_);
    // Every byte a device stores into a chain passes here (write() and the
    // peek_iovecs + advance path): tell the snapshot's dirty tracker, since KVM's
    // dirty log does not see VMM writes. Without a tracker (no snapshot pending)
    // nothing is walked twice.
    size_t segment = segment_;
    uint64_t offset = offset_;
    const bool tracking = memory_.dirty_tracker() != nullptr;
    for (uint64_t left = tracking ? n : 0; left > 0 && segment < segments_.size();) {
        const BufferSegment& s = segments_[segment];
        const uint64_t piece = std::min<uint64_t>(s.len - offset, left);
        memory_.mark_dirty(s.addr + offset, piece);
        left -= piece;
        offset += piece;
        if (offset == s.len) {
            ++segment;
            offset = 0;
        }
    }
    step(segments_, segment_, offset_, n);
    remaining_ -= n;
    written_ += n;
}

}  // namespace nanovm::virtio
