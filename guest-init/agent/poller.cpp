// epoll dispatch (see poller.hpp).
#include "guest-init/agent/poller.hpp"

#include <cerrno>

namespace nanovm::agent {

bool Poller::init() {
    epoll_.reset(::epoll_create1(EPOLL_CLOEXEC));
    return epoll_.valid();
}

uint64_t Poller::add(int fd, uint32_t events, Handler handler) {
    const uint64_t token = next_token_++;
    epoll_event ev{};
    ev.events = events;
    ev.data.u64 = token;
    if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev) != 0) return 0;
    watches_.emplace(token, Watch{fd, events, false, std::move(handler)});
    return token;
}

void Poller::modify(uint64_t token, uint32_t events) {
    auto it = watches_.find(token);
    if (it == watches_.end() || it->second.removed || it->second.events == events) return;
    epoll_event ev{};
    ev.events = events;
    ev.data.u64 = token;
    if (::epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, it->second.fd, &ev) == 0) it->second.events = events;
}

void Poller::remove(uint64_t token) {
    auto it = watches_.find(token);
    if (it == watches_.end() || it->second.removed) return;
    ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, it->second.fd, nullptr);
    it->second.removed = true;
    removed_.push_back(token);
}

int Poller::wait(int timeout_ms) {
    epoll_event events[64];
    const int n = ::epoll_wait(epoll_.get(), events, 64, timeout_ms);
    if (n < 0) return errno == EINTR ? 0 : -1;
    for (int i = 0; i < n; ++i) {
        auto it = watches_.find(events[i].data.u64);
        if (it == watches_.end() || it->second.removed) continue;
        // References into an unordered_map survive the rehash of an add() made by
        // the handler, and removed entries are only erased after the round: the
        // handler stays alive while it runs even if it removes its own watch.
        Handler& handler = it->second.handler;
        handler(events[i].events);
    }
    for (uint64_t token : removed_) watches_.erase(token);
    removed_.clear();
    return n;
}

}  // namespace nanovm::agent
