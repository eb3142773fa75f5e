#include "api/cli/boot_command.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <fstream>

#include <fmt/format.h>

#include "api/cli/exit_status.hpp"
#include "api/cli/host_console.hpp"
#include "api/vm/linux_vm.hpp"
#include "api/vm/termination_signals.hpp"
#include "vmm/error.hpp"
#include "vmm/fd.hpp"
#include "vmm/log.hpp"
#include "vmm/machine.hpp"

namespace nanovm {

namespace {

// Writes the device counters for --stats; a failure is reported, not fatal.
void write_stats(const std::string& path, const std::string& json) {
    std::ofstream out(path, std::ios::trunc);
    out << json << '\n';
    out.close();
    if (!out) log_line(fmt::format("--stats {}: could not write the device counters", path));
}

int exit_status_for(const StopReason& reason, GuestOutcome outcome, int stop_signal) {
    switch (outcome) {
        case GuestOutcome::poweroff: return exit_status::kPoweroff;
        case GuestOutcome::reboot:
            log_line("the guest rebooted (nanovm does not restart it)");
            return exit_status::kReboot;
        case GuestOutcome::crash:
            log_line(fmt::format("the guest crashed ({})", reason.describe()));
            return exit_status::kCrash;
        case GuestOutcome::stopped:
            log_line(fmt::format("stopped: {}", reason.detail.empty() ? "on request" : reason.detail));
            return exit_status::kSignalBase + (stop_signal > 0 ? stop_signal : SIGINT);
        case GuestOutcome::error: break;
    }
    log_line(fmt::format("error: {}", reason.describe()));
    return exit_status::kError;
}

int boot(const BootOptions& options) {
    // Where the console goes: opened first, so that a bad --console path is reported
    // before the guest is built.
    Fd console_file;
    if (!options.console.empty()) {
        console_file = Fd(::open(options.console.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
        if (!console_file) throw Error(fmt::format("console {}: {}", options.console, ::strerror(errno)));
    }
    LinuxVm vm(options, console_file ? console_file.get() : STDOUT_FILENO);
    Machine& machine = vm.machine();

    // Host console and signals, then run. Signals are blocked before any thread
    // starts, so that only the console thread sees them (through the signalfd).
    const Fd signals = block_termination_signals();
    const bool interactive = options.console.empty() && ::isatty(STDIN_FILENO);
    RawTerminal raw(interactive ? STDIN_FILENO : -1);
    std::atomic<int> stop_signal{0};
    HostConsole console(STDIN_FILENO, signals.get(), vm.com1(), raw.active(), [&](int sig) {
        int expected = 0;
        stop_signal.compare_exchange_strong(expected, sig == 0 ? SIGINT : sig);
        machine.request_stop(sig == 0 ? std::string("Ctrl-A x") : fmt::format("{}", ::strsignal(sig)));
    });
    const StopReason reason = vm.run();
    console.stop();
    raw.restore();
    if (!options.stats.empty()) write_stats(options.stats, vm.stats_json());
    return exit_status_for(reason, vm.outcome(reason), stop_signal.load());
}

}  // namespace

int run_boot(const BootOptions& options) {
    try {
        return boot(options);
    } catch (const std::exception& e) {
        log_line(e.what());
    } catch (...) {
        log_line("unknown error");
    }
    return exit_status::kError;
}

}  // namespace nanovm
