// Listening sockets (see listen_address.hpp).
#include "guest-init/agent/listen_address.hpp"

#include <linux/vm_sockets.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <charconv>
#include <cstring>

namespace nanovm::agent {
namespace {
constexpr int kBacklog = 64;
}

std::string ListenAddress::to_string() const {
    return kind == Kind::kUnix ? "unix:" + path : "vsock:" + std::to_string(port);
}

std::optional<ListenAddress> parse_listen_address(std::string_view text) {
    ListenAddress a;
    if (text.substr(0, 5) == "unix:") {
        a.kind = ListenAddress::Kind::kUnix;
        a.path = std::string(text.substr(5));
        if (a.path.empty() || a.path.size() >= sizeof(sockaddr_un{}.sun_path) ||
            a.path.find('\0') != std::string::npos)
            return std::nullopt;
        return a;
    }
    if (text.substr(0, 6) == "vsock:") {
        const std::string_view digits = text.substr(6);
        uint32_t port = 0;
        const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), port);
        if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size() || port == 0 ||
            port == VMADDR_PORT_ANY)
            return std::nullopt;
        a.kind = ListenAddress::Kind::kVsock;
        a.port = port;
        return a;
    }
    return std::nullopt;
}

Fd open_listener(const ListenAddress& address, Failure& failure) {
    const std::string shown = address.to_string();
    if (address.kind == ListenAddress::Kind::kUnix) {
        Fd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
        if (!fd) {
            failure = errno_failure("socket " + shown);
            return {};
        }
        struct stat st;
        if (::lstat(address.path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) ::unlink(address.path.c_str());
        sockaddr_un sa{};
        sa.sun_family = AF_UNIX;
        std::memcpy(sa.sun_path, address.path.data(), address.path.size());
        if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&sa), sizeof sa) != 0) {
            failure = errno_failure("bind " + shown);
            return {};
        }
        if (::listen(fd.get(), kBacklog) != 0) {
            failure = errno_failure("listen " + shown);
            return {};
        }
        return fd;
    }
    Fd fd(::socket(AF_VSOCK, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!fd) {
        failure = errno_failure("socket " + shown);
        return {};
    }
    sockaddr_vm sa{};
    sa.svm_family = AF_VSOCK;
    sa.svm_cid = VMADDR_CID_ANY;
    sa.svm_port = address.port;
    if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&sa), sizeof sa) != 0) {
        failure = errno_failure("bind " + shown);
        return {};
    }
    if (::listen(fd.get(), kBacklog) != 0) {
        failure = errno_failure("listen " + shown);
        return {};
    }
    return fd;
}

}  // namespace nanovm::agent
