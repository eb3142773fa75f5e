// One-shot timers (see timers.hpp).
#include "guest-init/agent/timers.hpp"

namespace nanovm::agent {

uint64_t Timers::add(Clock::time_point deadline, std::function<void()> fn) {
    const uint64_t token = next_token_++;
    by_deadline_.emplace(deadline, Entry{token, std::move(fn)});
    deadline_of_.emplace(token, deadline);
    return token;
}

void Timers::cancel(uint64_t token) {
    auto d = deadline_of_.find(token);
    if (d == deadline_of_.end()) return;
    auto [first, last] = by_deadline_.equal_range(d->second);
    for (auto it = first; it != last; ++it) {
        if (it->second.token == token) {
            by_deadline_.erase(it);
            break;
        }
    }
    deadline_of_.erase(d);
}

int Timers::next_timeout_ms() const {
    if (by_deadline_.empty()) return -1;
    const auto left = by_deadline_.begin()->first - Clock::now();
    if (left <= Clock::duration::zero()) return 0;
    const auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
    return ms > 1'000'000 ? 1'000'000 : static_cast<int>(ms);
}

void Timers::run_expired() {
    const auto now = Clock::now();
    while (!by_deadline_.empty() && by_deadline_.begin()->first <= now) {
        auto it = by_deadline_.begin();
        std::function<void()> fn = std::move(it->second.fn);
        deadline_of_.erase(it->second.token);
        by_deadline_.erase(it);
        fn();  // may add or cancel timers
    }
}

}  // namespace nanovm::agent
