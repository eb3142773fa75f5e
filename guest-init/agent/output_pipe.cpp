// Forwarding a command's output pipe (see output_pipe.hpp).
#include "guest-init/agent/output_pipe.hpp"

#include <unistd.h>

#include <cerrno>

#include "guest-init/agent/connection.hpp"

namespace nanovm::agent {

OutputPipe::OutputPipe(Poller& poller, Fd fd, proto::MessageType type, std::function<void()> on_readable)
    : poller_(poller), fd_(std::move(fd)), type_(type), on_readable_(std::move(on_readable)) {
    resume();
}

OutputPipe::~OutputPipe() { poller_.remove(watch_); }

OutputPipe::Result OutputPipe::forward(Connection* connection, uint32_t id, bool ignore_room) {
    if (!fd_.valid()) return Result::kEof;
    if (connection != nullptr && !ignore_room && !connection->has_room()) {
        poller_.remove(watch_);
        watch_ = 0;
        return Result::kNoRoom;
    }
    ssize_t n;
    if (connection != nullptr) {
        proto::FrameOutput& out = connection->output();
        char* buf = out.begin_frame(type_, id, kPipeChunk);
        do {
            n = ::read(fd_.get(), buf, kPipeChunk);
        } while (n < 0 && errno == EINTR);
        out.finish_frame(n > 0 ? static_cast<size_t>(n) : 0);
    } else {
        static char discard[kPipeChunk];  // the agent is single-threaded
        do {
            n = ::read(fd_.get(), discard, sizeof discard);
        } while (n < 0 && errno == EINTR);
    }
    if (n > 0) return Result::kData;
    if (n < 0 && errno == EAGAIN) return Result::kAgain;
    close();
    return Result::kEof;
}

OutputPipe::Result OutputPipe::read_to(const std::function<void(std::string_view)>& sink) {
    if (!fd_.valid()) return Result::kEof;
    static char buffer[kPipeChunk];  // the agent is single-threaded
    ssize_t n;
    do {
        n = ::read(fd_.get(), buffer, sizeof buffer);
    } while (n < 0 && errno == EINTR);
    if (n > 0) {
        sink(std::string_view(buffer, static_cast<size_t>(n)));
        return Result::kData;
    }
    if (n < 0 && errno == EAGAIN) return Result::kAgain;
    close();
    return Result::kEof;
}

OutputPipe::Result OutputPipe::forward_all(Connection* connection, uint32_t id, bool ignore_room,
                                           size_t limit) {
    size_t rounds = limit / kPipeChunk + 1;
    Result r = Result::kData;
    while (r == Result::kData && rounds-- > 0) r = forward(connection, id, ignore_room);
    return r;
}

void OutputPipe::resume() {
    if (fd_.valid() && watch_ == 0) {
        watch_ = poller_.add(fd_.get(), EPOLLIN, [this](uint32_t) { on_readable_(); });
    }
}

void OutputPipe::close() {
    poller_.remove(watch_);
    watch_ = 0;
    fd_.reset();
}

}  // namespace nanovm::agent
