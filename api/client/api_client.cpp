// JSON calls to nanovmd (api_client.hpp).
#include "api/client/api_client.hpp"

#include <fmt/format.h>

namespace nanovm::client {

using nlohmann::json;

void throw_if_error(const Response& r) {
    if (r.status / 100 == 2) return;
    const json j = json::parse(r.body, nullptr, /*allow_exceptions=*/false);
    if (j.is_object() && j.contains("error") && j["error"].is_object() && j["error"].value("code", json()).is_string())
        throw ApiError(r.status, j["error"]["code"].get<std::string>(), j["error"].value("message", std::string()));
    std::string text = r.body.substr(0, 200);
    for (char& c : text) if (c == '\n' || c == '\r') c = ' ';
    throw ApiError(r.status, fmt::format("http_{}", r.status), fmt::format("HTTP {}: {}", r.status, text));
}

json ApiClient::call(std::string_view method, std::string_view target, const json& body) {
    RequestBody rb;
    if (!body.is_null()) rb.data = body.dump();
    const Response r = http_.request(method, target, rb);
    throw_if_error(r);
    if (r.body.empty()) return nullptr;
    json j = json::parse(r.body, nullptr, false);
    if (j.is_discarded())
        throw Error(fmt::format("{} {}: the daemon's answer is not JSON: {}", method, target, r.body.substr(0, 120)));
    return j;
}

}  // namespace nanovm::client
