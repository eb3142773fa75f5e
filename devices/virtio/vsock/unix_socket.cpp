#include "devices/virtio/vsock/unix_socket.hpp"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>

#include <fmt/format.h>

#include "vmm/error.hpp"

namespace nanovm::virtio::vsock {

namespace {

std::optional<sockaddr_un> make_address(const std::string& path) {
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    if (path.empty() || path.size() >= sizeof(address.sun_path)) return std::nullopt;
    std::memcpy(address.sun_path, path.data(), path.size());
    return address;
}

// Invalid (errno set) when the socket cannot be made.
Fd stream_socket() { return Fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0)); }

}  // namespace

Fd listen_unix(const std::string& path, int backlog) {
    const auto address = make_address(path);
    if (!address)
        throw Error(fmt::format("vsock socket path '{}': empty or longer than {} bytes", path,
                                sizeof(sockaddr_un::sun_path) - 1));
    struct stat st {};
    if (::lstat(path.c_str(), &st) == 0) {
        int error = 0;
        const bool socket_file = S_ISSOCK(st.st_mode);
        if (!socket_file || connect_unix(path, error) || error != ECONNREFUSED)
            throw Error(fmt::format("vsock socket path '{}' is in use", path));
        ::unlink(path.c_str());  // a dead VMM's socket
    }
    Fd fd = stream_socket();
    if (!fd) throw_errno("socket(AF_UNIX)");
    if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&*address), sizeof(*address)) != 0)
        throw SysError(fmt::format("bind({})", path), errno);
    if (::listen(fd.get(), backlog) != 0) throw_errno("listen");
    return fd;
}

Fd connect_unix(const std::string& path, int& error) {
    error = 0;
    const auto address = make_address(path);
    if (!address) {
        error = ENAMETOOLONG;
        return {};
    }
    Fd fd = stream_socket();
    if (!fd || ::connect(fd.get(), reinterpret_cast<const sockaddr*>(&*address), sizeof(*address)) != 0) {
        error = errno;
        return {};
    }
    return fd;
}

Fd accept_unix(int listener, int& error) {
    error = 0;
    Fd fd(::accept4(listener, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (!fd) error = errno;
    return fd;
}

}  // namespace nanovm::virtio::vsock
