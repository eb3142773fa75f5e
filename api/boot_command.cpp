#include "api/boot_command.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <fstream>
#include <iterator>

#include <fmt/format.h>

#include "api/exit_status.hpp"
#include "api/host_console.hpp"
#include "api/paths.hpp"
#include "api/vm_devices.hpp"
#include "devices/bus.hpp"
#include "devices/irq_line.hpp"
#include "devices/legacy/legacy_devices.hpp"
#include "vmm/error.hpp"
#include "vmm/fd.hpp"
#include "vmm/kvm.hpp"
#include "vmm/kvm_flavour.hpp"
#include "vmm/linux_boot.hpp"
#include "vmm/log.hpp"
#include "vmm/machine.hpp"

namespace nanovm {

namespace {

// Reads a whole file. Throws Error("<what> <path>: <reason>"), with `hint` appended
// when the file does not exist.
std::vector<uint8_t> read_file(const std::string& path, std::string_view what, std::string_view hint) {
    Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd) {
        const int err = errno;
        std::string message = fmt::format("{} {}: {}", what, path, ::strerror(err));
        if (err == ENOENT && !hint.empty()) message = fmt::format("{} ({})", message, hint);
        throw Error(message);
    }
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) throw Error(fmt::format("{} {}: {}", what, path, ::strerror(errno)));
    if (!S_ISREG(st.st_mode)) throw Error(fmt::format("{} {}: not a regular file", what, path));
    if (st.st_size == 0) throw Error(fmt::format("{} {}: empty file", what, path));
    std::vector<uint8_t> bytes(static_cast<size_t>(st.st_size));
    size_t done = 0;
    while (done < bytes.size()) {
        const ssize_t n = ::read(fd.get(), bytes.data() + done, bytes.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) throw Error(fmt::format("{} {}: {}", what, path, ::strerror(errno)));
        if (n == 0) throw Error(fmt::format("{} {}: file shrank while being read", what, path));
        done += static_cast<size_t>(n);
    }
    return bytes;
}

// Writes all of `bytes` to `fd`, waiting when it is non-blocking and full. Reports
// the first failure once (e.g. EPIPE) and drops output after it.
class ConsoleWriter {
public:
    explicit ConsoleWriter(int fd) : fd_(fd) {}
    void operator()(std::span<const uint8_t> bytes) {
        if (failed_) return;
        size_t done = 0;
        while (done < bytes.size()) {
            const ssize_t n = ::write(fd_, bytes.data() + done, bytes.size() - done);
            if (n >= 0) {
                done += static_cast<size_t>(n);
            } else if (errno == EINTR) {
                continue;
            } else if (errno == EAGAIN) {
                pollfd p{fd_, POLLOUT, 0};
                ::poll(&p, 1, 100);
            } else {
                failed_ = true;
                log_line(fmt::format("console output failed: {}; dropping further guest output", ::strerror(errno)));
                return;
            }
        }
    }

private:
    int fd_;
    bool failed_ = false;  // only touched with the UART's lock held
};

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
    if (options.cpus < kMinCpus || options.cpus > kMaxCpus)
        throw Error(fmt::format("--cpus {}: must be {} to {}", options.cpus, kMinCpus, kMaxCpus));
    if (options.memory_mib < kMinMemoryMib || options.memory_mib > kMaxMemoryMib)
        throw Error(fmt::format("--memory {}: must be {} to {} MiB", options.memory_mib, kMinMemoryMib, kMaxMemoryMib));

    // 1. The guest images, checked and placed in guest memory before KVM is touched.
    const bool default_kernel = options.kernel.empty();
    const bool default_initrd = options.initrd.empty();
    const std::string kernel_path = default_kernel ? default_kernel_path() : options.kernel;
    const std::string initrd_path = default_initrd ? default_initrd_path() : options.initrd;
    const std::string kernel_hint =
        default_kernel ? fmt::format("guest kernel not built: run {}", kBuildKernelCommand) : "";
    const std::string initrd_hint =
        default_initrd ? fmt::format("guest initramfs not built: run {}", kBuildInitrdCommand) : "";
    const std::string cmdline = boot_cmdline(options);
    GuestMemory memory = GuestMemory::create(uint64_t{options.memory_mib} * MiB);
    // The file images are only needed until they are copied into guest RAM: freeing
    // them here keeps ~6 MiB (kernel + initramfs) out of the VMM's resident set.
    const LinuxLayout layout = [&] {
        const std::vector<uint8_t> kernel = read_file(kernel_path, "kernel", kernel_hint);
        // A root disk boots without an initramfs unless one is asked for.
        const std::vector<uint8_t> initrd = options.root_disk && default_initrd
                                                ? std::vector<uint8_t>{}
                                                : read_file(initrd_path, "initrd", initrd_hint);
        return load_linux(memory, {kernel, kernel_path}, {initrd, initrd_path}, cmdline, options.cpus);
    }();

    check_disk_paths(options);

    // 2. Where the console goes.
    Fd console_file;
    if (!options.console.empty()) {
        console_file = Fd(::open(options.console.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
        if (!console_file) throw Error(fmt::format("console {}: {}", options.console, ::strerror(errno)));
    }
    const int console_fd = console_file ? console_file.get() : STDOUT_FILENO;

    // 3. KVM, and whether it can run a stock kernel at all.
    const KvmHostInfo host = detect_kvm_host();
    if (!host.dev_kvm_exists)
        throw Error(
            "/dev/kvm does not exist: this machine has no KVM (it needs kvm_intel or kvm_amd); "
            "run nanovm inside the test host instead: tools/testhost/run -- build/nanovm boot ...");
    if (host.flavour == KvmFlavour::pvm) throw Error(std::string(kPvmBootRefusal));
    const Kvm kvm = Kvm::open();
    Machine machine(kvm, std::move(memory), MachineConfig{options.cpus, true, false});
    setup_linux_vcpus(machine, kvm, layout);

    // 4. Devices.
    IoBus pio;
    MmioBus mmio;
    VmDevices virtio_devices(options, machine, mmio);
    KvmIrqLine com1_irq(machine.vm(), Serial::kCom1Irq);
    LegacyDevices legacy(pio, com1_irq, ConsoleWriter(console_fd), [&machine] {
        machine.request_stop(StopReason{StopReason::Kind::reset, {}, "i8042 reset"});
    });

    // 5. Host console and signals, then run. Signals are blocked before any thread
    // starts, so that only the console thread sees them (through the signalfd).
    const Fd signals = block_termination_signals();
    const bool interactive = options.console.empty() && ::isatty(STDIN_FILENO);
    RawTerminal raw(interactive ? STDIN_FILENO : -1);
    std::atomic<int> stop_signal{0};
    HostConsole console(STDIN_FILENO, signals.get(), legacy.com1(), raw.active(), [&](int sig) {
        int expected = 0;
        stop_signal.compare_exchange_strong(expected, sig == 0 ? SIGINT : sig);
        machine.request_stop(sig == 0 ? std::string("Ctrl-A x") : fmt::format("{}", ::strsignal(sig)));
    });
    const StopReason reason = machine.run(pio, mmio);
    console.stop();
    raw.restore();
    if (!options.stats.empty()) write_stats(options.stats, virtio_devices.stats_json());
    return exit_status_for(reason, guest_outcome(reason, legacy.control_port().announcement()), stop_signal.load());
}

}  // namespace

std::string boot_cmdline(const BootOptions& options) {
    std::string cmdline = options.cmdline ? *options.cmdline : kDefaultCmdline;
    const auto add = [&cmdline](std::string_view part) {
        if (part.empty()) return;
        if (!cmdline.empty()) cmdline += ' ';
        cmdline += part;
    };
    if (options.root_disk && !options.disks.empty())
        add(fmt::format("root=/dev/vda rootfstype=ext4 {} init={}", options.disks.front().read_only ? "ro" : "rw",
                        kRootInit));
    add(virtio_cmdline(options));
    if (options.until_ready) add(kUntilReadyParam);
    for (const std::string& part : options.append) add(part);
    return cmdline;
}

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
