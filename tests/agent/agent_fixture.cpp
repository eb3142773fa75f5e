// Agent suite helpers (see agent_fixture.hpp).
#include "tests/agent/agent_fixture.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <system_error>
#include <thread>
#include <vector>

#include "guest-init/protocol/frame.hpp"
#include "guest-init/protocol/messages.hpp"
#include "tests/agent/agent_path.hpp"

namespace nanovm::agent::testing {
namespace {

[[noreturn]] void fail_errno(const std::string& what) { throw std::system_error(errno, std::generic_category(), what); }

// "<pid> (<comm>) <state> <ppid> ..." -> state and ppid.
bool read_stat(const std::string& pid, char& state, pid_t& ppid) {
    std::ifstream in("/proc/" + pid + "/stat");
    std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const size_t paren = s.rfind(')');
    if (paren == std::string::npos || paren + 4 >= s.size()) return false;
    std::istringstream rest(s.substr(paren + 2));
    rest >> state >> ppid;
    return static_cast<bool>(rest);
}

template <typename Fn>
int count_children(pid_t parent, Fn&& keep) {
    int n = 0;
    DIR* proc = ::opendir("/proc");
    if (proc == nullptr) return -1;
    while (const dirent* e = ::readdir(proc)) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
        char state;
        pid_t ppid;
        if (read_stat(e->d_name, state, ppid) && ppid == parent && keep(state)) ++n;
    }
    ::closedir(proc);
    return n;
}

bool wait_readable(int fd, int timeout_ms) {
    pollfd p{fd, POLLIN, 0};
    return ::poll(&p, 1, timeout_ms) > 0;
}

}  // namespace

AgentProcess::AgentProcess() {
    char tmpl[] = "/tmp/nanovm-agent-test-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) fail_errno("mkdtemp");
    dir_ = tmpl;
    socket_path_ = dir_ + "/agent.sock";
    const std::string listen = "unix:" + socket_path_;
    // NANOVM_AGENT overrides the binary (e.g. a sanitizer build of the agent).
    const char* override_path = std::getenv("NANOVM_AGENT");
    const std::string agent_path = override_path != nullptr && *override_path != '\0' ? override_path : built_agent_path();
    pid_ = ::fork();
    if (pid_ < 0) fail_errno("fork");
    if (pid_ == 0) {
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, nullptr);
        ::execl(agent_path.c_str(), "nanovm-agent", "--listen", listen.c_str(), static_cast<char*>(nullptr));
        ::_exit(127);
    }
    // Ready once a connection gets through.
    for (int i = 0; i < 500; ++i) {
        try {
            connect_endpoint(Endpoint::unix_socket(socket_path_), std::chrono::milliseconds(100));
            return;
        } catch (const std::exception&) {
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
    }
    throw std::runtime_error("nanovm-agent did not come up at " + socket_path_);
}

AgentProcess::~AgentProcess() {
    if (pid_ > 0) {
        ::kill(pid_, SIGTERM);
        int status;
        ::waitpid(pid_, &status, 0);
    }
    const std::string rm = "rm -rf '" + dir_ + "'";
    if (std::system(rm.c_str()) != 0) {
        // Left behind in /tmp: harmless.
    }
}

AgentClient AgentProcess::connect() const { return AgentClient::connect(Endpoint::unix_socket(socket_path_)); }

Fd AgentProcess::raw_connect(bool hello, uint32_t version) const {
    Fd fd = connect_endpoint(Endpoint::unix_socket(socket_path_), std::chrono::seconds(5));
    if (hello) {
        send_frame(fd.get(), proto::MessageType::kHello, 0, proto::encode(proto::Hello{version, version, "raw test"}));
        proto::MessageType type;
        uint32_t id;
        std::string payload;
        proto::HelloReply reply;
        if (!read_frame(fd.get(), type, id, payload) || type != proto::MessageType::kHelloReply ||
            !proto::decode(payload, reply) || reply.version != version)
            throw std::runtime_error("no HELLO_REPLY for version " + std::to_string(version));
    }
    return fd;
}

int AgentProcess::zombie_children() const {
    return count_children(pid_, [](char state) { return state == 'Z'; });
}

int AgentProcess::children() const {
    return count_children(pid_, [](char) { return true; });
}

long AgentProcess::rss_kib() const {
    std::ifstream in("/proc/" + std::to_string(pid_) + "/status");
    std::string key;
    while (in >> key) {
        if (key == "VmRSS:") {
            long kib = -1;
            in >> kib;
            return kib;
        }
        in.ignore(1 << 20, '\n');
    }
    return -1;
}

void send_bytes(int fd, std::string_view bytes) {
    while (!bytes.empty()) {
        pollfd p{fd, POLLOUT, 0};
        ::poll(&p, 1, 10000);
        const ssize_t n = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            bytes.remove_prefix(static_cast<size_t>(n));
        } else if (n < 0 && errno != EINTR && errno != EAGAIN) {
            fail_errno("send");
        }
    }
}

void send_frame(int fd, proto::MessageType type, uint32_t id, std::string_view payload) {
    proto::FrameOutput out;
    out.append(type, id, payload);
    send_bytes(fd, out.pending());
}

namespace {
// Reads exactly `size` bytes; false on EOF, reset or 10 s without data.
bool read_exact(int fd, char* buf, size_t size) {
    while (size > 0) {
        if (!wait_readable(fd, 10000)) return false;
        const ssize_t n = ::recv(fd, buf, size, MSG_DONTWAIT);
        if (n > 0) {
            buf += n;
            size -= static_cast<size_t>(n);
        } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
            return false;
        }
    }
    return true;
}
}  // namespace

bool read_frame(int fd, proto::MessageType& type, uint32_t& id, std::string& payload) {
    unsigned char header[proto::kFrameHeaderSize];
    if (!read_exact(fd, reinterpret_cast<char*>(header), sizeof header)) return false;
    const proto::FrameHeader h = proto::decode_frame_header(header);
    if (h.payload_length > proto::kMaxPayload) return false;
    payload.resize(h.payload_length);
    if (!read_exact(fd, payload.data(), payload.size())) return false;
    type = h.type;
    id = h.id;
    return true;
}

bool reads_eof(int fd) {
    if (!wait_readable(fd, 10000)) return false;
    char c;
    const ssize_t n = ::recv(fd, &c, 1, MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno == ECONNRESET);
}

void fill_pattern(char* buf, size_t size, uint64_t seed, uint64_t offset) {
    // A counter hashed through splitmix64: any offset can be produced directly.
    uint64_t index = offset / 8;
    for (size_t i = 0; i + 8 <= size; i += 8, ++index) {
        uint64_t z = seed + index * 0x9e3779b97f4a7c15ull;
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        z ^= z >> 31;
        std::memcpy(buf + i, &z, 8);
    }
}

void write_pattern_file(const std::string& path, uint64_t size, uint64_t seed) {
    Fd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (!fd) fail_errno("open " + path);
    std::vector<char> buf(1 << 20);
    for (uint64_t off = 0; off < size; off += buf.size()) {
        const size_t n = static_cast<size_t>(std::min<uint64_t>(buf.size(), size - off));
        fill_pattern(buf.data(), n, seed, off);
        if (::write(fd.get(), buf.data(), n) != static_cast<ssize_t>(n)) fail_errno("write " + path);
    }
}

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
    EVP_DigestInit_ex(static_cast<EVP_MD_CTX*>(ctx_), EVP_sha256(), nullptr);
}

Sha256::~Sha256() { EVP_MD_CTX_free(static_cast<EVP_MD_CTX*>(ctx_)); }

void Sha256::update(std::string_view data) { EVP_DigestUpdate(static_cast<EVP_MD_CTX*>(ctx_), data.data(), data.size()); }

std::string Sha256::hex() {
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    EVP_DigestFinal_ex(static_cast<EVP_MD_CTX*>(ctx_), digest, &len);
    static const char* kHex = "0123456789abcdef";
    std::string out;
    for (unsigned int i = 0; i < len; ++i) {
        out += kHex[digest[i] >> 4];
        out += kHex[digest[i] & 15];
    }
    return out;
}

std::string sha256_file(const std::string& path) {
    Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd) fail_errno("open " + path);
    Sha256 sha;
    std::vector<char> buf(1 << 20);
    for (;;) {
        const ssize_t n = ::read(fd.get(), buf.data(), buf.size());
        if (n < 0) fail_errno("read " + path);
        if (n == 0) break;
        sha.update(std::string_view(buf.data(), static_cast<size_t>(n)));
    }
    return sha.hex();
}

double now_seconds() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string errno_of(const std::function<void()>& fn) {
    try {
        fn();
    } catch (const AgentError& e) {
        return e.errno_name();
    }
    return "";
}

}  // namespace nanovm::agent::testing
