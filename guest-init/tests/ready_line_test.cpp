// The console lines guest-init prints for the host (guest-init/ready_line.hpp).
#include <catch2/catch.hpp>

#include "guest-init/ready_line.hpp"

using namespace nanovm::guest_init;

TEST_CASE("the ready line has the documented format", "[guest-init][ready_line]") {
    CHECK(format_ready_line({123, 2, 1012345}) == "nanovm-init: ready uptime_ms=123 cpus=2 mem_kib=1012345");
    CHECK(format_ready_line({0, 1, 0}).rfind(kReadyPrefix, 0) == 0);
}

TEST_CASE("the ready line parses back, also after console noise and with CRLF", "[guest-init][ready_line]") {
    auto info = parse_ready_line("[    0.5] x nanovm-init: ready uptime_ms=441 cpus=4 mem_kib=499876\r\n");
    REQUIRE(info);
    CHECK(info->uptime_ms == 441);
    CHECK(info->cpus == 4);
    CHECK(info->mem_kib == 499876);
    auto round = parse_ready_line(format_ready_line({7, 3, 9}));
    REQUIRE(round);
    CHECK(round->uptime_ms == 7);
    CHECK(round->cpus == 3);
    CHECK(round->mem_kib == 9);
}

TEST_CASE("malformed ready lines are rejected", "[guest-init][ready_line]") {
    CHECK_FALSE(parse_ready_line("nanovm-init: ready"));
    CHECK_FALSE(parse_ready_line("nanovm-init: ready uptime_ms=1 cpus=2"));
    CHECK_FALSE(parse_ready_line("nanovm-init: ready uptime_ms=x cpus=2 mem_kib=3"));
    CHECK_FALSE(parse_ready_line("nanovm-init: ready cpus=2 uptime_ms=1 mem_kib=3"));
    CHECK_FALSE(parse_ready_line("nanovm-init: ready uptime_ms=1 cpus=2 mem_kib=3 extra=4"));
    CHECK_FALSE(parse_ready_line("something else"));
}

TEST_CASE("the exit line reports a status or a signal", "[guest-init][ready_line]") {
    CHECK(format_exit_line({false, 3}) == "nanovm-init: exit status=3");
    CHECK(format_exit_line({true, 9}) == "nanovm-init: exit signal=9");
    auto st = parse_exit_line("nanovm-init: exit status=0\r");
    REQUIRE(st);
    CHECK_FALSE(st->signaled);
    CHECK(st->value == 0);
    auto sg = parse_exit_line(format_exit_line({true, 15}));
    REQUIRE(sg);
    CHECK(sg->signaled);
    CHECK(sg->value == 15);
    CHECK_FALSE(parse_exit_line("nanovm-init: exit code=1"));
}
