// Minimal diagnostics for the VMM: one line to stderr per call, and a rate limiter
// for lines a guest could otherwise trigger in a loop.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string_view>

namespace nanovm {

/// Writes "nanovm: <message>\n" to stderr in one write(2) (lines from several threads
/// do not interleave).
void log_line(std::string_view message);

/// Allows at most `burst` events per `period`; counts the rest. Thread-safe.
class RateLimiter {
public:
    explicit RateLimiter(uint32_t burst = 10,
                         std::chrono::steady_clock::duration period = std::chrono::seconds(1))
        : burst_(burst), period_(period) {}
    /// True if this event may be reported. When a new period starts, `suppressed` is
    /// set to the number of events dropped in the previous one (else 0).
    bool allow(uint64_t& suppressed);

private:
    std::mutex mutex_;
    uint32_t burst_;
    std::chrono::steady_clock::duration period_;
    std::chrono::steady_clock::time_point window_start_{};
    uint32_t used_ = 0;
    uint64_t dropped_ = 0;
};

}  // namespace nanovm
