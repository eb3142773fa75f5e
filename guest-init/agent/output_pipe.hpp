// The read end of a command's stdout or stderr pipe, forwarded as STDOUT/STDERR
// frames of one request. Used by commands (exec_job) and session shells (session).
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>

#include "guest-init/agent/poller.hpp"
#include "guest-init/protocol/frame.hpp"
#include "vmm/fd.hpp"

namespace nanovm::agent {

class Connection;

/// One output pipe (non-blocking read end).
class OutputPipe {
public:
    /// What one forward() did.
    enum class Result {
        kData,    ///< bytes were read (and queued, unless discarded)
        kAgain,   ///< nothing to read right now
        kEof,     ///< the pipe is closed now (EOF or a read error)
        kNoRoom,  ///< the connection's output is full: reading paused (see resume())
    };

    /// Watches `fd` and calls `on_readable` when it has data or hung up.
    OutputPipe(Poller& poller, Fd fd, proto::MessageType type, std::function<void()> on_readable);
    ~OutputPipe();
    OutputPipe(const OutputPipe&) = delete;
    OutputPipe& operator=(const OutputPipe&) = delete;

    /// Reads once (up to kPipeChunk bytes) into a frame for request `id` on
    /// `connection`; with a null connection the bytes are read and dropped. Unless
    /// `ignore_room`, a connection without room pauses the pipe instead (kNoRoom);
    /// the caller then asks the connection for room and calls resume() on it.
    Result forward(Connection* connection, uint32_t id, bool ignore_room = false);
    /// forward() until kAgain, kEof or kNoRoom, or until about `limit` bytes (whole
    /// kPipeChunk reads) went by. Returns the last result.
    Result forward_all(Connection* connection, uint32_t id, bool ignore_room, size_t limit);
    /// Reads once (up to kPipeChunk bytes) and hands them to `sink` (not called when
    /// nothing was read): for output the agent keeps itself (background jobs). Never
    /// kNoRoom.
    Result read_to(const std::function<void(std::string_view)>& sink);
    /// Watches the pipe again after kNoRoom.
    void resume();
    /// Stops watching and closes the pipe.
    void close();
    bool is_open() const { return fd_.valid(); }

private:
    Poller& poller_;
    Fd fd_;
    proto::MessageType type_;
    std::function<void()> on_readable_;
    uint64_t watch_ = 0;
};

}  // namespace nanovm::agent
