// GET /v1/health, GET /v1/openapi.json, GET /metrics (routes.hpp).
#include <nlohmann/json.hpp>

#include "api/daemon/api_error.hpp"
#include "api/daemon/openapi.hpp"
#include "api/daemon/routes/routes.hpp"
#include "api/version/version.hpp"

namespace nanovm::daemon {

void add_service_routes(RouteContext& c) {
    c.router.add(RouteSpec{.method = "GET",
                           .pattern = "/v1/health",
                           .summary = "The daemon answers: its version, uptime and sandbox count",
                           .worker = false,
                           .response_schema = "Health"},
                 [&c](http::Request&) {
                     const auto uptime = std::chrono::steady_clock::now() - c.started;
                     int64_t sandboxes = 0;
                     if (c.sandbox_counts)
                         for (const auto& [state, n] : c.sandbox_counts()) sandboxes += n;
                     return json_response(200, nlohmann::json{
                                                   {"status", "ok"},
                                                   {"version", project_version()},
                                                   {"uptime_s", std::chrono::duration_cast<std::chrono::seconds>(uptime).count()},
                                                   {"sandboxes", sandboxes}});
                 });
    c.router.add(RouteSpec{.method = "GET",
                           .pattern = "/v1/openapi.json",
                           .summary = "This API's OpenAPI 3.0 document (made from the routes the daemon has)",
                           .worker = false},
                 [&c](http::Request&) { return json_response(200, openapi_document(c.router.routes())); });
    c.router.add(RouteSpec{.method = "GET",
                           .pattern = "/metrics",
                           .summary = "Prometheus text: sandboxes per state, operation latency histograms, errors by code",
                           .worker = false,
                           .response_schema = "text"},
                 [&c](http::Request&) {
                     http::Response r;
                     r.content_type = "text/plain; version=0.0.4";
                     r.body = c.metrics.render(c.sandbox_counts ? c.sandbox_counts() : std::map<std::string, int64_t>{});
                     return r;
                 });
}

}  // namespace nanovm::daemon
