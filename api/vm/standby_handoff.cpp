// Handing a fork child to a standby VMM (see standby_handoff.hpp).
#include "api/vm/standby_handoff.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "api/vm/boot_options.hpp"
#include "api/vm/vm_id.hpp"
#include "vmm/error.hpp"

extern char** environ;

namespace nanovm::vm {

namespace {

using json = nlohmann::json;

constexpr size_t kMaxClaimBytes = 64 * 1024;
constexpr size_t kClaimFds = 2;  // vmm.lock, readiness pipe

// Waits until `fd` is readable or `timeout` passes; false on timeout.
bool wait_readable(int fd, std::chrono::milliseconds timeout) {
    pollfd p{fd, POLLIN, 0};
    for (;;) {
        const int n = ::poll(&p, 1, static_cast<int>(timeout.count()));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) throw_errno("poll");
        return n > 0;
    }
}

template <typename T>
T field(const json& j, const char* name) {
    const auto it = j.find(name);
    if (it == j.end()) throw Error(fmt::format("standby claim: no '{}'", name));
    try {
        return it->get<T>();
    } catch (const json::exception&) {
        throw Error(fmt::format("standby claim: '{}' has the wrong type", name));
    }
}

// Whether `name` is a variable of a VmmEnvironment.
bool is_vmm_variable(std::string_view name) {
    if (name == "XDG_RUNTIME_DIR" || name == "XDG_CACHE_HOME" || name == "HOME") return true;
    if (!name.starts_with("NANOVM_") || name.size() == 7) return false;
    for (const char c : name)
        if (!(std::isupper(static_cast<unsigned char>(c)) || std::isdigit(static_cast<unsigned char>(c)) || c == '_'))
            return false;
    return true;
}

}  // namespace

VmmEnvironment vmm_environment() {
    VmmEnvironment env;
    for (char** e = environ; e && *e; ++e) {
        const std::string_view entry(*e);
        const size_t eq = entry.find('=');
        if (eq == std::string_view::npos) continue;
        const std::string_view name = entry.substr(0, eq);
        if (is_vmm_variable(name)) env.emplace(std::string(name), std::string(entry.substr(eq + 1)));
    }
    return env;
}

void apply_vmm_environment(const VmmEnvironment& env) {
    for (const auto& [name, value] : vmm_environment())
        if (!env.contains(name)) ::unsetenv(name.c_str());
    for (const auto& [name, value] : env) ::setenv(name.c_str(), value.c_str(), 1);
}

std::string encode_claim(const VmmOptions& o, const VmmEnvironment& env) {
    return json{{"id", o.id},
                {"run_dir", o.run_dir},
                {"keep_dir", o.keep_dir},
                {"cpus", o.cpus},
                {"memory_mib", o.memory_mib},
                {"image", o.image},
                {"disks", o.disks},
                {"boot_timeout_ms", o.boot_timeout.count()},
                {"restore_dir", o.restore_dir},
                {"memory_backend", o.memory_backend},
                {"fork_memory", o.fork_memory},
                {"fork_delta", o.fork_delta},
                {"fork_standby", o.fork_standby},
                {"hostname", o.hostname},
                {"env", env}}
        .dump();
}

DecodedClaim decode_claim(std::string_view text) {
    json j;
    try {
        j = json::parse(text);
    } catch (const json::exception& e) {
        throw Error(fmt::format("standby claim: not JSON ({})", e.what()));
    }
    if (!j.is_object()) throw Error("standby claim: not a JSON object");
    VmmOptions o;
    o.id = field<std::string>(j, "id");
    if (!is_vm_id(o.id)) throw Error(fmt::format("standby claim: '{}' is not a VM id", o.id));
    o.run_dir = field<std::string>(j, "run_dir");
    if (!o.run_dir.empty() && (o.run_dir.front() != '/' || o.run_dir.find('\0') != std::string::npos))
        throw Error("standby claim: run_dir is not an absolute path");
    o.keep_dir = field<bool>(j, "keep_dir");
    o.cpus = field<uint32_t>(j, "cpus");
    if (o.cpus < kMinCpus || o.cpus > kMaxCpus) throw Error(fmt::format("standby claim: cpus {}", o.cpus));
    o.memory_mib = field<uint32_t>(j, "memory_mib");
    if (o.memory_mib < kMinMemoryMib || o.memory_mib > kMaxMemoryMib)
        throw Error(fmt::format("standby claim: memory_mib {}", o.memory_mib));
    o.image = field<std::string>(j, "image");
    o.disks = field<std::vector<std::string>>(j, "disks");
    const int64_t timeout_ms = field<int64_t>(j, "boot_timeout_ms");
    if (timeout_ms <= 0 || timeout_ms > 3600 * 1000)
        throw Error(fmt::format("standby claim: boot_timeout_ms {}", timeout_ms));
    o.boot_timeout = std::chrono::milliseconds(timeout_ms);
    o.restore_dir = field<std::string>(j, "restore_dir");
    o.memory_backend = field<std::string>(j, "memory_backend");
    o.fork_memory = field<std::string>(j, "fork_memory");
    o.fork_delta = field<std::string>(j, "fork_delta");
    o.fork_standby = field<uint32_t>(j, "fork_standby");
    o.hostname = j.value("hostname", std::string());
    if (o.fork_standby > kMaxForkStandby) throw Error(fmt::format("standby claim: fork_standby {}", o.fork_standby));
    VmmEnvironment env = field<VmmEnvironment>(j, "env");
    for (const auto& [name, value] : env) {
        if (!is_vmm_variable(name)) throw Error(fmt::format("standby claim: env: '{}' is not a nanovm variable", name));
        if (value.find('\0') != std::string::npos) throw Error(fmt::format("standby claim: env: {} holds a NUL", name));
    }
    return DecodedClaim{std::move(o), std::move(env)};
}

std::optional<pid_t> hand_to_standby(const std::string& socket_path, const VmmOptions& options, int lock_fd,
                                     int ready_fd, std::chrono::milliseconds timeout, std::string& why) {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (socket_path.size() >= sizeof(addr.sun_path)) {
        why = socket_path + ": path too long for a unix socket";
        return std::nullopt;
    }
    std::memcpy(addr.sun_path, socket_path.c_str(), socket_path.size() + 1);
    const Fd sock(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
    if (!sock) {
        why = fmt::format("socket: {}", std::strerror(errno));
        return std::nullopt;
    }
    if (::connect(sock.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
        why = fmt::format("connect {}: {}", socket_path, std::strerror(errno));
        return std::nullopt;
    }
    const std::string body = encode_claim(options, vmm_environment());
    iovec iov{const_cast<char*>(body.data()), body.size()};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kClaimFds)] = {};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * kClaimFds);
    const int fds[kClaimFds] = {lock_fd, ready_fd};
    std::memcpy(CMSG_DATA(c), fds, sizeof(fds));
    if (::sendmsg(sock.get(), &msg, MSG_NOSIGNAL) != static_cast<ssize_t>(body.size())) {
        why = fmt::format("send to {}: {}", socket_path, std::strerror(errno));
        return std::nullopt;
    }
    if (!wait_readable(sock.get(), timeout)) {
        why = fmt::format("{}: no answer within {} ms", socket_path, timeout.count());
        return std::nullopt;
    }
    char answer[512];
    const ssize_t n = ::recv(sock.get(), answer, sizeof(answer) - 1, 0);
    if (n <= 0) {
        why = fmt::format("{}: closed without answering", socket_path);
        return std::nullopt;
    }
    const std::string text(answer, static_cast<size_t>(n));
    if (text != "ok") {
        why = fmt::format("{}: {}", socket_path, text);
        return std::nullopt;
    }
    ucred cred{};
    socklen_t len = sizeof(cred);
    if (::getsockopt(sock.get(), SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
        why = fmt::format("SO_PEERCRED: {}", std::strerror(errno));
        return std::nullopt;  // cannot happen on a connected unix socket
    }
    return cred.pid;
}

StandbyClaim receive_claim(int conn, std::chrono::milliseconds timeout) {
    if (!wait_readable(conn, timeout)) throw Error(fmt::format("standby claim: nothing within {} ms", timeout.count()));
    std::vector<char> body(kMaxClaimBytes);
    iovec iov{body.data(), body.size()};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 8)] = {};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    const ssize_t n = ::recvmsg(conn, &msg, MSG_CMSG_CLOEXEC);
    if (n < 0) throw_errno("standby claim: recvmsg");
    // Own every fd that came, whatever else is wrong with the message.
    std::vector<Fd> fds;
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
        const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t k = 0; k < count; ++k) {
            int fd = -1;
            std::memcpy(&fd, CMSG_DATA(c) + k * sizeof(int), sizeof(int));
            fds.emplace_back(fd);
        }
    }
    if (n == 0) throw Error("standby claim: the connection closed without a message");
    if (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) throw Error("standby claim: message or fds truncated");
    if (fds.size() != kClaimFds) throw Error(fmt::format("standby claim: {} fds attached, expected 2", fds.size()));
    DecodedClaim decoded = decode_claim(std::string_view(body.data(), static_cast<size_t>(n)));
    StandbyClaim claim;
    claim.options = std::move(decoded.options);
    claim.env = std::move(decoded.env);
    claim.lock = std::move(fds[0]);
    claim.ready = std::move(fds[1]);
    return claim;
}

void answer_claim(int conn, std::string_view answer) {
    [[maybe_unused]] const ssize_t n = ::send(conn, answer.data(), answer.size(), MSG_NOSIGNAL);
}

}  // namespace nanovm::vm
