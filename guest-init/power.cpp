// Power-off and reboot of the guest (see power.hpp).
#include "guest-init/power.hpp"

#include <signal.h>
#include <sys/mount.h>
#include <sys/reboot.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__) || defined(__i386__)
#include <sys/io.h>
#endif

#include <algorithm>
#include <charconv>
#include <cerrno>
#include <cstdint>
#include <string>

#include "guest-init/console.hpp"
#include "guest-init/reaper.hpp"
#include "guest-init/signals.hpp"
#include "guest-init/protocol/control_port.hpp"

namespace nanovm::guest_init {
namespace {

// How long processes get to exit after SIGTERM, and after SIGKILL.
constexpr int64_t kTermGraceMs = 200;
constexpr int64_t kKillWaitMs = 1000;

int64_t monotonic_ms() {
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

// Reaps until no child is left (true) or `budget_ms` has passed (false).
bool wait_for_no_children(int64_t budget_ms) {
    const int64_t deadline = monotonic_ms() + budget_ms;
    for (;;) {
        if (reap_children().no_children) return true;
        const int64_t left = deadline - monotonic_ms();
        if (left <= 0) return false;
        // Any signal wakes us up to reap again; repeated power requests are moot now.
        wait_for_signal(static_cast<int>(std::min<int64_t>(left, 50)));
    }
}

void announce(PowerAction action) {
#if defined(__x86_64__) || defined(__i386__)
    const uint8_t value = action == PowerAction::kPoweroff ? control_port::kPoweroff : control_port::kReboot;
    if (::ioperm(control_port::kPort, 1, 1) != 0) {
        // ENOSYS: the guest kernel lacks CONFIG_X86_IOPL_IOPERM. The VMM then sees
        // an unannounced reset, i.e. a crash.
        const int err = errno;
        char port[8] = {};
        std::to_chars(port, port + sizeof port - 1, control_port::kPort, 16);
        log_errno(std::string("ioperm(nanovm control port 0x") + port +
                      "; the guest kernel needs CONFIG_X86_IOPL_IOPERM=y)",
                  err);
        return;
    }
    ::outb(value, control_port::kPort);  // glibc's order: value, then port
#else
    (void)action;
#endif
}

}  // namespace

std::optional<PowerAction> power_action_for_signal(int sig) {
    switch (sig) {
        case SIGUSR1:
        case SIGUSR2:
            return PowerAction::kPoweroff;
        case SIGTERM:
        case SIGINT:
            return PowerAction::kReboot;
        default:
            return std::nullopt;
    }
}

void power_down(PowerAction action) {
    ::sync();
    // kill(-1) reaches every process but PID 1 itself (and kernel threads).
    ::kill(-1, SIGTERM);
    ::kill(-1, SIGCONT);  // stopped processes must run to act on SIGTERM
    if (!wait_for_no_children(kTermGraceMs)) {
        ::kill(-1, SIGKILL);
        if (!wait_for_no_children(kKillWaitMs)) log_error("processes left after SIGKILL");
    }
    ::sync();
    // A read-write root disk must be left clean (journal checkpointed, nothing to
    // recover at the next mount): remount it read-only. A no-op for a read-only root
    // or an initramfs; EBUSY only if a process that survived SIGKILL holds a file
    // open for writing.
    if (::mount(nullptr, "/", nullptr, MS_REMOUNT | MS_RDONLY, nullptr) != 0) {
        log_errno("remount / read-only", errno);
    }
    // Let the console's transmit buffer drain: the reset would cut what is queued.
    ::tcdrain(STDOUT_FILENO);
    announce(action);
    ::reboot(RB_AUTOBOOT);
    log_errno("reboot(RB_AUTOBOOT)", errno);
    ::reboot(RB_POWER_OFF);
    log_errno("reboot(RB_POWER_OFF)", errno);
    for (;;) ::pause();
}

}  // namespace nanovm::guest_init
