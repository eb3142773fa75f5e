// Ready-line figures read from the guest kernel (guest-init/system_info.hpp).
#include <catch2/catch.hpp>

#include "guest-init/system_info.hpp"

using namespace nanovm::guest_init;

TEST_CASE("MemTotal is read from a /proc/meminfo text", "[guest-init][system_info]") {
    CHECK(parse_meminfo_total_kib("MemTotal:         492168 kB\nMemFree:  1 kB\n") == 492168u);
    CHECK(parse_meminfo_total_kib("Foo: 1 kB\nMemTotal:\t77 kB\n") == 77u);
    CHECK_FALSE(parse_meminfo_total_kib("MemFree: 1 kB\n"));
    CHECK_FALSE(parse_meminfo_total_kib("XMemTotal: 5 kB\n"));
    CHECK_FALSE(parse_meminfo_total_kib("MemTotal: kB\n"));
}

TEST_CASE("this machine's figures are plausible", "[guest-init][system_info]") {
    CHECK(online_cpus() >= 1);
    CHECK(mem_total_kib() > 1024);
    CHECK(uptime_ms() > 0);
}
