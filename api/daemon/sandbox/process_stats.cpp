// /proc figures of a process (process_stats.hpp).
#include "api/daemon/sandbox/process_stats.hpp"

#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>

#include <fmt/format.h>

namespace nanovm::daemon {

std::optional<double> process_cpu_ms(pid_t pid) {
    // Fields 14 and 15 are utime and stime in clock ticks; the command name (field
    // 2) may hold spaces, so count from its closing ')'.
    std::ifstream stat_file(fmt::format("/proc/{}/stat", pid));
    if (!stat_file) return std::nullopt;
    const std::string text((std::istreambuf_iterator<char>(stat_file)), std::istreambuf_iterator<char>());
    const size_t close = text.rfind(')');
    if (close == std::string::npos || close + 2 > text.size()) return std::nullopt;
    std::istringstream rest(text.substr(close + 2));
    std::string field;
    uint64_t utime = 0, stime = 0;
    int i = 3;
    for (; i <= 15 && rest >> field; ++i) {
        try {
            if (i == 14) utime = std::stoull(field);
            if (i == 15) stime = std::stoull(field);
        } catch (const std::exception&) {
            return std::nullopt;
        }
    }
    if (i <= 15) return std::nullopt;
    return static_cast<double>(utime + stime) * 1000.0 / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

}  // namespace nanovm::daemon
