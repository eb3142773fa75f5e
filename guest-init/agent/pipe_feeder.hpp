// Bytes on their way into a non-blocking pipe: a command's stdin or a session
// shell's command stream. What the pipe does not take at once waits here (the
// connection stops reading requests while too much waits: see Job::input_backlogged;
// it looks again after every event-loop round).
#pragma once

#include <string>
#include <string_view>

#include "guest-init/agent/poller.hpp"
#include "vmm/fd.hpp"

namespace nanovm::agent {

/// Writes into one pipe; single-threaded, on the event loop.
class PipeFeeder {
public:
    /// Takes the pipe's write end `fd` (non-blocking).
    PipeFeeder(Poller& poller, Fd fd);
    PipeFeeder(const PipeFeeder&) = delete;
    PipeFeeder& operator=(const PipeFeeder&) = delete;
    ~PipeFeeder();

    /// Queues `data` and writes what the pipe takes now. Dropped once the reader is
    /// gone (EPIPE) or after close().
    void write(std::string_view data);
    /// Closes the pipe once the backlog is written (EOF for the reader).
    void close();
    /// Bytes waiting.
    size_t backlog() const { return pending_.size() - offset_; }

private:
    void flush();
    void shut();
    Poller& poller_;
    Fd fd_;
    std::string pending_;
    size_t offset_ = 0;
    uint64_t watch_ = 0;
    bool close_requested_ = false;
};

}  // namespace nanovm::agent
