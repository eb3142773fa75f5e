// Feeding a pipe without blocking (see pipe_feeder.hpp).
#include "guest-init/agent/pipe_feeder.hpp"

#include <unistd.h>

#include <cerrno>

namespace nanovm::agent {

PipeFeeder::PipeFeeder(Poller& poller, Fd fd) : poller_(poller), fd_(std::move(fd)) {}

PipeFeeder::~PipeFeeder() { poller_.remove(watch_); }

void PipeFeeder::write(std::string_view data) {
    if (!fd_.valid() || close_requested_ || data.empty()) return;
    pending_.append(data);
    flush();
}

void PipeFeeder::close() {
    close_requested_ = true;
    if (backlog() == 0) shut();
}

void PipeFeeder::flush() {
    while (fd_.valid() && backlog() > 0) {
        const ssize_t n = ::write(fd_.get(), pending_.data() + offset_, backlog());
        if (n > 0) {
            offset_ += static_cast<size_t>(n);
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && errno == EAGAIN) {
            if (watch_ == 0) watch_ = poller_.add(fd_.get(), EPOLLOUT, [this](uint32_t) { flush(); });
            return;
        }
        shut();  // EPIPE: nobody reads any more
        break;
    }
    pending_.clear();
    offset_ = 0;
    poller_.remove(watch_);
    watch_ = 0;
    if (close_requested_) shut();
}

void PipeFeeder::shut() {
    poller_.remove(watch_);
    watch_ = 0;
    fd_.reset();
    pending_.clear();
    offset_ = 0;
}

}  // namespace nanovm::agent
