// The daemon's own small HTTP types: what the routes and the sandbox manager see of
// a request and give back. Boost.Beast stays inside api/daemon/http/server.cpp (its
// headers are slow to compile); nothing else includes it.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace nanovm::daemon::http {

/// A request body the server wrote to a file instead of memory (a route that takes
/// large uploads: BodyPolicy::spool_dir). The file is removed when the last
/// owner lets go of it (the request and any copy of it), whatever the handler did.
struct SpooledBody {
    std::string path;    ///< <spool dir>/.upload-XXXXXX, mode 0600
    uint64_t bytes = 0;  ///< the body's length
    SpooledBody() = default;
    SpooledBody(const SpooledBody&) = delete;
    SpooledBody& operator=(const SpooledBody&) = delete;
    ~SpooledBody();
};

/// One request, its body read whole (bounded by the route's body limit): in `body`,
/// or in `spooled` for a route whose bodies are spooled to a file.
struct Request {
    std::string method;   ///< "GET", "POST", ...
    std::string target;   ///< as sent: path and query
    std::string path;     ///< the target's path, not decoded
    std::map<std::string, std::string> query;  ///< decoded query parameters (last one wins)
    std::string content_type;
    std::string body;
    std::shared_ptr<SpooledBody> spooled;  ///< set instead of `body` for a spooled route
    bool over_tcp = false;  ///< came over the loopback TCP listener (authorized)
    /// Filled by the router: the route's pattern ("/v1/sandboxes/{id}") and the values
    /// of its {name} segments.
    std::string route;
    std::map<std::string, std::string> params;
};

/// Where a streamed response's body goes: chunks of an HTTP/1.1 chunked body.
class StreamSink {
public:
    virtual ~StreamSink() = default;
    /// Queues `data` for the client; blocks while more than the connection's window
    /// is queued. False once the client is gone (or stopped reading for the write
    /// timeout): the producer should stop.
    virtual bool write(std::string_view data) = 0;
    /// True once the client is gone: its connection failed, or it closed it (or its
    /// sending side: an HTTP client waiting for this answer keeps it open). Cheap and
    /// thread-safe: a producer whose source is silent (a command that writes nothing)
    /// asks it now and then, since it would learn it from write() only at its next
    /// output.
    virtual bool client_gone() { return false; }
};

/// A response: a whole body, or (with `stream` set) chunks a producer writes.
struct Response {
    int status = 200;
    std::string content_type = "application/json";
    std::string body;
    std::vector<std::pair<std::string, std::string>> headers;
    /// Set: the body is chunked and produced by this function on a worker thread
    /// (never an I/O thread); `body` is then unused.
    std::function<void(StreamSink&)> stream;
    /// The catalogue code of an error response ("" for a success), for /metrics.
    std::string error_code;
    /// The route's pattern ("" for none), for /metrics.
    std::string route;
};

/// Sends the response for one request. Thread-safe; call exactly once. With a
/// streamed response it returns after the producer has finished.
using Reply = std::function<void(Response)>;

/// Percent-decodes `text` ('+' stays '+'). False for a bad escape.
bool percent_decode(std::string_view text, std::string& out);

/// Splits a request target into its path (as sent) and decoded query parameters.
/// False for a bad escape in either.
bool split_target(std::string_view target, std::string& path, std::map<std::string, std::string>& query);

}  // namespace nanovm::daemon::http
