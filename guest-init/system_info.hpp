// The figures of the ready line, read from the running guest kernel.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "guest-init/ready_line.hpp"

namespace nanovm::guest_init {

/// Milliseconds since the kernel booted (CLOCK_BOOTTIME), truncated.
uint64_t uptime_ms();

/// Online CPUs (sysconf(_SC_NPROCESSORS_ONLN); needs /sys or /proc), at least 1.
uint32_t online_cpus();

/// MemTotal of /proc/meminfo in KiB; falls back to sysinfo(2) if /proc is missing.
uint64_t mem_total_kib();

/// Parses the "MemTotal:  <n> kB" line of a /proc/meminfo text. Pure.
std::optional<uint64_t> parse_meminfo_total_kib(std::string_view meminfo);

/// All three figures, taken now.
ReadyInfo current_ready_info();

}  // namespace nanovm::guest_init
