// nanovmd's API as JSON calls (docs/api.md) over an HttpClient: an error answer
// {"error": {"code", "message"}} becomes an ApiError. For the CLI (api/cli/) and the
// api benchmark (tests/daemon/api_bench.cpp).
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "api/client/http_client.hpp"

namespace nanovm::client {

/// The daemon answered with an error: `status` (4xx, 5xx) and its catalogue `code`
/// ("sandbox_not_found"...; "http_<status>" when the body was not the error shape).
/// what() is the daemon's message.
class ApiError : public Error {
public:
    ApiError(int status, std::string code, const std::string& message)
        : Error(message), status_(status), code_(std::move(code)) {}
    int status() const noexcept { return status_; }
    const std::string& code() const noexcept { return code_; }

private:
    int status_;
    std::string code_;
};

/// Throws the ApiError a non-2xx response carries; returns for a 2xx one.
void throw_if_error(const Response& response);

class ApiClient {
public:
    explicit ApiClient(Endpoint endpoint) : http_(std::move(endpoint)) {}

    /// METHOD TARGET with a JSON body (none when null); the answer's JSON (null for
    /// 204 or an empty body). Throws ApiError, Unreachable, Error (the answer is not JSON).
    nlohmann::json call(std::string_view method, std::string_view target,
                        const nlohmann::json& body = nullptr);
    nlohmann::json get(std::string_view target) { return call("GET", target); }
    nlohmann::json post(std::string_view target, const nlohmann::json& body = nlohmann::json::object()) {
        return call("POST", target, body);
    }
    void remove(std::string_view target) { call("DELETE", target); }

    HttpClient& http() noexcept { return http_; }

private:
    HttpClient http_;
};

}  // namespace nanovm::client
