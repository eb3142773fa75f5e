// /v1/openapi.json: the OpenAPI 3.0 document, made from the router's real routes
// (router.hpp), the error catalogue (api_error.hpp, also as x-nanovm-errors) and the
// schemas below, so the document cannot list a route the daemon lacks.
#pragma once

#include <vector>

#include <nlohmann/json.hpp>

#include "api/daemon/router.hpp"

namespace nanovm::daemon {

/// The sandbox transition table (sandbox/transitions.hpp) as served in the document's
/// x-nanovm-transitions: {"states": [names], "ops": [{"op", "by_daemon", "during",
/// "to", "states": {state: {"allowed": true, "no_op"} or {"allowed": false, "code",
/// "message"}}}]}.
nlohmann::json transitions_document();

/// The document for `routes`.
nlohmann::json openapi_document(const std::vector<RouteSpec>& routes);

}  // namespace nanovm::daemon
