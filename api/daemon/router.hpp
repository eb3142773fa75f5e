// The daemon's routes as data: method, path pattern, what the route takes and
// answers (for /v1/openapi.json and docs/api.md), and its handler. The router matches
// a request, runs cheap routes on the I/O thread and the rest on the worker pool, and
// turns every exception into a catalogue error answer (api_error.hpp): a handler
// never crashes the daemon.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "api/daemon/http/message.hpp"
#include "api/daemon/worker_pool.hpp"

namespace nanovm::daemon {

/// A query parameter a route takes (for the OpenAPI document).
struct QueryParam {
    std::string name;
    std::string type;  ///< "string", "integer", "boolean"
    bool required = false;
    std::string description;
};

/// One route.
struct RouteSpec {
    std::string method;   ///< "GET", "POST", "PATCH", "PUT", "DELETE"
    std::string pattern;  ///< "/v1/sandboxes/{id}": literal segments and {name} parameters
    std::string summary;
    int success = 200;    ///< the status of a successful answer
    std::vector<std::string> errors;  ///< the catalogue codes it may answer besides the common ones
    bool worker = true;   ///< run on the worker pool (false: cheap, on the I/O thread)
    size_t body_limit = 64 * 1024;  ///< bytes
    /// The code of a body over body_limit ("": body_too_large) and what its message
    /// adds (the option that sets the limit).
    std::string body_too_large_code;
    std::string body_too_large_hint;
    /// The body is written to a file under the daemon's spool directory, not held in
    /// memory (http::Request::spooled; large uploads).
    bool spool_body = false;
    std::string request_schema;     ///< a components/schemas name, "" for none
    std::string response_schema;    ///< likewise; "binary" for an octet stream, "ndjson" streams
    std::vector<QueryParam> query;
};

/// Handles one matched request; throws ApiError (or anything: answered as internal).
using RouteHandler = std::function<http::Response(http::Request&)>;

class Router {
public:
    explicit Router(WorkerPool& pool) : pool_(pool) {}

    /// Adds a route. Throws std::logic_error for a duplicate method + pattern.
    void add(RouteSpec spec, RouteHandler handler);

    /// Routes `request` and calls `reply` once (on this thread or a worker).
    void dispatch(http::Request request, http::Reply reply);

    /// The spec of the route `method` `path` matches, nullptr if none (one match: the
    /// server asks its body's limit, 413 code and spooling from it once per request).
    const RouteSpec* spec(std::string_view method, std::string_view path) const;

    /// Every route, in the order added.
    std::vector<RouteSpec> routes() const;

private:
    struct Entry {
        RouteSpec spec;
        std::vector<std::string> segments;
        RouteHandler handler;
    };
    /// The entries whose pattern matches `path` with the most literal segments (a
    /// literal segment wins over a {name} one).
    std::vector<const Entry*> match(std::string_view path) const;
    static bool match_one(const Entry& e, const std::vector<std::string_view>& segments,
                          std::map<std::string, std::string>* params);
    static http::Response run(const Entry& e, http::Request& request);

    WorkerPool& pool_;
    std::vector<Entry> entries_;
};

/// The errors every route may answer (bad_request, unauthorized, unknown_field: a
/// query parameter the route does not take, body_too_large, header_too_large,
/// internal, busy).
const std::vector<std::string>& common_errors();

/// Checks that every query parameter of `request` is one `spec` takes (a name
/// "prefix.KEY" in spec.query takes every "prefix.*"). Throws ApiError unknown_field
/// naming it and the ones the route takes.
void check_query(const RouteSpec& spec, const http::Request& request);

}  // namespace nanovm::daemon
