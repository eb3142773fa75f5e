// Starting a sandbox's VMM process (see launcher.hpp).
#include "api/vm/launcher.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>
#include <thread>

#include <fmt/format.h>

#include "api/vm/boot_options.hpp"
#include "api/vm/boot_record.hpp"
#include "api/vm/device_options.hpp"
#include "api/vm/paths.hpp"
#include "api/vm/standby_handoff.hpp"
#include "snapshot/manifest.hpp"
#include "vmm/error.hpp"
#include "vmm/printable.hpp"
#include "vmm/fd.hpp"
#include "vmm/kvm_flavour.hpp"

namespace nanovm::vm {

namespace {

using Clock = std::chrono::steady_clock;

// Throws Error("<what> <path>: <reason> (<hint>)") unless `path` is a regular file.
void require_file(const std::string& path, const std::string& what, const std::string& hint) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
        const int err = errno;
        throw Error(fmt::format("{} {}: {}{}", what, path, std::strerror(err),
                                err == ENOENT && !hint.empty() ? " (" + hint + ")" : ""));
    }
    if (!S_ISREG(st.st_mode) && !S_ISBLK(st.st_mode))
        throw Error(fmt::format("{} {}: not a regular file or block device", what, path));
}

void check_spec(const SandboxSpec& spec, const std::string& image) {
    if (spec.cpus < kMinCpus || spec.cpus > kMaxCpus)
        throw Error(fmt::format("--cpus {}: must be {} to {}", spec.cpus, kMinCpus, kMaxCpus));
    if (spec.memory_mib < kMinMemoryMib || spec.memory_mib > kMaxMemoryMib)
        throw Error(fmt::format("--memory {}: must be {} to {} MiB", spec.memory_mib, kMinMemoryMib, kMaxMemoryMib));
    require_file(default_kernel_path(), "guest kernel",
                 fmt::format("not built: run {}", kBuildKernelCommand));
    require_file(image, spec.image.empty() ? "default root disk" : "--image",
                 spec.image.empty() ? "not built: run tools/rootfs/build" : "");
    for (const std::string& s : spec.disks) require_file(parse_disk_option(s).path, "--disk", "");
    require_linux_capable_kvm(detect_kvm_host());
}

// `exe _vmm ...`: the command line that runs a VMM with `o` (vm_command.cpp's _vmm
// options), its lock and readiness pipe at `lock_fd` and `ready_fd`.
std::vector<std::string> vmm_arguments(const std::string& exe, const VmmOptions& o, int lock_fd, int ready_fd) {
    std::vector<std::string> args = {exe,         "_vmm",
                                     "--id",      o.id,
                                     "--run-dir", o.run_dir,
                                     "--lock-fd", std::to_string(lock_fd),
                                     "--ready-fd", std::to_string(ready_fd),
                                     "--cpus",    std::to_string(o.cpus),
                                     "--memory",  std::to_string(o.memory_mib),
                                     "--image",   o.image,
                                     "--boot-timeout-ms", std::to_string(o.boot_timeout.count()),
                                     "--fork-standby", std::to_string(o.fork_standby)};
    if (!o.restore_dir.empty()) {
        for (const std::string& a : {std::string("--restore"), o.restore_dir, std::string("--memory-backend"),
                                     o.memory_backend})
            args.push_back(a);
        if (!o.fork_memory.empty()) {
            args.push_back("--fork-memory");
            args.push_back(o.fork_memory);
        }
        if (!o.fork_delta.empty()) {
            args.push_back("--fork-delta");
            args.push_back(o.fork_delta);
        }
    }
    if (!o.hostname.empty()) {
        args.push_back("--hostname");
        args.push_back(o.hostname);
    }
    for (const std::string& d : o.disks) {
        args.push_back("--disk");
        args.push_back(d);
    }
    if (o.keep_dir) args.push_back("--keep-dir");
    if (o.reboot) args.push_back("--reboot");
    return args;
}

// The child side of fork(): never returns.
[[noreturn]] void exec_vmm(const std::string& exe, const std::vector<std::string>& args, const VmPaths& paths,
                           int lock_fd, int ready_fd, bool attached, pid_t parent) {
    ::setsid();
    if (attached) {
        ::prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (::getppid() != parent) ::_exit(1);  // the parent died before prctl
    }
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::signal(SIGPIPE, SIG_DFL);
    const int null_fd = ::open("/dev/null", O_RDONLY);
    const int log_fd = ::open(paths.vmm_log().c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
    if (null_fd >= 0) ::dup2(null_fd, STDIN_FILENO);
    if (log_fd >= 0) {
        ::dup2(log_fd, STDOUT_FILENO);
        ::dup2(log_fd, STDERR_FILENO);
    }
    ::fcntl(lock_fd, F_SETFD, 0);
    ::fcntl(ready_fd, F_SETFD, 0);
    std::vector<char*> argv;
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(exe.c_str(), argv.data());
    const std::string message = fmt::format("error exec {}: {}\n", exe, std::strerror(errno));
    [[maybe_unused]] const ssize_t n = ::write(ready_fd, message.data(), message.size());
    ::_exit(127);
}

// Waits up to 10 s for the VMM to end: reaps it if it is this process's child,
// else (a standby) waits until it lets go of the VM's lock.
void wait_ended(const StartedVm& vm) {
    if (vm.from_standby) {
        if (!wait_vmm_gone(vm.paths, std::chrono::seconds(10))) ::kill(vm.pid, SIGKILL);
        return;
    }
    reap_vmm(vm.pid, std::chrono::seconds(10));
}

// Why the VMM did not become ready: its error line, else the end of its log.
[[noreturn]] void fail_start(const StartedVm& vm, bool keep_dir, std::string error,
                             std::vector<std::string> console) {
    const std::vector<std::string> vmm_log = file_tail(vm.paths.vmm_log(), 5);
    wait_ended(vm);
    if (!keep_dir) remove_if_dead(vm.paths);
    // The console is the guest's text, and the VMM's lines may quote it (printable
    // is idempotent: lines the VMM already made printable stay as they are).
    for (std::string& line : console) line = printable(line);
    if (error.empty()) {
        error = "the VMM process exited without starting the VM";
        if (!vmm_log.empty()) error += ": " + vmm_log.back();
    }
    throw StartError(printable(error), vm.paths, std::move(console));
}

RunDir spec_run_dir(const SandboxSpec& spec) {
    return spec.run_dir.empty() ? default_run_dir()
                                : RunDir{std::filesystem::absolute(spec.run_dir).lexically_normal().string()};
}

// Starts the VMM for `child` in `dir` (locked; the VMM takes the lock over) and waits
// for its readiness line.
StartedVm launch(NewVmDir dir, const VmmOptions& child, const SandboxSpec& spec, bool attached, int signal_fd);

}  // namespace

std::string default_root_image() { return cache_dir() + "/rootfs/default/disk.ext4"; }

StartedVm start_vm(const SandboxSpec& spec, bool attached, int signal_fd) {
    const bool restore = !spec.restore_dir.empty();
    const std::string image = restore ? "" : spec.image.empty() ? default_root_image() : spec.image;
    if (restore) {
        if (spec.memory_backend != "file" && spec.memory_backend != "uffd")
            throw Error(fmt::format("--memory-backend {}: must be file or uffd", spec.memory_backend));
        if (!snapshot::is_durable(spec.restore_dir))
            throw Error(fmt::format("{}: not a complete snapshot (no valid manifest)", spec.restore_dir));
        require_linux_capable_kvm(detect_kvm_host());
    } else {
        check_spec(spec, image);
    }
    const RunDir run = spec_run_dir(spec);
    NewVmDir dir = create_vm_dir(run);
    // What the VMM runs with: handed to a standby as it is, or as `_vmm` arguments.
    VmmOptions child;
    child.id = dir.paths.id;
    child.run_dir = run.root;
    child.keep_dir = spec.keep_dir;
    child.cpus = spec.cpus;
    child.memory_mib = spec.memory_mib;
    child.image = image;
    child.disks = spec.disks;
    child.boot_timeout = spec.boot_timeout;
    child.hostname = spec.hostname;
    if (restore) {
        child.restore_dir = std::filesystem::absolute(spec.restore_dir).string();
        child.memory_backend = spec.memory_backend;
        child.fork_memory = spec.fork_memory;
        child.fork_delta = spec.fork_delta;
    }
    child.fork_standby = spec.fork_standby;
    return launch(std::move(dir), child, spec, attached, signal_fd);
}

StartedVm reboot_vm(const VmPaths& paths, const SandboxSpec& spec, bool attached, int signal_fd) {
    const BootRecord record = kept_disks(paths);  // a VM without boot.json, or disks that do not fit, stop here
    require_linux_capable_kvm(detect_kvm_host());
    NewVmDir dir = lock_vm_dir(paths);
    VmmOptions child;
    child.id = paths.id;
    child.run_dir = std::filesystem::path(paths.dir).parent_path().parent_path().string();
    child.keep_dir = true;  // its disks are the point: never removed here
    child.cpus = record.cpus;
    child.memory_mib = record.memory_mib;
    child.image = record.image;
    child.disks = record.user_disks;
    child.boot_timeout = spec.boot_timeout;
    child.reboot = true;
    child.fork_standby = spec.fork_standby;
    SandboxSpec kept = spec;
    kept.keep_dir = true;
    kept.restore_dir.clear();
    kept.standby_sockets.clear();
    return launch(std::move(dir), child, kept, attached, signal_fd);
}

namespace {

StartedVm launch(NewVmDir dir, const VmmOptions& child, const SandboxSpec& spec, bool attached, int signal_fd) {
    const bool restore = !child.restore_dir.empty();
    const std::string exe = self_executable();
    int pipe_fds[2];
    if (::pipe2(pipe_fds, O_CLOEXEC) != 0) {
        if (!child.reboot) remove_vm_dir(dir.paths);
        throw_errno("pipe2");
    }
    Fd ready_read(pipe_fds[0]), ready_write(pipe_fds[1]);
    // A fork child goes to one of the parent's standbys if one takes it; a restore to
    // one of the standbys it was given (a standby refuses a snapshot of another shape).
    std::optional<pid_t> standby;
    if (restore && !attached) {
        for (const std::string& socket : spec.standby_sockets) {
            std::string why;
            standby = hand_to_standby(socket, child, dir.lock.get(), ready_write.get(), std::chrono::seconds(2), why);
            if (standby) break;
        }
    }
    pid_t pid = standby.value_or(-1);
    if (!standby) {
        // Built before fork(): the child may only exec (this process may have threads).
        const std::vector<std::string> args = vmm_arguments(exe, child, dir.lock.get(), ready_write.get());
        const pid_t parent = ::getpid();
        pid = ::fork();
        if (pid < 0) {
            const int err = errno;
            if (!child.reboot) remove_vm_dir(dir.paths);
            throw SysError("fork", err);
        }
        if (pid == 0) exec_vmm(exe, args, dir.paths, dir.lock.get(), ready_write.get(), attached, parent);
    }
    // The VMM holds the lock now (same open file description): ours can go.
    dir.lock.reset();
    ready_write.reset();
    const StartedVm vm{dir.paths, pid, standby.has_value()};

    // Wait for "ready", or "error ..." (+ "console ..." lines), or EOF.
    const auto deadline = Clock::now() + spec.boot_timeout + std::chrono::seconds(30);
    std::string buffer, error;
    std::vector<std::string> console;
    for (;;) {
        size_t newline;
        while ((newline = buffer.find('\n')) != std::string::npos) {
            const std::string line = buffer.substr(0, newline);
            buffer.erase(0, newline + 1);
            if (line == "ready") return vm;
            if (line.rfind("error ", 0) == 0) error = line.substr(6);
            if (line.rfind("console ", 0) == 0) console.push_back(line.substr(8));
        }
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
        if (left <= 0) {
            ::kill(pid, SIGTERM);
            fail_start(vm, spec.keep_dir,
                       fmt::format("the VM did not start within {} s", (spec.boot_timeout.count() + 30000) / 1000),
                       file_tail(vm.paths.console_log(), 25));
        }
        pollfd fds[2] = {{ready_read.get(), POLLIN, 0}, {signal_fd, POLLIN, 0}};
        const int n = ::poll(fds, signal_fd >= 0 ? 2 : 1, static_cast<int>(left));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) throw_errno("poll");
        if (signal_fd >= 0 && (fds[1].revents & POLLIN)) {
            signalfd_siginfo info{};
            if (::read(signal_fd, &info, sizeof(info)) == static_cast<ssize_t>(sizeof(info))) {
                ::kill(pid, SIGTERM);
                wait_ended(vm);
                if (!spec.keep_dir) remove_if_dead(vm.paths);
                throw Interrupted{static_cast<int>(info.ssi_signo)};
            }
        }
        if (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) {
            char buf[4096];
            const ssize_t got = ::read(ready_read.get(), buf, sizeof(buf));
            if (got < 0 && errno == EINTR) continue;
            if (got <= 0) fail_start(vm, spec.keep_dir, error, std::move(console));
            buffer.append(buf, static_cast<size_t>(got));
            if (buffer.size() > (1u << 20))
                fail_start(vm, spec.keep_dir, "the VMM's readiness messages are too long", std::move(console));
        }
    }
}

}  // namespace

int reap_vmm(pid_t pid, std::chrono::milliseconds timeout) {
    const auto deadline = Clock::now() + timeout;
    int status = 0;
    for (;;) {
        const pid_t r = ::waitpid(pid, &status, WNOHANG);
        if (r == pid) return status;
        if (r < 0 && errno != EINTR) return 0;  // not our child (or already reaped)
        if (Clock::now() >= deadline) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    ::kill(pid, SIGKILL);
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    return status;
}

bool wait_vmm_gone(const VmPaths& paths, std::chrono::milliseconds timeout) {
    const auto deadline = Clock::now() + timeout;
    while (vmm_alive(paths)) {
        if (Clock::now() >= deadline) return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return true;
}

}  // namespace nanovm::vm
