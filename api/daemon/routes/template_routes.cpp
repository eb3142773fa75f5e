// /v1/templates: create (from an image and shape with setup lines, or a snapshot),
// list, get, delete (routes.hpp; template_manager.hpp).
#include <fmt/format.h>

#include "api/daemon/api_error.hpp"
#include "api/daemon/json_body.hpp"
#include "api/daemon/routes/resource_json.hpp"
#include "api/daemon/routes/routes.hpp"
#include "api/daemon/template/template_manager.hpp"

namespace nanovm::daemon {

namespace {

using nlohmann::json;

json or_null(const std::string& s) { return s.empty() ? json(nullptr) : json(s); }

/// The Template schema (openapi.cpp).
json template_json(const store::TemplateRecord& t) {
    return json{{"name", t.name},
                {"state", t.state},
                {"error", or_null(t.error)},
                {"image", or_null(t.image)},
                {"image_digest", or_null(t.image_digest)},
                {"cpus", t.cpus},
                {"memory_mb", t.memory_mb},
                {"snapshot_id", or_null(t.snapshot_id)},
                {"setup", t.setup},
                {"implicit", t.implicit},
                {"uses", t.uses},
                {"created_at", rfc3339(t.created_ms)},
                {"last_used_at", t.uses > 0 ? json(rfc3339(t.used_ms)) : json(nullptr)}};
}

NewTemplate parse_new_template(const std::string& body) {
    const JsonBody b(body, {"name", "image", "cpus", "memory_mb", "snapshot_id", "setup"});
    NewTemplate r;
    const auto name = b.string("name", 128);
    if (!name) throw ApiError("invalid_field", "\"name\" is required");
    r.name = *name;
    if (auto v = b.string("image", 64)) r.image = *v;
    if (auto v = b.string("snapshot_id", 64)) r.snapshot_id = *v;
    if (auto v = b.integer("cpus", 1, 4)) r.cpus = static_cast<uint32_t>(*v);
    if (auto v = b.integer("memory_mb", 128, 8192)) r.memory_mb = static_cast<uint32_t>(*v);
    if (auto v = b.strings("setup", 64, 16384)) r.setup = *v;
    return r;
}

}  // namespace

void add_template_routes(RouteContext& c) {
    TemplateManager& t = *c.templates;

    c.router.add(RouteSpec{.method = "POST",
                           .pattern = "/v1/templates",
                           .summary = "Create a named template: an image and shape booted once (setup lines run in "
                                      "order) and snapshotted, or an existing snapshot; 202 while it is built",
                           .success = 202,
                           .errors = {"bad_json", "invalid_field", "unknown_field", "out_of_range", "invalid_value",
                                      "shape_mismatch", "snapshot_not_found", "wrong_state", "template_exists",
                                      "disk_full"},
                           .request_schema = "CreateTemplate",
                           .response_schema = "Template"},
                 [&t](http::Request& req) { return json_response(202, template_json(t.create(parse_new_template(req.body)))); });

    c.router.add(RouteSpec{.method = "GET",
                           .pattern = "/v1/templates",
                           .summary = "Every template by name, the implicit ones (auto:IMAGE:CPUSxMiB) too",
                           .errors = {},
                           .response_schema = "TemplateList"},
                 [&t](http::Request&) {
                     json list = json::array();
                     for (const auto& r : t.list()) list.push_back(template_json(r));
                     return json_response(200, json{{"templates", list}});
                 });

    c.router.add(RouteSpec{.method = "GET",
                           .pattern = "/v1/templates/{name}",
                           .summary = "A template: its state (building, ready, failed and why), image, shape, uses",
                           .errors = {"template_not_found"},
                           .worker = false,
                           .response_schema = "Template"},
                 [&t](http::Request& req) { return json_response(200, template_json(t.get(req.params["name"]))); });

    c.router.add(RouteSpec{.method = "DELETE",
                           .pattern = "/v1/templates/{name}",
                           .summary = "Delete a template; 409 template_in_use while sandboxes made from it exist, "
                                      "unless force=true (its files stay until they are gone)",
                           .success = 204,
                           .errors = {"template_not_found", "wrong_state", "template_in_use", "invalid_field"},
                           .query = {{"force", "boolean", false, "delete even if sandboxes were made from it"}}},
                 [&t](http::Request& req) {
                     t.remove(req.params["name"], query_bool(req, "force").value_or(false));
                     return no_content();
                 });
}

}  // namespace nanovm::daemon
