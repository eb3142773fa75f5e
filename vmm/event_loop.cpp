#include "vmm/event_loop.hpp"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <exception>
#include <future>
#include <string>

#include <fmt/format.h>

#include "vmm/error.hpp"
#include "vmm/log.hpp"

namespace nanovm {

namespace {

constexpr uint64_t kWakeupId = 0;  // epoll data of the wakeup eventfd

// what() of the exception being handled; call inside a catch block.
std::string current_exception_message() {
    try {
        throw;
    } catch (const std::exception& e) {
        return e.what();
    } catch (...) {
        return "an exception that is not a std::exception";
    }
}

}  // namespace

EventLoop::EventLoop() {
    epoll_ = Fd(::epoll_create1(EPOLL_CLOEXEC));
    if (!epoll_) throw_errno("epoll_create1");
    wakeup_ = Fd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (!wakeup_) throw_errno("eventfd");
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = kWakeupId;
    if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, wakeup_.get(), &ev) != 0) throw_errno("EPOLL_CTL_ADD");
    thread_ = std::thread([this] { run(); });
}

EventLoop::~EventLoop() {
    {
        std::lock_guard lock(mutex_);
        stop_ = true;
    }
    wake();
    if (thread_.joinable()) thread_.join();
}

void EventLoop::wake() noexcept {
    const uint64_t one = 1;
    [[maybe_unused]] const ssize_t n = ::write(wakeup_.get(), &one, sizeof(one));
}

void EventLoop::add(int fd, uint32_t events, Handler handler) {
    std::lock_guard lock(mutex_);
    if (by_fd_.count(fd)) throw SysError("EPOLL_CTL_ADD", EEXIST);
    const uint64_t id = next_id_++;
    epoll_event ev{};
    ev.events = events;
    ev.data.u64 = id;
    if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev) != 0) throw_errno("EPOLL_CTL_ADD");
    entries_[id] = std::make_shared<Entry>(Entry{fd, std::move(handler)});
    by_fd_[fd] = id;
}

void EventLoop::modify(int fd, uint32_t events) {
    std::lock_guard lock(mutex_);
    const auto it = by_fd_.find(fd);
    if (it == by_fd_.end()) throw SysError("EPOLL_CTL_MOD", ENOENT);
    epoll_event ev{};
    ev.events = events;
    ev.data.u64 = it->second;
    if (::epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, fd, &ev) != 0) throw_errno("EPOLL_CTL_MOD");
}

void EventLoop::erase(int fd, uint64_t only_id) {
    std::lock_guard lock(mutex_);
    const auto it = by_fd_.find(fd);
    if (it == by_fd_.end() || (only_id != 0 && it->second != only_id)) return;
    ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, fd, nullptr);
    entries_.erase(it->second);
    by_fd_.erase(it);
}

void EventLoop::remove(int fd) {
    // On the loop thread no other handler can be running; elsewhere, going through
    // the loop guarantees the handler is not mid-call when remove returns.
    if (in_loop_thread()) {
        erase(fd, 0);
    } else {
        run_sync([this, fd] { erase(fd, 0); });
    }
}

void EventLoop::post(std::function<void()> task) {
    {
        std::lock_guard lock(mutex_);
        tasks_.push_back(std::move(task));
    }
    wake();
}

void EventLoop::run_sync(const std::function<void()>& task) {
    if (in_loop_thread()) {
        task();
        return;
    }
    std::promise<void> done;
    std::future<void> result = done.get_future();
    post([&task, &done] {
        try {
            task();
            done.set_value();
        } catch (...) {
            done.set_exception(std::current_exception());
        }
    });
    result.get();
}

void EventLoop::drain_tasks() {
    std::vector<std::function<void()>> tasks;
    {
        std::lock_guard lock(mutex_);
        tasks.swap(tasks_);
    }
    for (auto& task : tasks) {
        try {
            task();
        } catch (...) {
            log_line(fmt::format("event loop task failed: {}", current_exception_message()));
        }
    }
}

void EventLoop::run() noexcept {
    epoll_event events[64];
    for (;;) {
        const int n = ::epoll_wait(epoll_.get(), events, 64, -1);
        if (n < 0) {
            if (errno == EINTR) continue;
            log_line(fmt::format("epoll_wait: {}; device thread stops", ::strerror(errno)));
            return;
        }
        for (int i = 0; i < n; ++i) {
            const uint64_t id = events[i].data.u64;
            if (id == kWakeupId) {
                uint64_t count;
                [[maybe_unused]] const ssize_t r = ::read(wakeup_.get(), &count, sizeof(count));
                continue;
            }
            std::shared_ptr<Entry> entry;
            {
                std::lock_guard lock(mutex_);
                const auto it = entries_.find(id);
                if (it == entries_.end()) continue;  // removed by an earlier handler of this batch
                entry = it->second;
            }
            try {
                entry->handler(events[i].events);
            } catch (...) {
                log_line(fmt::format("device handler for fd {} failed: {}; it is removed", entry->fd,
                                     current_exception_message()));
                erase(entry->fd, id);  // this registration only: the handler may have re-added the fd
            }
        }
        {
            std::lock_guard lock(mutex_);
            if (stop_) return;
        }
        drain_tasks();
    }
}

}  // namespace nanovm
