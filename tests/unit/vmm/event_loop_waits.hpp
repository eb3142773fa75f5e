// Waiting in tests for work done on another thread: let an EventLoop run what was due,
// or poll a condition until it holds.
#pragma once

#include <chrono>
#include <thread>

#include "vmm/event_loop.hpp"

namespace nanovm::test {

/// Returns once every handler of `loop` whose fd was ready before the call has run
/// (a kick written before it, say): the first empty task runs after the loop's
/// current batch, and the epoll_wait before the second one sees the fd.
inline void settle(EventLoop& loop) {
    loop.run_sync([] {});
    loop.run_sync([] {});
}

/// Polls `done` every 200 µs for up to `timeout`; returns whether it came true.
template <typename Predicate>
bool eventually(Predicate done, std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
    const auto end = std::chrono::steady_clock::now() + timeout;
    while (!done()) {
        if (std::chrono::steady_clock::now() > end) return false;
        std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    return true;
}

}  // namespace nanovm::test
