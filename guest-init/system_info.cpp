// Ready-line figures from the guest kernel (see system_info.hpp).
#include "guest-init/system_info.hpp"

#include <sys/sysinfo.h>
#include <time.h>
#include <unistd.h>

#include <charconv>

#include "guest-init/read_file.hpp"

namespace nanovm::guest_init {

uint64_t uptime_ms() {
    timespec ts{};
    if (::clock_gettime(CLOCK_BOOTTIME, &ts) != 0) return 0;
    return static_cast<uint64_t>(ts.tv_sec) * 1000u + static_cast<uint64_t>(ts.tv_nsec) / 1000000u;
}

uint32_t online_cpus() {
    const long n = ::sysconf(_SC_NPROCESSORS_ONLN);
    return n >= 1 ? static_cast<uint32_t>(n) : 1u;
}

std::optional<uint64_t> parse_meminfo_total_kib(std::string_view meminfo) {
    constexpr std::string_view kKey = "MemTotal:";
    size_t at = 0;
    for (;;) {
        at = meminfo.find(kKey, at);
        if (at == std::string_view::npos) return std::nullopt;
        if (at == 0 || meminfo[at - 1] == '\n') break;
        at += kKey.size();
    }
    std::string_view rest = meminfo.substr(at + kKey.size());
    while (!rest.empty() && (rest.front() == ' ' || rest.front() == '\t')) rest.remove_prefix(1);
    uint64_t kib = 0;
    auto [end, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), kib);
    if (ec != std::errc{} || end == rest.data()) return std::nullopt;
    return kib;
}

uint64_t mem_total_kib() {
    if (auto text = read_small_file("/proc/meminfo")) {
        if (auto kib = parse_meminfo_total_kib(*text)) return *kib;
    }
    struct sysinfo si {};
    if (::sysinfo(&si) != 0) return 0;
    return static_cast<uint64_t>(si.totalram) * si.mem_unit / 1024u;
}

ReadyInfo current_ready_info() {
    ReadyInfo info;
    info.cpus = online_cpus();
    info.mem_kib = mem_total_kib();
    info.uptime_ms = uptime_ms();  // last: the moment the line is printed
    return info;
}

}  // namespace nanovm::guest_init
