// The control socket server (see control_server.hpp).
#include "api/vm/control_server.hpp"

#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "vmm/error.hpp"
#include "vmm/log.hpp"

namespace nanovm::vm {

namespace {
constexpr size_t kReadChunk = 16 * 1024;
// Answers queued for a client that does not read them: above this, its requests are
// not read either until it catches up.
constexpr size_t kMaxQueuedAnswers = 1 << 20;
}  // namespace

struct ControlServer::Connection {
    Fd fd;
    LineBuffer input;
    std::string output;
    bool close_after_flush = false;
};

ControlServer::ControlServer(std::string socket_path) : path_(std::move(socket_path)) {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (path_.empty() || path_.size() >= sizeof(addr.sun_path))
        throw Error(fmt::format("control socket {}: path too long for a Unix socket", path_));
    std::memcpy(addr.sun_path, path_.data(), path_.size());
    listener_ = Fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!listener_) throw_errno("socket (control)");
    ::unlink(path_.c_str());
    // 0600 from the start: the socket controls the VM.
    const mode_t old_mask = ::umask(0177);
    const int bound = ::bind(listener_.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr));
    const int bind_errno = errno;
    ::umask(old_mask);
    if (bound != 0) throw SysError("bind " + path_, bind_errno);
    if (::listen(listener_.get(), 16) != 0) throw_errno("listen " + path_);
}

ControlServer::~ControlServer() { ::unlink(path_.c_str()); }

void ControlServer::add_command(std::string command, Handler handler) {
    if (started_) throw Error("ControlServer::add_command after start()");
    handlers_[std::move(command)] = std::move(handler);
}

void ControlServer::start() {
    if (started_) return;
    started_ = true;
    loop_.add(listener_.get(), EPOLLIN, [this](uint32_t) { accept_clients(); });
}

void ControlServer::accept_clients() {
    for (;;) {
        Fd fd(::accept4(listener_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
        if (!fd) {
            if (errno == EINTR || errno == ECONNABORTED) continue;
            if (errno != EAGAIN) log_line(fmt::format("control socket: accept: {}", std::strerror(errno)));
            return;
        }
        if (clients_.size() >= kMaxConnections) {
            const std::string busy = format_error("too many control connections");
            [[maybe_unused]] const ssize_t n = ::send(fd.get(), busy.data(), busy.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
            continue;  // closed by ~Fd
        }
        const int raw = fd.get();
        auto c = std::make_unique<Connection>();
        c->fd = std::move(fd);
        clients_[raw] = std::move(c);
        loop_.add(raw, EPOLLIN, [this, raw](uint32_t events) { on_client(raw, events); });
    }
}

std::string ControlServer::dispatch(const std::string& line) {
    ControlRequest request;
    try {
        request = parse_control_request(line);
    } catch (const ControlProtocolError& e) {
        return format_error(e.what());
    }
    const auto it = handlers_.find(request.command);
    if (it == handlers_.end()) {
        std::string known;
        for (const auto& [name, handler] : handlers_) known += (known.empty() ? "" : ", ") + name;
        return format_error(fmt::format("unknown command \"{}\" (commands: {})", request.command, known));
    }
    try {
        return format_ok(it->second(request));
    } catch (const std::exception& e) {
        return format_error(fmt::format("{}: {}", request.command, e.what()));
    }
}

void ControlServer::on_client(int fd, uint32_t events) {
    const auto it = clients_.find(fd);
    if (it == clients_.end()) return;
    Connection& c = *it->second;
    if ((events & EPOLLOUT) && !flush(c)) return;
    if ((events & (EPOLLIN | EPOLLHUP | EPOLLERR)) && !c.close_after_flush && c.output.size() < kMaxQueuedAnswers) {
        char buf[kReadChunk];
        const ssize_t n = ::recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
        if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
        if (n <= 0) {
            close_client(fd);
            return;
        }
        c.input.append(std::string_view(buf, static_cast<size_t>(n)));
        try {
            while (auto line = c.input.next_line()) {
                if (line->empty()) continue;
                c.output += dispatch(*line);
                if (c.output.size() >= kMaxQueuedAnswers) break;
            }
        } catch (const ControlProtocolError& e) {
            // A line too long: the stream cannot be resynchronized.
            c.output += format_error(e.what());
            c.close_after_flush = true;
        }
    }
    flush(c);
}

bool ControlServer::flush(Connection& c) {
    const int fd = c.fd.get();
    while (!c.output.empty()) {
        const ssize_t n = ::send(fd, c.output.data(), c.output.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            c.output.erase(0, static_cast<size_t>(n));
        } else if (n < 0 && errno == EINTR) {
            continue;
        } else if (n < 0 && errno == EAGAIN) {
            break;
        } else {
            close_client(fd);
            return false;
        }
    }
    if (c.output.empty() && c.close_after_flush) {
        close_client(fd);
        return false;
    }
    uint32_t events = c.output.empty() ? EPOLLIN : EPOLLOUT;
    if (!c.output.empty() && c.output.size() < kMaxQueuedAnswers && !c.close_after_flush) events |= EPOLLIN;
    loop_.modify(fd, events);
    return true;
}

void ControlServer::close_client(int fd) {
    loop_.remove(fd);
    clients_.erase(fd);
}

}  // namespace nanovm::vm
