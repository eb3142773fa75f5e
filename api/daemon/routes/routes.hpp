// The daemon's routes, one file per resource: each add_*_routes registers its
// routes (RouteSpec + handler) with the router. Handlers parse and validate into
// typed requests (json_body.hpp) and call the sandbox manager; nothing here talks
// to a VMM or the store.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "api/daemon/daemon_options.hpp"
#include "api/daemon/metrics.hpp"
#include "api/daemon/router.hpp"

namespace nanovm::daemon {

class SandboxManager;
class TemplateManager;

/// What the routes reach.
struct RouteContext {
    Router& router;
    Metrics& metrics;
    const DaemonOptions& options;
    std::chrono::steady_clock::time_point started;
    SandboxManager* manager = nullptr;
    TemplateManager* templates = nullptr;
    /// Sandboxes per state (for /v1/health and /metrics).
    std::function<std::map<std::string, int64_t>()> sandbox_counts;
};

/// GET /v1/health, GET /v1/openapi.json, GET /metrics.
void add_service_routes(RouteContext& context);
/// /v1/sandboxes and its lifecycle (sandbox_routes.cpp).
void add_sandbox_routes(RouteContext& context);
/// POST /v1/sandboxes/{id}/exec (exec_routes.cpp).
void add_exec_routes(RouteContext& context);
/// /v1/sandboxes/{id}/files... (file_routes.cpp).
void add_file_routes(RouteContext& context);
/// Snapshots (snapshot_routes.cpp).
void add_snapshot_routes(RouteContext& context);
/// /v1/templates (template_routes.cpp).
void add_template_routes(RouteContext& context);
/// Rest states: POST /v1/sandboxes/{id}/sleep and /reboot (rest_routes.cpp).
void add_rest_routes(RouteContext& context);
/// /v1/sandboxes/{id}/sessions... (session_routes.cpp).
void add_session_routes(RouteContext& context);
/// /v1/sandboxes/{id}/commands... (command_routes.cpp).
void add_command_routes(RouteContext& context);

}  // namespace nanovm::daemon
