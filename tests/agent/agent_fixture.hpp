// Test helpers for the agent suite: a nanovm-agent host process per test, raw
// protocol sockets, deterministic data and SHA-256.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "api/agent_client/agent_client.hpp"
#include "vmm/fd.hpp"

namespace nanovm::agent::testing {

/// A nanovm-agent process listening on a Unix socket in a fresh temp directory;
/// stopped (SIGTERM) and the directory removed on destruction.
class AgentProcess {
public:
    AgentProcess();
    ~AgentProcess();
    AgentProcess(const AgentProcess&) = delete;
    AgentProcess& operator=(const AgentProcess&) = delete;

    pid_t pid() const { return pid_; }
    /// The temp directory (for files the tests make).
    const std::string& dir() const { return dir_; }
    const std::string& socket_path() const { return socket_path_; }
    /// A client connection.
    AgentClient connect() const;
    /// A raw socket to the agent; with `hello`, HELLO has been exchanged on it,
    /// offering exactly protocol version `version`.
    Fd raw_connect(bool hello, uint32_t version = proto::kProtocolVersion) const;
    /// The agent's children that are zombies right now.
    int zombie_children() const;
    /// All of the agent's children right now.
    int children() const;
    /// The agent's resident memory, KiB (VmRSS).
    long rss_kib() const;

private:
    pid_t pid_ = -1;
    std::string dir_;
    std::string socket_path_;
};

/// The errno name of the AgentError `fn` throws; "" if it throws none.
std::string errno_of(const std::function<void()>& fn);

/// Writes a whole frame on a raw socket.
void send_frame(int fd, proto::MessageType type, uint32_t id, std::string_view payload);
/// Writes raw bytes.
void send_bytes(int fd, std::string_view bytes);
/// Reads one frame (blocking, up to 10 s); false on EOF/reset before a whole frame.
bool read_frame(int fd, proto::MessageType& type, uint32_t& id, std::string& payload);
/// True if the peer closed the connection (EOF or reset) within 10 s, with no more
/// bytes before that.
bool reads_eof(int fd);

/// Fills `buf` with the deterministic pseudo-random stream that starts at `offset`
/// (whole 8-byte words; offset and size multiples of 8) of the stream of `seed`.
void fill_pattern(char* buf, size_t size, uint64_t seed, uint64_t offset);
/// Writes `size` bytes of the pattern of `seed` to a host file.
void write_pattern_file(const std::string& path, uint64_t size, uint64_t seed);

/// Incremental SHA-256 (OpenSSL).
class Sha256 {
public:
    Sha256();
    ~Sha256();
    Sha256(const Sha256&) = delete;
    Sha256& operator=(const Sha256&) = delete;
    void update(std::string_view data);
    /// Hex digest; the object is spent after.
    std::string hex();

private:
    void* ctx_;
};

/// SHA-256 of a host file, hex.
std::string sha256_file(const std::string& path);

/// Seconds since an arbitrary start (steady clock).
double now_seconds();

}  // namespace nanovm::agent::testing
