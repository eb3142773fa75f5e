// Power requests to PID 1 (guest-init/power.hpp).
#include <signal.h>

#include <catch2/catch.hpp>

#include "guest-init/power.hpp"

using nanovm::guest_init::PowerAction;
using nanovm::guest_init::power_action_for_signal;

TEST_CASE("busybox poweroff and halt power off; reboot and Ctrl-Alt-Del reboot", "[guest-init][power]") {
    CHECK(power_action_for_signal(SIGUSR2) == PowerAction::kPoweroff);  // poweroff
    CHECK(power_action_for_signal(SIGUSR1) == PowerAction::kPoweroff);  // halt
    CHECK(power_action_for_signal(SIGTERM) == PowerAction::kReboot);    // reboot
    CHECK(power_action_for_signal(SIGINT) == PowerAction::kReboot);     // Ctrl-Alt-Del
    CHECK_FALSE(power_action_for_signal(SIGCHLD));
    CHECK_FALSE(power_action_for_signal(SIGHUP));
}
