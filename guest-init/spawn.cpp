// Starting programs on the guest console (see spawn.hpp).
#include "guest-init/spawn.hpp"

#include <fcntl.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <string_view>

#include "guest-init/console.hpp"
#include "guest-init/read_file.hpp"
#include "guest-init/ready_line.hpp"
#include "guest-init/signals.hpp"

namespace nanovm::guest_init {
namespace {

constexpr const char* kPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

// Only async-signal-safe calls from here on: this runs between fork and exec.
[[noreturn]] void child_fail(const std::string& message) {
    (void)!::write(STDERR_FILENO, message.data(), message.size());
    ::_exit(127);
}

}  // namespace

std::string console_tty_path() {
    if (auto active = read_small_file("/sys/class/tty/console/active")) {
        std::string_view s = *active;
        while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.remove_suffix(1);
        const size_t space = s.find_last_of(' ');
        const std::string_view last = space == std::string_view::npos ? s : s.substr(space + 1);
        if (!last.empty()) {
            std::string path = "/dev/" + std::string(last);
            if (::access(path.c_str(), R_OK | W_OK) == 0) return path;
        }
    }
    if (::access("/dev/ttyS0", R_OK | W_OK) == 0) return "/dev/ttyS0";
    return "/dev/console";
}

std::vector<std::string> child_environment() {
    const char* term = std::getenv("TERM");
    return {
        "HOME=/root",
        kPath,
        std::string("TERM=") + (term != nullptr && *term != '\0' ? term : "linux"),
        "SHELL=/bin/sh",
        "USER=root",
        "LOGNAME=root",
    };
}

pid_t spawn_on_console(const std::vector<std::string>& argv, const std::string& tty,
                       bool controlling_terminal) {
    if (argv.empty()) {
        log_error("spawn: empty argv");
        return -1;
    }
    // Everything the child needs is prepared before fork().
    const std::vector<std::string> env = child_environment();
    std::vector<char*> argv_ptrs;
    for (const std::string& a : argv) argv_ptrs.push_back(const_cast<char*>(a.c_str()));
    argv_ptrs.push_back(nullptr);
    std::vector<char*> env_ptrs;
    for (const std::string& e : env) env_ptrs.push_back(const_cast<char*>(e.c_str()));
    env_ptrs.push_back(nullptr);
    const std::string open_failed = std::string(kErrorPrefix) + "open " + tty + " failed\n";
    const std::string exec_failed = std::string(kErrorPrefix) + "exec " + argv[0] + " failed\n";

    const pid_t pid = ::fork();
    if (pid < 0) {
        log_errno("fork", errno);
        return -1;
    }
    if (pid > 0) return pid;

    // Child.
    unblock_signals_in_child();
    ::setsid();
    const int fd = ::open(tty.c_str(), O_RDWR | O_NOCTTY);
    if (fd < 0) child_fail(open_failed);
    // Take the tty as controlling terminal (steal it from an earlier session if need
    // be); fails harmlessly on /dev/console, leaving the shell without job control.
    if (controlling_terminal) ::ioctl(fd, TIOCSCTTY, 1);
    for (int std_fd = 0; std_fd <= 2; ++std_fd) ::dup2(fd, std_fd);
    if (fd > 2) ::close(fd);
    if (::chdir("/") != 0) child_fail(exec_failed);
    ::execve(argv_ptrs[0], argv_ptrs.data(), env_ptrs.data());
    child_fail(exec_failed);
}

}  // namespace nanovm::guest_init
