// guest-init: PID 1 of the nanovm guest.
//
// Mounts the early filesystems, sets the hostname, brings loopback up, switches to a
// writable overlay root if asked (overlay_root.hpp), prints the ready line
// (ready_line.hpp), then does what the kernel command line asks (cmdline.hpp): power off at once, run one shell command, serve the guest agent
// (agent/supervisor.hpp), or run an interactive shell, and powers the VM off when
// that ends (power.hpp). It reaps every zombie all along, and never exits: PID 1
// exiting panics the kernel.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <vector>

#include "guest-init/agent/supervisor.hpp"
#include "guest-init/cmdline.hpp"
#include "guest-init/console.hpp"
#include "guest-init/mounts.hpp"
#include "guest-init/net.hpp"
#include "guest-init/overlay_root.hpp"
#include "guest-init/power.hpp"
#include "guest-init/read_file.hpp"
#include "guest-init/ready_line.hpp"
#include "guest-init/reaper.hpp"
#include "guest-init/signals.hpp"
#include "guest-init/spawn.hpp"
#include "guest-init/system_info.hpp"

namespace nanovm::guest_init {
namespace {

ExitInfo exit_info_from_wait_status(int status) {
    if (WIFSIGNALED(status)) return {true, WTERMSIG(status)};
    return {false, WEXITSTATUS(status)};
}

[[noreturn]] void fatal(std::string_view what) {
    log_error(what);
    power_down(PowerAction::kPoweroff);
}

// Runs `argv` on the console and serves PID 1's signals until it ends (exit line,
// power-off) or a power request arrives. `interactive`: the console becomes its
// controlling terminal (see spawn_on_console).
[[noreturn]] void run_on_console(const std::vector<std::string>& argv, bool interactive) {
    const pid_t child = spawn_on_console(argv, console_tty_path(), interactive);
    if (child < 0) fatal("cannot start " + argv[0]);
    for (;;) {
        const int sig = wait_for_signal(-1);
        if (sig == SIGCHLD) {
            const ReapResult r = reap_children(child);
            if (r.watched_exited) {
                write_line(format_exit_line(exit_info_from_wait_status(r.watched_status)));
                power_down(PowerAction::kPoweroff);
            }
        } else if (auto action = power_action_for_signal(sig)) {
            power_down(*action);
        }
    }
}

[[noreturn]] void run() {
    block_init_signals();
    ::umask(022);
    if (::chdir("/") != 0) log_errno("chdir /", errno);

    // fds 0-2 come from the kernel if the initramfs has /dev/console; otherwise they
    // can only be opened once devtmpfs is mounted.
    const bool had_console = ensure_console_fds();
    mount_early_filesystems();
    if (!had_console) ensure_console_fds();
    set_hostname();
    bring_up_loopback();

    const auto cmdline = read_small_file("/proc/cmdline");
    if (!cmdline) {
        log_errno("read /proc/cmdline", errno);
        fatal("cannot tell what to run without the kernel command line");
    }
    BootConfig config = parse_boot_config(*cmdline);
    for (const std::string& w : config.warnings) log_info("warning: " + w);
    if (!config.errors.empty()) {
        for (const std::string& e : config.errors) log_error(e);
        fatal("bad nanovm.* kernel parameters");
    }
    if (!config.overlay.empty()) {
        if (!switch_to_overlay_root(config.overlay)) fatal("cannot make the writable overlay root");
        mount_early_filesystems();  // again, in the new root
    }

    // In agent mode the agent listens before the ready line: a host that saw the
    // line can connect at once.
    const pid_t agent = config.mode == BootMode::kAgent ? start_agent(config.agent_port) : -1;
    write_line(format_ready_line(current_ready_info()));

    switch (config.mode) {
        case BootMode::kUntilReady:
            power_down(PowerAction::kPoweroff);
        case BootMode::kExec:
            run_on_console({"/bin/sh", "-c", config.exec_command}, false);
        case BootMode::kShell:
            run_on_console({"/bin/sh"}, true);
        case BootMode::kAgent:
            supervise_agent(agent, config.agent_port);
    }
    fatal("unknown boot mode");
}

}  // namespace
}  // namespace nanovm::guest_init

int main() {
    using namespace nanovm::guest_init;
    if (::getpid() != 1) {
        // Mounting over the host's /dev and rebooting it is not what anyone wants.
        write_line(std::string(kErrorPrefix) + "guest-init must run as PID 1 of a nanovm guest");
        return 1;
    }
    run();
}
