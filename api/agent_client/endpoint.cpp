// Connecting to an agent (see endpoint.hpp).
#include "api/agent_client/endpoint.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <system_error>

namespace nanovm::agent {
namespace {

using Clock = std::chrono::steady_clock;

int ms_left(Clock::time_point deadline) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    return left < 0 ? 0 : static_cast<int>(left);
}

// Waits for `events` on `fd` until `deadline`; throws ETIMEDOUT.
void wait_for(int fd, short events, Clock::time_point deadline, const std::string& what) {
    for (;;) {
        pollfd p{fd, events, 0};
        const int n = ::poll(&p, 1, ms_left(deadline));
        if (n > 0) return;
        if (n == 0) throw std::system_error(ETIMEDOUT, std::generic_category(), what);
        if (errno != EINTR) throw std::system_error(errno, std::generic_category(), what);
    }
}

void write_all(int fd, const std::string& data, Clock::time_point deadline, const std::string& what) {
    size_t done = 0;
    while (done < data.size()) {
        wait_for(fd, POLLOUT, deadline, what);
        const ssize_t n = ::send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            done += static_cast<size_t>(n);
        } else if (n < 0 && errno != EINTR && errno != EAGAIN) {
            throw std::system_error(errno, std::generic_category(), what);
        }
    }
}

// Reads one '\n'-terminated line of at most 64 bytes, consuming nothing past it (the
// agent's frames follow on the same connection): what has arrived is peeked, and only
// the bytes up to the newline are taken. Two system calls for the usual answer where
// reading byte by byte took 16 (polls included).
std::string read_line(int fd, Clock::time_point deadline, const std::string& what) {
    constexpr size_t kMax = 64;
    std::string line;
    while (line.size() < kMax) {
        wait_for(fd, POLLIN, deadline, what);
        char buf[kMax];
        const ssize_t n = ::recv(fd, buf, kMax - line.size(), MSG_DONTWAIT | MSG_PEEK);
        if (n == 0) throw std::runtime_error(what + ": the VMM closed the connection (no listener on the port?)");
        if (n < 0) {
            if (errno == EINTR || errno == EAGAIN) continue;
            throw std::system_error(errno, std::generic_category(), what);
        }
        const void* nl = std::memchr(buf, '\n', static_cast<size_t>(n));
        const size_t take = nl ? static_cast<size_t>(static_cast<const char*>(nl) - buf) + 1 : static_cast<size_t>(n);
        const ssize_t got = ::recv(fd, buf, take, MSG_DONTWAIT);
        if (got != static_cast<ssize_t>(take))  // peeked bytes are there: only an error takes them away
            throw std::system_error(got < 0 ? errno : EIO, std::generic_category(), what);
        if (nl) return line.append(buf, take - 1);
        line.append(buf, take);
    }
    throw std::runtime_error(what + ": answer line too long");
}

}  // namespace

Endpoint Endpoint::vsock(std::string vmm_socket_path, uint32_t port) {
    return Endpoint{std::move(vmm_socket_path), port};
}

std::string Endpoint::to_string() const {
    if (vsock_port) return "vsock:" + socket_path + ":" + std::to_string(*vsock_port);
    return "unix:" + socket_path;
}

Fd connect_endpoint(const Endpoint& endpoint, std::chrono::milliseconds timeout) {
    const auto deadline = Clock::now() + timeout;
    const std::string what = "connect " + endpoint.to_string();
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    if (endpoint.socket_path.empty() || endpoint.socket_path.size() >= sizeof sa.sun_path)
        throw std::system_error(ENAMETOOLONG, std::generic_category(), what);
    std::memcpy(sa.sun_path, endpoint.socket_path.data(), endpoint.socket_path.size());

    Fd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!fd) throw std::system_error(errno, std::generic_category(), what);
    if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&sa), sizeof sa) != 0) {
        if (errno != EINPROGRESS && errno != EAGAIN) throw std::system_error(errno, std::generic_category(), what);
        wait_for(fd.get(), POLLOUT, deadline, what);
        int err = 0;
        socklen_t len = sizeof err;
        ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
        if (err != 0) throw std::system_error(err, std::generic_category(), what);
    }
    if (endpoint.vsock_port) {
        write_all(fd.get(), "CONNECT " + std::to_string(*endpoint.vsock_port) + "\n", deadline, what);
        const std::string answer = read_line(fd.get(), deadline, what);
        if (answer.compare(0, 3, "OK ") != 0)
            throw std::runtime_error(what + ": the VMM answered \"" + answer + "\"");
    }
    return fd;
}

}  // namespace nanovm::agent
