// The guest console: PID 1's standard fds and line output (no stdio, no iostream).
#include "guest-init/console.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "guest-init/ready_line.hpp"

namespace nanovm::guest_init {

bool ensure_console_fds() {
    bool missing = false;
    for (int fd = 0; fd <= 2; ++fd) {
        if (::fcntl(fd, F_GETFD) < 0) missing = true;
    }
    if (!missing) return true;
    // No O_CLOEXEC: the lowest free fd is taken, which may itself be 0, 1 or 2 and
    // must stay open across exec for the children.
    int console = ::open("/dev/console", O_RDWR | O_NOCTTY);
    if (console < 0) return false;
    for (int fd = 0; fd <= 2; ++fd) {
        if (::fcntl(fd, F_GETFD) < 0) ::dup2(console, fd);
    }
    if (console > 2) ::close(console);
    return true;
}

void write_line(std::string_view line) {
    std::string buf;
    buf.reserve(line.size() + 1);
    buf.append(line);
    buf.push_back('\n');
    const char* p = buf.data();
    size_t left = buf.size();
    while (left > 0) {
        ssize_t n = ::write(STDOUT_FILENO, p, left);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return;  // nowhere to report it
        p += n;
        left -= static_cast<size_t>(n);
    }
}

void log_info(std::string_view message) {
    std::string line(kLinePrefix);
    line.append(message);
    write_line(line);
}

void log_error(std::string_view what) {
    std::string line(kErrorPrefix);
    line.append(what);
    write_line(line);
}

void log_errno(std::string_view what, int err) {
    std::string line(what);
    line += ": ";
    line += std::strerror(err);
    log_error(line);
}

}  // namespace nanovm::guest_init
