// Deadlines for the agent's event loop (command timeouts).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>

namespace nanovm::agent {

/// One-shot timers on CLOCK_MONOTONIC (std::chrono::steady_clock). Single-threaded.
class Timers {
public:
    using Clock = std::chrono::steady_clock;

    /// Calls `fn` once at or after `deadline`; returns a token for cancel() (never 0).
    uint64_t add(Clock::time_point deadline, std::function<void()> fn);
    /// Cancels a timer that has not fired (no-op for 0 or a fired one).
    void cancel(uint64_t token);
    /// Milliseconds until the next deadline (rounded up), -1 if there is none.
    int next_timeout_ms() const;
    /// Runs every timer whose deadline has passed.
    void run_expired();

private:
    struct Entry {
        uint64_t token;
        std::function<void()> fn;
    };
    std::multimap<Clock::time_point, Entry> by_deadline_;
    std::map<uint64_t, Clock::time_point> deadline_of_;
    uint64_t next_token_ = 1;
};

}  // namespace nanovm::agent
