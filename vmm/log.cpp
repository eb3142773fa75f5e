#include "vmm/log.hpp"

#include <unistd.h>

#include <string>

namespace nanovm {

void log_line(std::string_view message) {
    std::string line = "nanovm: ";
    line.append(message);
    line.push_back('\n');
    const char* p = line.data();
    size_t left = line.size();
    while (left > 0) {
        const ssize_t n = ::write(STDERR_FILENO, p, left);
        if (n <= 0) return;  // diagnostics are best-effort
        p += n;
        left -= static_cast<size_t>(n);
    }
}

bool RateLimiter::allow(uint64_t& suppressed) {
    std::lock_guard lock(mutex_);
    suppressed = 0;
    const auto now = std::chrono::steady_clock::now();
    if (now - window_start_ >= period_) {
        suppressed = dropped_;
        window_start_ = now;
        used_ = 0;
        dropped_ = 0;
    }
    if (used_ < burst_) {
        ++used_;
        return true;
    }
    ++dropped_;
    return false;
}

}  // namespace nanovm
