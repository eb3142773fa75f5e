// A synchronous HTTP/1.1 client of nanovmd (docs/api.md "Reaching the daemon"): over
// the daemon's Unix socket, or loopback TCP with a bearer token. Boost.Beast does the
// HTTP (chunked bodies, keep-alive); it is included only by http_client.cpp, like the
// daemon's server (api/daemon/http/server.cpp).
//
// One connection, kept alive between requests and opened again when the daemon has
// closed it. Not thread-safe: one client per thread. A request waits as long as the
// daemon takes (a create boots a VM; a streamed exec lasts as long as its command).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "vmm/error.hpp"

namespace nanovm::client {

/// Where the daemon listens.
struct Endpoint {
    std::string unix_socket;  ///< <state>/nanovmd.sock; empty: TCP below
    std::string host;         ///< loopback address (TCP)
    uint16_t port = 0;        ///< TCP port
    std::string token;        ///< bearer token (TCP)
    /// "unix socket PATH" or "http://HOST:PORT", for messages.
    std::string describe() const;
};

/// Nothing answers at the endpoint: the socket file is missing or refuses
/// connections (no daemon), or it is not ours to open (EACCES). what() names the
/// endpoint and the reason.
class Unreachable : public Error {
public:
    using Error::Error;
};

/// One answer. `body` holds the whole body unless a sink took it (see request()).
struct Response {
    int status = 0;
    std::string content_type;
    std::string body;
};

/// A request's body: `data`, or the bytes of the host file `file` (sent streamed,
/// with its length) when that is set.
struct RequestBody {
    std::string data;
    std::string file;
    std::string content_type = "application/json";
};

/// Receives a streamed body in pieces as they arrive (chunk boundaries are not kept).
using BodySink = std::function<void(std::string_view)>;

class HttpClient {
public:
    explicit HttpClient(Endpoint endpoint);
    ~HttpClient();
    HttpClient(HttpClient&&) noexcept;
    HttpClient& operator=(HttpClient&&) noexcept;

    /// Sends METHOD TARGET (path and query, already percent-encoded) with `body`
    /// (none for an empty data and file). A 2xx answer's body goes to `sink` when one is
    /// given (piece by piece, as the daemon writes it), else into Response::body; any
    /// other status's body always goes to Response::body. Throws Unreachable when the
    /// daemon cannot be reached, Error when the connection breaks mid-answer or the
    /// body file cannot be read, and whatever the sink throws.
    Response request(std::string_view method, std::string_view target, const RequestBody& body = {},
                     const BodySink& sink = {});

    const Endpoint& endpoint() const noexcept;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

/// Percent-encodes a query value (unreserved characters and '/' kept).
std::string url_encode(std::string_view text);

/// Percent-encodes one path segment (an id or a name): only RFC 3986 §2.3's unreserved
/// characters are kept, so a '/' or a '?' in it can never change the route.
std::string url_encode_segment(std::string_view text);

}  // namespace nanovm::client
