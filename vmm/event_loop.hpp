// The VMM's device thread: one epoll loop that runs every device's work (virtqueue
// kicks through ioeventfds, io_uring completions, vsock and tap sockets) off the
// vCPU threads. Handlers all run on the loop's one thread, so device code is
// single-threaded; other threads reach it through run_sync()/post().
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "vmm/fd.hpp"

namespace nanovm {

/// An epoll(7) loop on its own thread. Not copyable or movable. Handlers must not
/// throw: an exception (of any type) escaping a handler is logged and that handler is
/// removed; one escaping a posted task is logged.
class EventLoop {
public:
    /// Called with the epoll events (EPOLLIN, EPOLLOUT, EPOLLHUP...) that fired.
    using Handler = std::function<void(uint32_t events)>;

    /// Creates the epoll instance and starts the thread. Throws SysError.
    EventLoop();
    /// Stops the thread (pending posted tasks are dropped) and closes the epoll fd.
    ~EventLoop();
    EventLoop(const EventLoop&) = delete;
    EventLoop& operator=(const EventLoop&) = delete;

    /// Watches `fd` for `events` (level-triggered unless EPOLLET is given) and calls
    /// `handler` on the loop thread. The fd must stay open until remove(fd). Any
    /// thread. Throws SysError (EPOLL_CTL_ADD), e.g. EEXIST if already watched.
    void add(int fd, uint32_t events, Handler handler);
    /// Changes the events watched on `fd`. Any thread. Throws SysError.
    void modify(int fd, uint32_t events);
    /// Stops watching `fd`. Once it returns, the handler is not running and will not
    /// be called again (also when called from inside a handler). Any thread.
    void remove(int fd);

    /// Runs `task` on the loop thread and waits for it to finish; rethrows what it
    /// throws. From the loop thread itself it runs `task` at once.
    void run_sync(const std::function<void()>& task);
    /// Queues `task` to run on the loop thread soon. Any thread; never blocks.
    void post(std::function<void()> task);
    /// True on the loop's thread.
    bool in_loop_thread() const noexcept { return std::this_thread::get_id() == thread_.get_id(); }

private:
    struct Entry {
        int fd;
        Handler handler;
    };
    void run() noexcept;
    void wake() noexcept;
    // Stops watching `fd` if it is registered (and, when only_id != 0, only if under
    // that registration id). Loop thread.
    void erase(int fd, uint64_t only_id);
    void drain_tasks();

    Fd epoll_;
    Fd wakeup_;  // eventfd: posted tasks or stop
    std::mutex mutex_;  // guards entries_, by_fd_, tasks_, stop_
    std::map<uint64_t, std::shared_ptr<Entry>> entries_;  // by registration id (epoll data)
    std::map<int, uint64_t> by_fd_;
    uint64_t next_id_ = 1;
    std::vector<std::function<void()>> tasks_;
    bool stop_ = false;
    std::thread thread_;  // last: starts after everything above exists
};

}  // namespace nanovm
