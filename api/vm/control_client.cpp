// The control socket client (see control_client.hpp).
#include "api/vm/control_client.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "api/vm/control_protocol.hpp"
#include "vmm/error.hpp"
#include "vmm/fd.hpp"

namespace nanovm::vm {

namespace {

using Clock = std::chrono::steady_clock;

int remaining_ms(Clock::time_point deadline) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    return left > 0 ? static_cast<int>(left) : 0;
}

// Waits for `events` on `fd` until `deadline`. Throws Error on timeout.
void wait_for(int fd, short events, Clock::time_point deadline, const std::string& what,
              std::chrono::milliseconds timeout) {
    for (;;) {
        pollfd p{fd, events, 0};
        const int n = ::poll(&p, 1, remaining_ms(deadline));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) throw SysError("poll", errno);
        if (n == 0) throw Error(fmt::format("{}: no answer in {} ms", what, timeout.count()));
        return;
    }
}

}  // namespace

nlohmann::json control_call(const std::string& socket_path, std::string_view command, const nlohmann::json& args,
                            std::chrono::milliseconds timeout) {
    const std::string what = "control socket " + socket_path;
    const auto deadline = Clock::now() + timeout;
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (socket_path.size() >= sizeof(addr.sun_path)) throw Error(what + ": path too long for a Unix socket");
    std::memcpy(addr.sun_path, socket_path.data(), socket_path.size());
    Fd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!fd) throw_errno("socket");
    if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0)
        throw Error(fmt::format("{}: {}", what, std::strerror(errno)));

    const std::string request = format_control_request(command, args);
    size_t sent = 0;
    while (sent < request.size()) {
        wait_for(fd.get(), POLLOUT, deadline, what, timeout);
        const ssize_t n = ::send(fd.get(), request.data() + sent, request.size() - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (n < 0) throw Error(fmt::format("{}: send: {}", what, std::strerror(errno)));
        sent += static_cast<size_t>(n);
    }
    LineBuffer input;
    for (;;) {
        try {
            if (auto line = input.next_line()) return parse_control_answer(*line);
        } catch (const ControlProtocolError& e) {
            throw ControlProtocolError(fmt::format("{}: {}", what, e.what()));
        }
        wait_for(fd.get(), POLLIN, deadline, what, timeout);
        char buf[4096];
        const ssize_t n = ::recv(fd.get(), buf, sizeof(buf), MSG_DONTWAIT);
        if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (n < 0) throw Error(fmt::format("{}: receive: {}", what, std::strerror(errno)));
        if (n == 0) throw Error(what + ": closed without answering");
        input.append(std::string_view(buf, static_cast<size_t>(n)));
    }
}

}  // namespace nanovm::vm
