// Frame splitting and queueing (see frame_io.hpp).
#include "guest-init/protocol/frame_io.hpp"

#include <cstring>

namespace nanovm::agent::proto {
namespace {
// FrameOutput keeps up to this much buffer while idle.
constexpr size_t kKeptCapacity = 2u << 20;
}  // namespace

char* FrameParser::prepare(size_t bytes) {
    if (begin_ == end_) begin_ = end_ = 0;
    if (buf_.size() - end_ < bytes) {
        if (begin_ > 0) {
            std::memmove(buf_.data(), buf_.data() + begin_, end_ - begin_);
            end_ -= begin_;
            begin_ = 0;
        }
        if (buf_.size() - end_ < bytes) buf_.resize(end_ + bytes);
    }
    return buf_.data() + end_;
}

void FrameParser::commit(size_t bytes) { end_ += bytes; }

FrameParser::Status FrameParser::next(Frame& frame) {
    if (failed_) return bad_.payload_length > kMaxPayload ? Status::kOversized : Status::kBadType;
    if (end_ - begin_ < kFrameHeaderSize) return Status::kNeedMore;
    const FrameHeader h =
        decode_frame_header(reinterpret_cast<const unsigned char*>(buf_.data() + begin_));
    if (!accepted_(h.type)) {
        failed_ = true;
        bad_ = h;
        bad_.payload_length = 0;  // reported as a bad type, whatever the length
        return Status::kBadType;
    }
    if (h.payload_length > kMaxPayload) {
        failed_ = true;
        bad_ = h;
        return Status::kOversized;
    }
    if (end_ - begin_ - kFrameHeaderSize < h.payload_length) return Status::kNeedMore;
    frame.type = h.type;
    frame.id = h.id;
    frame.payload = std::string_view(buf_.data() + begin_ + kFrameHeaderSize, h.payload_length);
    begin_ += kFrameHeaderSize + h.payload_length;
    return Status::kFrame;
}

void FrameOutput::append(MessageType type, uint32_t id, std::string_view payload) {
    char* p = begin_frame(type, id, payload.size());
    if (!payload.empty()) std::memcpy(p, payload.data(), payload.size());
    finish_frame(payload.size(), true);
}

void FrameOutput::reserve_tail(size_t bytes) {
    if (capacity_ - end_ >= bytes) return;
    const size_t queued = size();
    if (capacity_ - queued >= bytes && begin_ >= queued) {
        // Enough room once the sent prefix is dropped, and moving the rest costs no
        // more than what was sent since the last move.
        std::memmove(buf_.get(), buf_.get() + begin_, queued);
    } else {
        size_t capacity = capacity_ < 4096 ? 4096 : capacity_;
        while (capacity < queued + bytes) capacity *= 2;
        std::unique_ptr<char[]> bigger(new char[capacity]);
        if (queued > 0) std::memcpy(bigger.get(), buf_.get() + begin_, queued);
        buf_ = std::move(bigger);
        capacity_ = capacity;
    }
    begin_ = 0;
    end_ = queued;
}

char* FrameOutput::begin_frame(MessageType type, uint32_t id, size_t max_payload) {
    reserve_tail(kFrameHeaderSize + max_payload);
    open_frame_ = end_;
    open_max_ = max_payload;
    end_ += kFrameHeaderSize + max_payload;
    FrameHeader h;
    h.type = type;
    h.id = id;
    encode_frame_header(h, reinterpret_cast<unsigned char*>(buf_.get() + open_frame_));
    return buf_.get() + open_frame_ + kFrameHeaderSize;
}

void FrameOutput::finish_frame(size_t payload_length, bool keep_empty) {
    if (payload_length > open_max_) payload_length = open_max_;
    if (payload_length == 0 && !keep_empty) {
        end_ = open_frame_;
        return;
    }
    unsigned char* header = reinterpret_cast<unsigned char*>(buf_.get() + open_frame_);
    FrameHeader h = decode_frame_header(header);
    h.payload_length = static_cast<uint32_t>(payload_length);
    encode_frame_header(h, header);
    end_ = open_frame_ + kFrameHeaderSize + payload_length;
}

void FrameOutput::consume(size_t bytes) {
    begin_ += bytes;
    if (begin_ < end_) return;
    begin_ = end_ = 0;
    // A burst grew the buffer beyond what steady streaming needs: give it back.
    if (capacity_ > kKeptCapacity) {
        buf_.reset();
        capacity_ = 0;
    }
}

}  // namespace nanovm::agent::proto
