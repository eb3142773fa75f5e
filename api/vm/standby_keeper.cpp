// Standby VMMs for a VM's forks (see standby_keeper.hpp).
#include "api/vm/standby_keeper.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>

#include <fmt/format.h>

#include "api/vm/vmm_options.hpp"
#include "vmm/error.hpp"
#include "vmm/log.hpp"

extern char** environ;

namespace nanovm::vm {

namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr int kMaxFailuresInARow = 3;
/// A claimed standby is replaced this long after at the earliest: the fork's children start first.
constexpr auto kRefillDelay = 500ms;
/// ... and once its VM is ready (its status pipe closed), or this long after the claim.
constexpr auto kStartingCap = 10s;

}  // namespace

std::vector<std::string> standby_sockets(const std::string& vm_dir) {
    std::map<uint64_t, std::string> found;
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(vm_dir, ec)) {
        const std::string file = entry.path().filename().string();
        unsigned long long n = 0;
        char tail[8] = {};
        if (std::sscanf(file.c_str(), "standby-%llu.soc%7s", &n, tail) == 2 && std::string(tail) == "k")
            found[n] = entry.path().string();
    }
    std::vector<std::string> out;
    for (auto& [n, path] : found) out.push_back(std::move(path));
    return out;
}

StandbyKeeper::StandbyKeeper(std::string exe, std::string vm_dir, std::string log_path, uint32_t vcpus,
                             uint64_t ram_bytes, uint32_t count, std::string fork_base)
    : exe_(std::move(exe)),
      vm_dir_(std::move(vm_dir)),
      log_path_(std::move(log_path)),
      fork_base_(std::move(fork_base)),
      vcpus_(vcpus),
      ram_bytes_(ram_bytes),
      count_(std::min(count, kMaxForkStandby)),
      wake_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {}

StandbyKeeper::~StandbyKeeper() {
    if (!thread_.joinable()) return;
    stopping_ = true;
    const uint64_t one = 1;
    [[maybe_unused]] const ssize_t n = ::write(wake_.get(), &one, sizeof(one));
    thread_.join();
    // A standby claimed just now has said so on its pipe: never kill a child VM.
    for (Standby& s : standbys_) {
        if (s.claimed || !s.status) continue;
        ::fcntl(s.status.get(), F_SETFL, O_NONBLOCK);
        char buf[256];
        ssize_t got;
        while ((got = ::read(s.status.get(), buf, sizeof(buf))) > 0) s.buffer.append(buf, static_cast<size_t>(got));
        if (s.buffer.find("claimed\n") != std::string::npos) s.claimed = true;
    }
    for (Standby& s : standbys_)
        if (!s.claimed) ::kill(s.pid, SIGTERM);
    const auto deadline = Clock::now() + 2s;
    for (Standby& s : standbys_) {
        if (s.claimed) continue;
        int status = 0;
        while (::waitpid(s.pid, &status, WNOHANG) == 0) {
            if (Clock::now() >= deadline) {
                ::kill(s.pid, SIGKILL);
                ::waitpid(s.pid, &status, 0);
                break;
            }
            std::this_thread::sleep_for(5ms);
        }
    }
}

void StandbyKeeper::start() {
    if (count_ == 0 || !wake_) return;
    std::call_once(started_, [this] { thread_ = std::thread([this] { loop(); }); });
}

void StandbyKeeper::spawn() {
    const std::string socket = fmt::format("{}/standby-{}.sock", vm_dir_, next_++);
    int p[2];
    if (::pipe2(p, O_CLOEXEC) != 0) throw_errno("pipe2");
    Fd read_end(p[0]), write_end(p[1]);
    std::vector<std::string> args = {exe_,          "_standby",
                                     "--socket",    socket,
                                     "--status-fd", "3",
                                     "--parent-pid", std::to_string(::getpid()),
                                     "--cpus",      std::to_string(vcpus_),
                                     "--ram-bytes", std::to_string(ram_bytes_)};
    if (!fork_base_.empty()) {
        args.push_back("--fork-base");
        args.push_back(fork_base_);
    }
    std::vector<char*> argv;
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);

    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    // Its own session (no terminal's signals), no signal blocked (this VMM blocks the
    // termination signals in every thread), the usual dispositions.
    sigset_t none, defaults;
    sigemptyset(&none);
    sigemptyset(&defaults);
    for (const int sig : {SIGPIPE, SIGTERM, SIGINT, SIGHUP, SIGQUIT}) sigaddset(&defaults, sig);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &defaults);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log_path_.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
    posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
    posix_spawn_file_actions_adddup2(&actions, write_end.get(), 3);
    // Nothing else of this VMM's: run_vmm made its lock and readiness pipe close-on-exec,
    // and this keeps any other fd it may hold out of a process that may become
    // another VM's VMM and live long.
    posix_spawn_file_actions_addclosefrom_np(&actions, 4);
    pid_t pid = -1;
    const int rc = ::posix_spawn(&pid, exe_.c_str(), &actions, &attr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
    if (rc != 0) throw SysError("posix_spawn " + exe_ + " _standby", rc);
    Standby s;
    s.pid = pid;
    s.pidfd = Fd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
    if (!s.pidfd) {
        const int err = errno;
        ::kill(pid, SIGKILL);
        ::waitpid(pid, nullptr, 0);
        throw SysError("pidfd_open", err);
    }
    s.status = std::move(read_end);
    standbys_.push_back(std::move(s));
}

void StandbyKeeper::loop() {
    int failures = 0;
    bool gave_up = false;
    auto refill_at = Clock::now();
    while (!stopping_) {
        const auto unclaimed = std::count_if(standbys_.begin(), standbys_.end(), [](const Standby& s) { return !s.claimed; });
        const auto now = Clock::now();
        // A claimed standby whose VM is still starting holds the refill back (up to kStartingCap).
        auto wait_until = refill_at;
        for (const Standby& s : standbys_)
            if (s.claimed && s.status) wait_until = std::max(wait_until, s.claimed_at + kStartingCap);
        if (!gave_up && static_cast<uint32_t>(unclaimed) < count_ && now >= wait_until) {
            try {
                spawn();
            } catch (const std::exception& e) {
                log_line(fmt::format("fork standby: {}", e.what()));
                if (++failures >= kMaxFailuresInARow) gave_up = true;
                refill_at = now + 1s;
            }
            continue;
        }
        std::vector<pollfd> fds = {{wake_.get(), POLLIN, 0}};
        for (const Standby& s : standbys_) {
            fds.push_back({s.status ? s.status.get() : -1, POLLIN, 0});
            fds.push_back({s.pidfd.get(), POLLIN, 0});
        }
        int timeout = -1;
        if (!gave_up && static_cast<uint32_t>(unclaimed) < count_)
            timeout = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(wait_until - now).count()) + 1;
        if (::poll(fds.data(), fds.size(), timeout) < 0 && errno != EINTR) {
            log_line(fmt::format("fork standby: poll: {}", std::strerror(errno)));
            return;
        }
        for (size_t k = 0; k < standbys_.size(); ++k) {
            Standby& s = standbys_[k];
            if (s.status && fds[1 + 2 * k].revents) {
                char buf[256];
                const ssize_t got = ::read(s.status.get(), buf, sizeof(buf));
                if (got > 0) s.buffer.append(buf, static_cast<size_t>(got));
                if (!s.ready && s.buffer.find("ready\n") != std::string::npos) {
                    s.ready = true;
                    failures = 0;
                }
                if (s.claimed) {
                    // Its VM is ready (or gave up) when the pipe closes.
                    if (got == 0 || (got < 0 && errno != EINTR && errno != EAGAIN)) s.status.reset();
                } else if (s.buffer.find("claimed\n") != std::string::npos) {
                    s.claimed = true;
                    s.claimed_at = Clock::now();
                    refill_at = s.claimed_at + kRefillDelay;
                    if (got == 0) s.status.reset();  // an older standby closes it at once
                } else if (got == 0 || (got < 0 && errno != EINTR && errno != EAGAIN)) {
                    s.status.reset();  // it exited unclaimed (or is about to): its reason is in vmm.log
                    refill_at = Clock::now() + 1s;  // not in a tight loop if something keeps killing them
                    log_line(fmt::format("fork standby pid {} ended before any fork claimed it{}", s.pid,
                                         s.ready ? "" : " (it never became ready)"));
                    if (!s.ready && ++failures >= kMaxFailuresInARow) {
                        gave_up = true;
                        log_line(fmt::format("fork standbys failed {} times in a row: this VM's forks start cold",
                                             failures));
                    }
                }
            }
        }
        // Reap whoever exited; an unclaimed one is replaced by the loop's next turn.
        for (size_t k = standbys_.size(); k-- > 0;) {
            if (!(fds[2 + 2 * k].revents & POLLIN)) continue;
            if (::waitpid(standbys_[k].pid, nullptr, WNOHANG) == standbys_[k].pid)
                standbys_.erase(standbys_.begin() + static_cast<std::ptrdiff_t>(k));
        }
    }
}

}  // namespace nanovm::vm
