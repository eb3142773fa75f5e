// The idle bookkeeping of autosleep (autosleep.hpp).
#include "api/daemon/sandbox/autosleep.hpp"

#include <algorithm>

namespace nanovm::daemon {

IdleTracker::Entry& IdleTracker::entry(const std::string& id, int64_t now_ms) {
    auto [it, made] = entries_.try_emplace(id);
    if (made) it->second.last_active_ms = now_ms;
    return it->second;
}

void IdleTracker::begin_activity(const std::string& id, int64_t now_ms) {
    std::lock_guard lock(mutex_);
    Entry& e = entry(id, now_ms);
    ++e.in_flight;
    e.last_active_ms = std::max(e.last_active_ms, now_ms);
}

void IdleTracker::end_activity(const std::string& id, int64_t now_ms) {
    std::lock_guard lock(mutex_);
    Entry& e = entry(id, now_ms);
    if (e.in_flight > 0) --e.in_flight;
    e.last_active_ms = std::max(e.last_active_ms, now_ms);
}

void IdleTracker::sample_cpu(const std::string& id, int64_t now_ms, double cpu_ms) {
    std::lock_guard lock(mutex_);
    Entry& e = entry(id, now_ms);
    if (!e.sample || cpu_ms < e.sample->second || now_ms < e.sample->first) {
        e.sample = std::make_pair(now_ms, cpu_ms);
        return;
    }
    const int64_t span = now_ms - e.sample->first;
    if (span < policy_.cpu_window_ms) return;
    const double share = (cpu_ms - e.sample->second) / static_cast<double>(span);
    if (share > policy_.cpu_fraction) e.last_active_ms = std::max(e.last_active_ms, now_ms);
    e.sample = std::make_pair(now_ms, cpu_ms);
}

void IdleTracker::note_commands(const std::string& id, int64_t now_ms, size_t running) {
    std::lock_guard lock(mutex_);
    Entry& e = entry(id, now_ms);
    if (running > 0) e.last_active_ms = std::max(e.last_active_ms, now_ms);
}

int64_t IdleTracker::idle_ms(const std::string& id, int64_t now_ms) {
    std::lock_guard lock(mutex_);
    const Entry& e = entry(id, now_ms);
    if (e.in_flight > 0) return 0;
    return std::max<int64_t>(0, now_ms - e.last_active_ms);
}

void IdleTracker::reset(const std::string& id, int64_t now_ms) {
    std::lock_guard lock(mutex_);
    Entry& e = entry(id, now_ms);
    e.last_active_ms = now_ms;
    e.sample.reset();
}

void IdleTracker::forget(const std::string& id) {
    std::lock_guard lock(mutex_);
    entries_.erase(id);
}

}  // namespace nanovm::daemon
