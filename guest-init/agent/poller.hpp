// The agent's event loop core: epoll with one callback per watched fd.
//
// Callbacks capture raw pointers to their owners; an owner removes its watches in its
// destructor. Removal is safe from inside any callback: a removed watch is never
// called again, even for an event already fetched in the same round.
#pragma once

#include <sys/epoll.h>

#include <cstdint>
#include <functional>
#include <unordered_map>
#include <vector>

#include "vmm/fd.hpp"

namespace nanovm::agent {

/// Level-triggered epoll dispatch. Single-threaded.
class Poller {
public:
    /// Called with the epoll event bits (EPOLLIN, EPOLLOUT, EPOLLHUP, EPOLLERR...).
    using Handler = std::function<void(uint32_t events)>;

    /// Creates the epoll instance. False (errno set) on failure.
    bool init();

    /// Watches `fd` (not owned) for `events`; returns the watch's token (never 0), or
    /// 0 with errno set on failure.
    uint64_t add(int fd, uint32_t events, Handler handler);
    /// Changes the events of a watch (no-op for token 0 or when unchanged).
    void modify(uint64_t token, uint32_t events);
    /// Ends a watch (no-op for token 0). Call before closing its fd.
    void remove(uint64_t token);

    /// Waits up to `timeout_ms` (-1: forever) and runs the callbacks of what is
    /// ready. Returns the number of events, or -1 on an error other than EINTR.
    int wait(int timeout_ms);

private:
    struct Watch {
        int fd = -1;
        uint32_t events = 0;
        bool removed = false;
        Handler handler;
    };
    Fd epoll_;
    uint64_t next_token_ = 1;
    std::unordered_map<uint64_t, Watch> watches_;
    std::vector<uint64_t> removed_;
};

}  // namespace nanovm::agent
