// Autosleep's idle bookkeeping (api/daemon/sandbox/autosleep.hpp), with a clock of
// its own: calls in flight, the idle time after them, and the VMM's CPU share over
// windows (a burner keeps it awake, an idle guest does not, a new VMM starts over).
#include <catch2/catch.hpp>

#include "api/daemon/sandbox/autosleep.hpp"

using nanovm::daemon::IdlePolicy;
using nanovm::daemon::IdleTracker;

TEST_CASE("autosleep: idle time counts from the last call, never while one is in flight", "[daemon][autosleep]") {
    IdleTracker t;
    CHECK(t.idle_ms("a", 1000) == 0);  // first seen: counts from now
    CHECK(t.idle_ms("a", 6000) == 5000);
    t.begin_activity("a", 7000);
    CHECK(t.idle_ms("a", 60000) == 0);
    t.begin_activity("a", 8000);
    t.end_activity("a", 9000);
    CHECK(t.idle_ms("a", 60000) == 0);  // one still in flight
    t.end_activity("a", 61000);
    CHECK(t.idle_ms("a", 65000) == 4000);
    CHECK(t.idle_ms("b", 65000) == 0);  // another sandbox is its own
    t.reset("a", 70000);
    CHECK(t.idle_ms("a", 71000) == 1000);
    t.forget("a");
    CHECK(t.idle_ms("a", 90000) == 0);
}

TEST_CASE("autosleep: a VMM over the CPU share is active, one under it is idle", "[daemon][autosleep]") {
    IdleTracker t(IdlePolicy{.cpu_fraction = 0.25, .cpu_window_ms = 2000});
    t.sample_cpu("burn", 0, 100);
    t.sample_cpu("idle", 0, 100);
    // Samples closer than the window are not compared.
    t.sample_cpu("burn", 1000, 1100);
    CHECK(t.idle_ms("burn", 1000) == 1000);
    // A burner: 1 CPU over the window.
    t.sample_cpu("burn", 2000, 2100);
    CHECK(t.idle_ms("burn", 2000) == 0);
    t.sample_cpu("burn", 4000, 4100);
    CHECK(t.idle_ms("burn", 5000) == 1000);
    // An idle guest: 2% of a CPU.
    for (int64_t now = 2000; now <= 10000; now += 2000) t.sample_cpu("idle", now, 100 + static_cast<double>(now) * 0.02);
    CHECK(t.idle_ms("idle", 10000) == 10000);
    // A new VMM (a reboot): its CPU time starts again below the last sample.
    t.sample_cpu("idle", 12000, 5);
    t.sample_cpu("idle", 14000, 10);
    CHECK(t.idle_ms("idle", 14000) == 14000);
}

TEST_CASE("autosleep: a background command the agent lists as running keeps the sandbox awake", "[daemon][autosleep]") {
    IdleTracker t;
    t.begin_activity("a", 1000);  // POST .../commands: its call ends at once...
    t.end_activity("a", 1100);
    CHECK(t.idle_ms("a", 61100) == 60000);
    // ...but the command runs on: the agent lists one running at 61100.
    t.note_commands("a", 61100, 1);
    CHECK(t.idle_ms("a", 61100) == 0);
    CHECK(t.idle_ms("a", 62100) == 1000);
    // Still running a minute later: awake again from then.
    t.note_commands("a", 121100, 2);
    CHECK(t.idle_ms("a", 121600) == 500);
    // Ended: a listing with none running changes nothing; idle counts from the last listing that had one.
    t.note_commands("a", 181600, 0);
    CHECK(t.idle_ms("a", 181600) == 60500);
    // Running again at 150000 (a listing that found one), then a listing stamped earlier
    // (a slow one) never moves the idle start back.
    t.note_commands("a", 150000, 1);
    t.note_commands("a", 100000, 1);
    CHECK(t.idle_ms("a", 181600) == 31600);
    // Another sandbox's commands are its own.
    t.note_commands("b", 181600, 0);
    CHECK(t.idle_ms("b", 191600) == 10000);
}
