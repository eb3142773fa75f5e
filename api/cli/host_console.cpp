#include "api/cli/host_console.hpp"

#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>

#include "vmm/error.hpp"

namespace nanovm {

RawTerminal::RawTerminal(int fd) : fd_(fd) {
    if (!::isatty(fd) || ::tcgetattr(fd, &saved_) != 0) return;
    termios raw = saved_;
    ::cfmakeraw(&raw);
    if (::tcsetattr(fd, TCSANOW, &raw) == 0) active_ = true;
}

RawTerminal::~RawTerminal() { restore(); }

void RawTerminal::restore() noexcept {
    if (!active_) return;
    ::tcsetattr(fd_, TCSANOW, &saved_);
    active_ = false;
}

bool ConsoleEscape::filter(const uint8_t* in, size_t len, std::vector<uint8_t>& out) {
    for (size_t i = 0; i < len; ++i) {
        const uint8_t byte = in[i];
        if (armed_) {
            armed_ = false;
            if (byte == 'x' || byte == 'X') return true;
            if (byte != kEscape) out.push_back(kEscape);
            out.push_back(byte);
        } else if (byte == kEscape) {
            armed_ = true;
        } else {
            out.push_back(byte);
        }
    }
    return false;
}

HostConsole::HostConsole(int input_fd, int signal_fd, Serial& serial, bool escape, std::function<void(int)> on_stop)
    : input_fd_(input_fd),
      signal_fd_(signal_fd),
      serial_(serial),
      escape_enabled_(escape),
      on_stop_(std::move(on_stop)),
      wake_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
    if (!wake_) throw_errno("eventfd");
    thread_ = std::thread([this] { loop(); });
}

HostConsole::~HostConsole() { stop(); }

void HostConsole::stop() {
    if (!thread_.joinable()) return;
    const uint64_t one = 1;
    [[maybe_unused]] const ssize_t n = ::write(wake_.get(), &one, sizeof(one));
    thread_.join();
}

void HostConsole::loop() {
    ConsoleEscape escape;
    std::vector<uint8_t> pending;  // read from the host, not yet taken by the guest
    bool input_open = input_fd_ >= 0;
    bool stopped = false;
    for (;;) {
        if (!pending.empty()) {
            const size_t taken = serial_.receive(pending);
            pending.erase(pending.begin(), pending.begin() + static_cast<std::ptrdiff_t>(taken));
        }
        pollfd fds[3] = {{wake_.get(), POLLIN, 0}, {signal_fd_, POLLIN, 0}, {-1, POLLIN, 0}};
        // Read more input only once the guest has taken what we hold.
        if (input_open && pending.empty() && !stopped) fds[2].fd = input_fd_;
        const int timeout_ms = pending.empty() ? -1 : 20;  // retry a full receiver soon
        if (::poll(fds, 3, timeout_ms) < 0) {
            if (errno == EINTR) continue;
            return;
        }
        if (fds[0].revents) return;
        if (fds[1].revents & POLLIN) {
            signalfd_siginfo info{};
            if (::read(signal_fd_, &info, sizeof(info)) == static_cast<ssize_t>(sizeof(info)) && on_stop_)
                on_stop_(static_cast<int>(info.ssi_signo));
        }
        if (fds[2].revents) {
            uint8_t buffer[512];
            const ssize_t n = ::read(input_fd_, buffer, sizeof(buffer));
            if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
            if (n <= 0) {
                input_open = false;  // EOF or error: the guest just gets no more input
                continue;
            }
            if (escape_enabled_) {
                if (escape.filter(buffer, static_cast<size_t>(n), pending)) {
                    stopped = true;
                    if (on_stop_) on_stop_(0);
                }
            } else {
                pending.insert(pending.end(), buffer, buffer + n);
            }
        }
    }
}

}  // namespace nanovm
