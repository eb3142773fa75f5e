// Starting commands (see spawn_process.hpp).
#include "guest-init/agent/spawn_process.hpp"

#include <fcntl.h>
#include <grp.h>
#include <linux/close_range.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

#include "guest-init/agent/context.hpp"
#include "guest-init/signals.hpp"

namespace nanovm::agent {
namespace {

// The steps of the child between fork and exec, for the failure message.
enum class Step : uint8_t { kSetsid, kDevNull, kDup, kSetgroups, kSetgid, kSetuid, kChdir, kExec };

struct ChildReport {
    int32_t err;
    Step step;
};

// Async-signal-safe: runs between fork and exec.
[[noreturn]] void child_fail(int report_fd, Step step) {
    ChildReport r{errno, step};
    (void)!::write(report_fd, &r, sizeof r);
    ::_exit(127);
}

std::string step_message(Step step, const SpawnSpec& spec) {
    switch (step) {
        case Step::kSetsid: return "setsid";
        case Step::kDevNull: return "open /dev/null";
        case Step::kDup: return "dup2";
        case Step::kSetgroups: return "setgroups";
        case Step::kSetgid: return "setgid " + std::to_string(spec.gid.value_or(0));
        case Step::kSetuid: return "setuid " + std::to_string(spec.uid.value_or(0));
        case Step::kChdir: return "chdir " + (spec.cwd.empty() ? std::string("/") : spec.cwd);
        case Step::kExec: return "exec " + spec.path;
    }
    return "spawn";
}

bool make_pipe(Fd& read_end, Fd& write_end) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) return false;
    read_end.reset(fds[0]);
    write_end.reset(fds[1]);
    return true;
}

bool set_nonblocking(int fd) {
    const int flags = ::fcntl(fd, F_GETFL);
    return flags >= 0 && ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0;
}

// In the child: moves `fd` to a number above the stdio range first, so that putting
// the sources onto 0..3 never overwrites a source that happens to sit there.
int high_copy(int fd) { return fd < 0 ? -1 : ::fcntl(fd, F_DUPFD_CLOEXEC, 10); }

}  // namespace

bool spawn_process(const SpawnSpec& spec, SpawnedProcess& out, Failure& failure) {
    Fd stdin_r, stdin_w, stdout_r, stdout_w, stderr_r, stderr_w, status_r, status_w, report_r, report_w;
    if ((spec.stdin_pipe && !make_pipe(stdin_r, stdin_w)) || !make_pipe(stdout_r, stdout_w) ||
        !make_pipe(stderr_r, stderr_w) || (spec.status_pipe && !make_pipe(status_r, status_w)) ||
        !make_pipe(report_r, report_w)) {
        failure = errno_failure("pipe2");
        return false;
    }
    // Larger output pipes: fewer wake-ups per byte for chatty commands. Best effort
    // (the kernel may refuse beyond its per-user pipe budget; 64 KiB then).
    ::fcntl(stdout_r.get(), F_SETPIPE_SZ, static_cast<int>(kOutputPipeSize));
    ::fcntl(stderr_r.get(), F_SETPIPE_SZ, static_cast<int>(kOutputPipeSize));

    // Everything the child needs is built before fork(): after it, only
    // async-signal-safe calls.
    std::vector<char*> argv;
    for (const std::string& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    std::vector<char*> envp;
    for (const std::string& e : spec.env) envp.push_back(const_cast<char*>(e.c_str()));
    envp.push_back(nullptr);
    const char* cwd = spec.cwd.empty() ? "/" : spec.cwd.c_str();
    const uid_t uid = spec.uid.value_or(0);
    const gid_t gid = spec.gid.value_or(0);

    const pid_t pid = ::fork();
    if (pid < 0) {
        failure = errno_failure("fork");
        return false;
    }
    if (pid == 0) {
        const int report = report_w.get();
        ::signal(SIGPIPE, SIG_DFL);  // the agent ignores it; exec keeps ignored signals
        guest_init::unblock_signals_in_child();
        if (::setsid() < 0) child_fail(report, Step::kSetsid);
        int in = spec.stdin_pipe ? stdin_r.get() : ::open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (in < 0) child_fail(report, Step::kDevNull);
        const int sources[4] = {high_copy(in), high_copy(stdout_w.get()), high_copy(stderr_w.get()),
                                high_copy(status_w.get())};
        for (int target = 0; target < 4; ++target) {
            if (target == 3 && !spec.status_pipe) break;
            if (sources[target] < 0 || ::dup2(sources[target], target) < 0) child_fail(report, Step::kDup);
        }
        // Whatever else the agent inherited without close-on-exec stays out of commands.
        ::syscall(SYS_close_range, spec.status_pipe ? 4u : 3u, ~0u, CLOSE_RANGE_CLOEXEC);
        // Either switch drops the supplementary groups: a uid alone must not keep
        // the agent's (root's) groups.
        if ((spec.uid || spec.gid) && ::setgroups(0, nullptr) != 0) child_fail(report, Step::kSetgroups);
        if (spec.gid && ::setgid(gid) != 0) child_fail(report, Step::kSetgid);
        if (spec.uid && ::setuid(uid) != 0) child_fail(report, Step::kSetuid);
        if (::chdir(cwd) != 0) child_fail(report, Step::kChdir);
        ::execve(spec.path.c_str(), argv.data(), envp.data());
        child_fail(report, Step::kExec);
    }

    report_w.reset();
    stdin_r.reset();
    stdout_w.reset();
    stderr_w.reset();
    status_w.reset();
    ChildReport report{};
    ssize_t n;
    do {
        n = ::read(report_r.get(), &report, sizeof report);
    } while (n < 0 && errno == EINTR);
    if (n == static_cast<ssize_t>(sizeof report)) {
        int status;
        while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
        }
        failure = Failure{report.err, step_message(report.step, spec)};
        return false;
    }
    // n == 0: the exec happened (the pipe closed on exec).
    for (Fd* fd : {&stdin_w, &stdout_r, &stderr_r, &status_r}) {
        if (fd->valid()) set_nonblocking(fd->get());
    }
    out.pid = pid;
    out.stdin_w = std::move(stdin_w);
    out.stdout_r = std::move(stdout_r);
    out.stderr_r = std::move(stderr_r);
    out.status_r = std::move(status_r);
    return true;
}

std::optional<std::string> find_program(const std::string& name, const std::string& path_var,
                                        Failure& failure) {
    if (name.find('/') != std::string::npos) return name;
    bool found_unexecutable = false;
    size_t start = 0;
    while (start <= path_var.size()) {
        size_t end = path_var.find(':', start);
        if (end == std::string::npos) end = path_var.size();
        if (end > start) {
            std::string candidate = path_var.substr(start, end - start) + "/" + name;
            struct stat st;
            if (::stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
                if (::access(candidate.c_str(), X_OK) == 0) return candidate;
                found_unexecutable = true;
            }
        }
        start = end + 1;
    }
    failure = Failure{found_unexecutable ? EACCES : ENOENT, "exec " + name};
    return std::nullopt;
}

std::vector<std::string> merge_environment(const std::vector<std::string>& base,
                                           const std::vector<std::string>& overrides, bool clear) {
    std::vector<std::string> env;
    if (!clear) env = base;
    for (const std::string& entry : overrides) {
        const size_t eq = entry.find('=');
        bool replaced = false;
        for (std::string& existing : env) {
            if (existing.compare(0, eq + 1, entry, 0, eq + 1) == 0) {
                existing = entry;
                replaced = true;
                break;
            }
        }
        if (!replaced) env.push_back(entry);
    }
    return env;
}

std::string environment_value(const std::vector<std::string>& env, const std::string& key,
                              const std::string& fallback) {
    for (const std::string& entry : env) {
        if (entry.size() > key.size() && entry.compare(0, key.size(), key) == 0 && entry[key.size()] == '=')
            return entry.substr(key.size() + 1);
    }
    return fallback;
}

}  // namespace nanovm::agent
