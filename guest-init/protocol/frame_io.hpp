// Buffers between a connection's socket and its frames, one per direction: the
// FrameParser splits incoming bytes into frames (strictly: frame.hpp), the
// FrameOutput queues outgoing frames until the socket takes them. Used by both ends.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "guest-init/protocol/frame.hpp"

namespace nanovm::agent::proto {

/// One frame as received. `payload` points into the parser's buffer: valid until the
/// next FrameParser::prepare().
struct Frame {
    MessageType type{};
    uint32_t id = 0;
    std::string_view payload;
};

/// Splits one connection's incoming byte stream into frames. Bytes are read straight
/// into its buffer (prepare() + commit()); the buffer never holds more than one
/// frame plus one read, so it stays below kFrameHeaderSize + kMaxPayload + the read size.
class FrameParser {
public:
    /// The result of next().
    enum class Status {
        kFrame,      ///< a whole frame was taken
        kNeedMore,   ///< no whole frame buffered yet
        kBadType,    ///< the next header's type is not accepted (bad_header() tells)
        kOversized,  ///< the next header's length is above kMaxPayload
    };
    /// Which message types this end accepts (is_client_message or is_agent_message).
    using TypeFilter = bool (*)(MessageType);

    explicit FrameParser(TypeFilter accepted) : accepted_(accepted) {}

    /// Returns a buffer of at least `bytes` bytes to read into; invalidates payloads
    /// returned by earlier next() calls.
    char* prepare(size_t bytes);
    /// Marks `bytes` (<= what prepare() gave) as read into it.
    void commit(size_t bytes);
    /// Takes the next whole frame into `frame`. After kBadType or kOversized the
    /// parser stays in that state: the connection must be closed.
    Status next(Frame& frame);
    /// True if bytes of an incomplete frame are buffered: a connection that ends now
    /// ended inside a frame (truncated).
    bool mid_frame() const { return end_ > begin_; }
    /// The header that made next() fail.
    const FrameHeader& bad_header() const { return bad_; }

private:
    TypeFilter accepted_;
    std::vector<char> buf_;
    size_t begin_ = 0;  // first unparsed byte
    size_t end_ = 0;    // one past the last byte read
    FrameHeader bad_{};
    bool failed_ = false;
};

/// Frames waiting to be written to a connection, oldest first.
class FrameOutput {
public:
    /// Queues one frame. `payload.size()` must be <= kMaxPayload.
    void append(MessageType type, uint32_t id, std::string_view payload);
    /// Queues a frame whose payload the caller writes in place: returns where up to
    /// `max_payload` (<= kMaxPayload) bytes go. finish_frame() must follow before any
    /// other call.
    char* begin_frame(MessageType type, uint32_t id, size_t max_payload);
    /// Sets the length of the frame begun last to `payload_length` (<= its max) bytes.
    /// 0 drops the frame again when `keep_empty` is false.
    void finish_frame(size_t payload_length, bool keep_empty = false);
    /// Bytes queued, headers included.
    size_t size() const { return end_ - begin_; }
    bool empty() const { return size() == 0; }
    /// The queued bytes, to hand to write(2).
    std::string_view pending() const { return std::string_view(buf_.get() + begin_, size()); }
    /// Drops the first `bytes` queued bytes (written).
    void consume(size_t bytes);

private:
    // Makes room for `bytes` more at end_ (uninitialised: payloads are written in
    // place, so no byte is written twice).
    void reserve_tail(size_t bytes);

    std::unique_ptr<char[]> buf_;
    size_t capacity_ = 0;
    size_t begin_ = 0;  // first queued byte
    size_t end_ = 0;    // one past the last queued byte
    size_t open_frame_ = 0;  // offset of the frame begun by begin_frame()
    size_t open_max_ = 0;
};

}  // namespace nanovm::agent::proto
