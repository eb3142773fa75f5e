// The daemon's HTTP/1.1 server (Boost.Beast over Asio): a Unix socket and, optionally,
// a loopback TCP listener whose every request must carry the bearer token. It reads
// each request with limits (header block, body per route, a read timeout), answers
// the protocol-level errors itself (400, 401, 413, 431) and hands every other
// request to the dispatcher. I/O runs on one thread (io_threads); a slow or vanished client
// holds only its own connection (timeouts close it) and never an I/O thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "api/daemon/http/message.hpp"

namespace nanovm::daemon::http {

/// What a request's body may be, by its route (ServerOptions::body_policy).
struct BodyPolicy {
    size_t limit = size_t(1) << 20;  ///< bytes at most; over it: 413
    std::string too_large_code = "body_too_large";  ///< that 413's catalogue code
    std::string too_large_hint;  ///< what its message adds (the option that sets the limit)
    /// The directory the body is written to instead of memory ("": held in memory).
    /// Such a body is read with read_timeout per read instead of for the whole request
    /// (an upload of gigabytes takes long), and reaches the dispatcher as
    /// Request::spooled. A full file system is answered 507 disk_full: before reading
    /// when the Content-Length does not fit the free space, or when a write fails with
    /// ENOSPC.
    std::string spool_dir;
};

/// What the server is started with.
struct ServerOptions {
    std::string unix_socket;  ///< path to listen on (made 0600); must not exist
    std::string tcp_host;     ///< "" : no TCP listener; else a loopback address
    uint16_t tcp_port = 0;    ///< 0: any free port (tcp_port() tells which)
    std::string token;        ///< the bearer token TCP requests must carry
    size_t header_limit = 16 * 1024;  ///< bytes of the request line and headers
    /// What a request's body may be (BodyPolicy), from its method and path (the file
    /// upload route takes more than the JSON ones). Asked once per request; unset: the
    /// BodyPolicy defaults.
    std::function<BodyPolicy(std::string_view method, std::string_view path)> body_policy;
    std::chrono::milliseconds read_timeout{std::chrono::seconds(30)};   ///< a whole request (a spooled one: each read)
    std::chrono::milliseconds write_timeout{std::chrono::seconds(60)};  ///< per write, and idle keep-alive
    size_t stream_window = 1 << 20;  ///< bytes a streamed response may have queued
    /// Threads that parse requests and write answers. One: every request's work that
    /// can wait goes to the dispatcher's workers, and with two every read and write of
    /// a connection hopped between them (a wake-up and a futex each; natively a
    /// GET /v1/health round trip 59 us with two, see the commit for one).
    unsigned io_threads = 1;
};

/// Called on an I/O thread for every request that passed the protocol checks; must
/// not block (long work goes to a worker, which calls `reply` when done).
using Dispatcher = std::function<void(Request request, Reply reply)>;

/// Called once per response written: the request's route pattern ("" for none), its
/// status, its error code and how long it took from the end of reading it, seconds.
using Observer = std::function<void(const std::string& method, const std::string& route, int status,
                                    const std::string& error_code, double seconds)>;

class Server {
public:
    /// Binds the listeners. Throws Error naming the socket or address that failed.
    Server(ServerOptions options, Dispatcher dispatcher, Observer observer);
    ~Server();
    Server(const Server&) = delete;
    Server& operator=(const Server&) = delete;

    /// The TCP port bound (0 without a TCP listener).
    uint16_t tcp_port() const;
    /// Serves on the I/O threads until stop(); returns when they have ended.
    void run();
    /// Stops accepting and ends run(). Thread-safe, async-signal-unsafe.
    void stop();

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace nanovm::daemon::http
