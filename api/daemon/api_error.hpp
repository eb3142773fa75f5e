// The daemon's error catalogue: every error answer is {"error": {"code", "message"}}
// with a code from this table, and the table decides its HTTP status. The same table
// is served in /v1/openapi.json (x-nanovm-errors) and documented in docs/api.md; a
// test holds the three together.
#pragma once

#include <span>
#include <stdexcept>
#include <string>
#include <string_view>

#include "api/daemon/http/message.hpp"

namespace nanovm::daemon {

/// One catalogue entry.
struct ErrorKind {
    std::string_view code;         ///< stable machine-readable code, e.g. "sandbox_not_found"
    int status;                    ///< the HTTP status it is answered with
    std::string_view description;  ///< when it happens (for docs and the OpenAPI document)
};

/// Every error the API answers with, in the order docs/api.md lists them.
std::span<const ErrorKind> error_catalogue();

/// The entry for `code`. Throws std::logic_error for a code not in the catalogue.
const ErrorKind& error_kind(std::string_view code);

/// An error answer on its way out of a route or the manager: `code` must be in the
/// catalogue; `message` is one line for a person.
class ApiError : public std::runtime_error {
public:
    ApiError(std::string_view code, const std::string& message);
    const std::string& code() const noexcept { return code_; }
    int status() const noexcept { return status_; }

private:
    std::string code_;
    int status_;
};

/// The response for an error: its status and {"error": {"code", "message"}}.
http::Response error_response(std::string_view code, const std::string& message);
http::Response error_response(const ApiError& error);

/// An empty 204 No Content response.
http::Response no_content();

/// A JSON response (status, body = value.dump(); invalid UTF-8 replaced).
template <class Json>
http::Response json_response(int status, const Json& value) {
    http::Response r;
    r.status = status;
    r.body = value.dump(-1, ' ', false, Json::error_handler_t::replace);
    return r;
}

}  // namespace nanovm::daemon
