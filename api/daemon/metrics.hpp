// GET /metrics: Prometheus text exposition (version 0.0.4) of the daemon's counters:
// sandboxes per state, a latency histogram per operation (method and route), and
// error answers by catalogue code. Thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

namespace nanovm::daemon {

class Metrics {
public:
    /// Histogram bucket bounds, seconds.
    static constexpr std::array<double, 12> kBuckets{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                                     0.1,   0.25,   0.5,   1,    5,     30};

    /// One answered request: its route pattern ("" if none matched), status, error
    /// code ("" for none) and duration in seconds.
    void observe(const std::string& method, const std::string& route, int status, const std::string& error_code,
                 double seconds);

    /// The exposition text, with `sandboxes` (state -> count) as a gauge.
    std::string render(const std::map<std::string, int64_t>& sandboxes) const;

private:
    struct Histogram {
        std::array<uint64_t, kBuckets.size()> buckets{};
        uint64_t count = 0;
        double sum = 0;
    };
    mutable std::mutex mutex_;
    std::map<std::string, Histogram> operations_;
    std::map<std::string, uint64_t> errors_;
    std::map<int, uint64_t> statuses_;
};

}  // namespace nanovm::daemon
