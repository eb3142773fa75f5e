// The lines guest-init prints on the guest console for the host to parse.
//
// Dependency-free (standard headers only): host code (VMM tests, the benchmark,
// nanovmd) includes this header as "guest-init/ready_line.hpp" to recognise them.
//
// 1. The ready line, printed exactly once per boot when PID 1 has mounted the early
//    filesystems, set the hostname and brought loopback up:
//
//        nanovm-init: ready uptime_ms=<U> cpus=<C> mem_kib=<M>
//
//    U: milliseconds since the guest kernel booted (CLOCK_BOOTTIME, truncated),
//       decimal integer. It is the guest's own view of its boot time.
//    C: online vCPUs as the guest sees them, decimal integer >= 1.
//    M: MemTotal from /proc/meminfo in KiB, decimal integer.
//    Keys are always in this order, separated by one space; the line ends in "\n"
//    (a serial console may add "\r"). It is written with a single write(2), but kernel
//    messages on the same console may precede it on the same line, so search for
//    kReadyPrefix anywhere in a line rather than at its start.
//
// 2. The exit line, printed when the command of `nanovm.exec=` (or the interactive
//    shell) has ended, right before power-off:
//
//        nanovm-init: exit status=<code>     (exited normally, code 0..255)
//        nanovm-init: exit signal=<number>   (killed by that signal)
//
// 3. Error lines, one per problem, for humans and for test logs:
//
//        nanovm-init: error: <what failed>[: <strerror>]
//
// 4. Warning lines, not meant to be parsed: "nanovm-init: warning: ..." (e.g. an
//    unknown nanovm.* key; the boot goes on).
//
// guest-init prints nothing else of its own (each console byte costs a VM exit), and
// nothing when it powers off: the kernel's "reboot: Restarting system" follows.
#pragma once

#include <charconv>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>

namespace nanovm::guest_init {

/// Every guest-init console line starts with this.
inline constexpr std::string_view kLinePrefix = "nanovm-init: ";
/// Start of the ready line (followed by "uptime_ms=").
inline constexpr std::string_view kReadyPrefix = "nanovm-init: ready ";
/// Start of the exit line (followed by "status=" or "signal=").
inline constexpr std::string_view kExitPrefix = "nanovm-init: exit ";
/// Start of an error line.
inline constexpr std::string_view kErrorPrefix = "nanovm-init: error: ";

/// The figures of a ready line.
struct ReadyInfo {
    uint64_t uptime_ms = 0;  ///< guest CLOCK_BOOTTIME at the ready line, ms
    uint32_t cpus = 0;       ///< online vCPUs
    uint64_t mem_kib = 0;    ///< MemTotal, KiB
};

/// How the exec'd command (or shell) ended, as reported by the exit line.
struct ExitInfo {
    bool signaled = false;  ///< true: `value` is a signal number; false: an exit code
    int value = 0;
};

namespace detail {
/// Parses "<key>=<decimal>" at the front of `s`, advancing `s` past it.
template <typename T>
bool take_field(std::string_view& s, std::string_view key, T& out) {
    if (s.substr(0, key.size()) != key || s.size() <= key.size() || s[key.size()] != '=')
        return false;
    s.remove_prefix(key.size() + 1);
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
    if (ec != std::errc{} || end == s.data()) return false;
    s.remove_prefix(static_cast<size_t>(end - s.data()));
    return true;
}

inline std::string_view trim_line_end(std::string_view s) {
    while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' '))
        s.remove_suffix(1);
    return s;
}
}  // namespace detail

/// The ready line for `info`, without the trailing newline.
inline std::string format_ready_line(const ReadyInfo& info) {
    std::string line(kReadyPrefix);
    line += "uptime_ms=" + std::to_string(info.uptime_ms);
    line += " cpus=" + std::to_string(info.cpus);
    line += " mem_kib=" + std::to_string(info.mem_kib);
    return line;
}

/// Finds a ready line in `line` (one console line; the prefix may appear after other
/// text) and returns its figures; nullopt if there is none or it is malformed.
inline std::optional<ReadyInfo> parse_ready_line(std::string_view line) {
    auto at = line.find(kReadyPrefix);
    if (at == std::string_view::npos) return std::nullopt;
    std::string_view s = detail::trim_line_end(line.substr(at + kReadyPrefix.size()));
    ReadyInfo info;
    if (!detail::take_field(s, "uptime_ms", info.uptime_ms)) return std::nullopt;
    if (s.substr(0, 1) != " ") return std::nullopt;
    s.remove_prefix(1);
    if (!detail::take_field(s, "cpus", info.cpus)) return std::nullopt;
    if (s.substr(0, 1) != " ") return std::nullopt;
    s.remove_prefix(1);
    if (!detail::take_field(s, "mem_kib", info.mem_kib)) return std::nullopt;
    if (!s.empty()) return std::nullopt;
    return info;
}

/// The exit line for `info`, without the trailing newline.
inline std::string format_exit_line(const ExitInfo& info) {
    std::string line(kExitPrefix);
    line += info.signaled ? "signal=" : "status=";
    line += std::to_string(info.value);
    return line;
}

/// Finds an exit line in `line` and returns how the command ended; nullopt if none.
inline std::optional<ExitInfo> parse_exit_line(std::string_view line) {
    auto at = line.find(kExitPrefix);
    if (at == std::string_view::npos) return std::nullopt;
    std::string_view s = detail::trim_line_end(line.substr(at + kExitPrefix.size()));
    ExitInfo info;
    if (detail::take_field(s, "status", info.value)) {
        info.signaled = false;
    } else if (detail::take_field(s, "signal", info.value)) {
        info.signaled = true;
    } else {
        return std::nullopt;
    }
    if (!s.empty()) return std::nullopt;
    return info;
}

}  // namespace nanovm::guest_init
