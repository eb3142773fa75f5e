// Prometheus text (metrics.hpp).
#include "api/daemon/metrics.hpp"

#include <fmt/format.h>

namespace nanovm::daemon {

namespace {

// A label value with \ " and newlines escaped (the exposition format's rule).
std::string escape(const std::string& text) {
    std::string out;
    for (char c : text) {
        if (c == '\\' || c == '"') out += '\\';
        if (c == '\n') {
            out += "\\n";
            continue;
        }
        out += c;
    }
    return out;
}

}  // namespace

void Metrics::observe(const std::string& method, const std::string& route, int status, const std::string& error_code,
                      double seconds) {
    const std::string op = route.empty() ? std::string("unmatched") : method + " " + route;
    std::lock_guard lock(mutex_);
    Histogram& h = operations_[op];
    for (size_t i = 0; i < kBuckets.size(); ++i)
        if (seconds <= kBuckets[i]) ++h.buckets[i];
    ++h.count;
    h.sum += seconds;
    if (!error_code.empty()) ++errors_[error_code];
    ++statuses_[status];
}

std::string Metrics::render(const std::map<std::string, int64_t>& sandboxes) const {
    std::string out;
    out += "# HELP nanovm_sandboxes Sandboxes known to the daemon, by state.\n# TYPE nanovm_sandboxes gauge\n";
    for (const auto& [state, n] : sandboxes) out += fmt::format("nanovm_sandboxes{{state=\"{}\"}} {}\n", escape(state), n);
    std::lock_guard lock(mutex_);
    out += "# HELP nanovm_api_operation_seconds Time from a request's end to its answer's end, by operation.\n"
           "# TYPE nanovm_api_operation_seconds histogram\n";
    for (const auto& [op, h] : operations_) {
        const std::string label = escape(op);
        for (size_t i = 0; i < kBuckets.size(); ++i)
            out += fmt::format("nanovm_api_operation_seconds_bucket{{op=\"{}\",le=\"{}\"}} {}\n", label, kBuckets[i],
                               h.buckets[i]);
        out += fmt::format("nanovm_api_operation_seconds_bucket{{op=\"{}\",le=\"+Inf\"}} {}\n", label, h.count);
        out += fmt::format("nanovm_api_operation_seconds_sum{{op=\"{}\"}} {}\n", label, h.sum);
        out += fmt::format("nanovm_api_operation_seconds_count{{op=\"{}\"}} {}\n", label, h.count);
    }
    out += "# HELP nanovm_api_errors_total Error answers, by catalogue code.\n# TYPE nanovm_api_errors_total counter\n";
    for (const auto& [code, n] : errors_) out += fmt::format("nanovm_api_errors_total{{code=\"{}\"}} {}\n", escape(code), n);
    out += "# HELP nanovm_api_responses_total Answers, by HTTP status.\n# TYPE nanovm_api_responses_total counter\n";
    for (const auto& [status, n] : statuses_) out += fmt::format("nanovm_api_responses_total{{status=\"{}\"}} {}\n", status, n);
    return out;
}

}  // namespace nanovm::daemon
