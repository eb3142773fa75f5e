// Rest states: POST /v1/sandboxes/{id}/sleep and /reboot (routes.hpp). Archive and
// unarchive come with the archive store.
#include "api/daemon/api_error.hpp"
#include "api/daemon/json_body.hpp"
#include "api/daemon/routes/resource_json.hpp"
#include "api/daemon/routes/routes.hpp"
#include "api/daemon/sandbox/manager.hpp"

namespace nanovm::daemon {

void add_rest_routes(RouteContext& c) {
    SandboxManager& m = *c.manager;

    c.router.add(RouteSpec{.method = "POST",
                           .pattern = "/v1/sandboxes/{id}/sleep",
                           .summary = "Stop a sandbox's vCPUs until its next exec, file or session call wakes it",
                           .errors = {"sandbox_not_found", "bad_json", "unknown_field", "wrong_state", "sandbox_archived", "vm_error"},
                           .request_schema = "Empty",
                           .response_schema = "Sandbox"},
                 [&m](http::Request& req) {
                     JsonBody(req.body, {});
                     return json_response(200, sandbox_json(m.sleep(req.params["id"])));
                 });

    c.router.add(RouteSpec{.method = "POST",
                           .pattern = "/v1/sandboxes/{id}/reboot",
                           .summary = "Boot a sandbox's guest cold over its kept disk (memory and processes are lost)",
                           .errors = {"sandbox_not_found", "bad_json", "unknown_field", "wrong_state", "sandbox_archived", "vm_error", "disk_full"},
                           .request_schema = "Empty",
                           .response_schema = "Sandbox"},
                 [&m](http::Request& req) {
                     JsonBody(req.body, {});
                     return json_response(200, sandbox_json(m.reboot(req.params["id"])));
                 });
}

}  // namespace nanovm::daemon
