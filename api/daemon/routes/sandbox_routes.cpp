// /v1/sandboxes: create, list, get, patch, delete, pause, resume, fork, metrics, logs
// (routes.hpp).
#include <fmt/format.h>

#include "api/daemon/api_error.hpp"
#include "api/daemon/json_body.hpp"
#include "api/daemon/routes/resource_json.hpp"
#include "api/daemon/routes/routes.hpp"
#include "api/daemon/sandbox/manager.hpp"
#include "api/daemon/template/template_manager.hpp"

namespace nanovm::daemon {

namespace {

using nlohmann::json;

constexpr int64_t kMaxTimeoutS = 7 * 86400;

CreateRequest parse_create(const std::string& body) {
    const JsonBody b(body, {"image", "snapshot_id", "template", "cpus", "memory_mb", "disable_internet", "metadata",
                            "timeout_s", "autosleep_s", "on_timeout"});
    CreateRequest r;
    if (auto v = b.string("image", 64)) r.image = *v;
    if (auto v = b.string("snapshot_id", 64)) r.snapshot_id = *v;
    if (auto v = b.string("template", 128)) r.template_name = *v;
    if (b.has("image") + b.has("snapshot_id") + b.has("template") > 1)
        throw ApiError("invalid_field", "give one of \"image\", \"snapshot_id\" and \"template\"");
    if (auto v = b.integer("cpus", 1, 4)) r.cpus = static_cast<uint32_t>(*v);
    if (auto v = b.integer("memory_mb", 128, 8192)) r.memory_mb = static_cast<uint32_t>(*v);
    if (auto v = b.boolean("disable_internet")) r.disable_internet = *v;
    if (auto v = b.labels("metadata")) r.labels = *v;
    if (auto v = b.integer("timeout_s", 0, kMaxTimeoutS)) r.timeout_s = *v;
    if (auto v = b.integer("autosleep_s", 0, kMaxTimeoutS)) r.autosleep_s = *v;
    if (auto v = b.string("on_timeout", 16)) {
        if (*v != "delete" && *v != "archive")
            throw ApiError("invalid_value", fmt::format("on_timeout \"{}\": \"delete\" or \"archive\"", v->substr(0, 16)));
        r.on_timeout = *v;
    }
    return r;
}

}  // namespace

void add_sandbox_routes(RouteContext& c) {
    SandboxManager& m = *c.manager;
    const std::vector<std::string> id_errors{"sandbox_not_found"};

    c.router.add(RouteSpec{.method = "POST",
                           .pattern = "/v1/sandboxes",
                           .summary = "Create a sandbox from an image name (default, tiny), a template or a snapshot_id, "
                                      "and start it (an image restores its implicit template: 503 template_building "
                                      "with Retry-After while it is built)",
                           .success = 201,
                           .errors = {"bad_json", "invalid_field", "unknown_field", "out_of_range", "invalid_value",
                                      "shape_mismatch", "snapshot_not_found", "template_not_found", "wrong_state",
                                      "template_building", "over_capacity", "vm_error", "disk_full"},
                           .request_schema = "CreateSandbox",
                           .response_schema = "Sandbox"},
                 [&m](http::Request& req) {
                     try {
                         return json_response(201, sandbox_json(m.create(parse_create(req.body))));
                     } catch (const TemplateBuilding& e) {
                         http::Response r = error_response(e);
                         r.headers.emplace_back("Retry-After", std::to_string(e.retry_after_s()));
                         return r;
                     }
                 });

    c.router.add(RouteSpec{.method = "GET",
                           .pattern = "/v1/sandboxes",
                           .summary = "List sandboxes by id, filtered by state and metadata labels, a page at a time",
                           .errors = {"invalid_field", "out_of_range"},
                           .response_schema = "SandboxList",
                           .query = {{"state", "string", false, "only sandboxes in this state"},
                                     {"metadata.KEY", "string", false, "only sandboxes whose label KEY has this value"},
                                     {"limit", "integer", false, "at most this many (1-1000, default 100)"},
                                     {"after", "string", false, "the page after this id (the previous page's next)"}}},
                 [&m](http::Request& req) {
                     store::SandboxFilter f;
                     if (auto it = req.query.find("state"); it != req.query.end()) {
                         if (!parse_state(it->second))
                             throw ApiError("invalid_field", fmt::format("state \"{}\" is not a sandbox state", it->second.substr(0, 32)));
                         f.state = it->second;
                     }
                     for (const auto& [k, v] : req.query) {
                         if (k.rfind("metadata.", 0) != 0) continue;
                         const std::string key = k.substr(9);
                         if (!valid_label_key(key)) throw ApiError("invalid_field", fmt::format("label key \"{}\"", key.substr(0, 64)));
                         f.labels[key] = v;
                         // A sandbox has at most 64 labels: more filters match nothing,
                         // and thousands would make too large an SQL statement.
                         if (f.labels.size() > 64)
                             throw ApiError("out_of_range", "at most 64 metadata.KEY filters (a sandbox has at most 64 labels)");
                     }
                     f.limit = query_integer(req, "limit", 1, 1000).value_or(100);
                     if (auto it = req.query.find("after"); it != req.query.end()) f.after = it->second;
                     const auto rows = m.list(f);
                     json list = json::array();
                     for (const auto& r : rows) list.push_back(sandbox_json(r, m.progress(r.id)));
                     const bool full = static_cast<int64_t>(rows.size()) == f.limit;
                     return json_response(200, json{{"sandboxes", list}, {"next", full ? json(rows.back().id) : json(nullptr)}});
                 });

    c.router.add(RouteSpec{.method = "GET",
                           .pattern = "/v1/sandboxes/{id}",
                           .summary = "A sandbox: its state, shape, metadata, end_at",
                           .errors = id_errors,
                           .worker = false,
                           .response_schema = "Sandbox"},
                 [&m](http::Request& req) {
                     const store::SandboxRecord r = m.get(req.params["id"]);
                     return json_response(200, sandbox_json(r, m.progress(r.id)));
                 });

    c.router.add(RouteSpec{.method = "PATCH",
                           .pattern = "/v1/sandboxes/{id}",
                           .summary = "Change a sandbox's timeout (end_at = now + timeout_s; null: none), autosleep_s or "
                                      "metadata",
                           .errors = {"sandbox_not_found", "bad_json", "invalid_field", "unknown_field", "out_of_range",
                                      "wrong_state"},
                           .request_schema = "PatchSandbox",
                           .response_schema = "Sandbox"},
                 [&m](http::Request& req) {
                     const JsonBody b(req.body, {"timeout_s", "autosleep_s", "metadata"}, {"timeout_s"});
                     PatchRequest p;
                     if (b.present("timeout_s") && b.raw("timeout_s").is_null()) {
                         p.set_timeout = true;  // explicitly null: no timeout
                     } else if (auto v = b.integer("timeout_s", 0, kMaxTimeoutS)) {
                         p.set_timeout = true;
                         if (*v > 0) p.timeout_s = *v;
                     }
                     p.autosleep_s = b.integer("autosleep_s", 0, kMaxTimeoutS);
                     p.labels = b.labels("metadata");
                     return json_response(200, sandbox_json(m.patch(req.params["id"], p)));
                 });

    c.router.add(RouteSpec{.method = "DELETE",
                           .pattern = "/v1/sandboxes/{id}",
                           .summary = "Stop a sandbox's VM and delete it (its snapshots stay)",
                           .success = 204,
                           .errors = {"sandbox_not_found", "wrong_state"}},
                 [&m](http::Request& req) {
                     m.remove(req.params["id"]);
                     return no_content();
                 });

    c.router.add(RouteSpec{.method = "POST",
                           .pattern = "/v1/sandboxes/{id}/pause",
                           .summary = "Stop a sandbox's vCPUs until resume (exec and files answer 409 meanwhile)",
                           .errors = {"sandbox_not_found", "bad_json", "unknown_field", "wrong_state", "sandbox_archived", "vm_error"},
                           .request_schema = "Empty",
                           .response_schema = "Sandbox"},
                 [&m](http::Request& req) {
                     JsonBody(req.body, {});
                     return json_response(200, sandbox_json(m.pause(req.params["id"])));
                 });

    c.router.add(RouteSpec{.method = "POST",
                           .pattern = "/v1/sandboxes/{id}/resume",
                           .summary = "Let a paused or sleeping sandbox's vCPUs run again",
                           .errors = {"sandbox_not_found", "bad_json", "unknown_field", "wrong_state", "sandbox_archived", "vm_error"},
                           .request_schema = "Empty",
                           .response_schema = "Sandbox"},
                 [&m](http::Request& req) {
                     JsonBody(req.body, {});
                     return json_response(200, sandbox_json(m.resume(req.params["id"])));
                 });

    for (const bool archive : {true, false}) {
        c.router.add(RouteSpec{.method = "POST",
                               .pattern = archive ? "/v1/sandboxes/{id}/archive" : "/v1/sandboxes/{id}/unarchive",
                               .summary = archive ? "Pack a sandbox's memory and disks into the archive store and end its VM"
                                                  : "Restore an archived sandbox under the same id, running",
                               .success = 200,
                               .errors = archive ? std::vector<std::string>{"sandbox_not_found", "bad_json", "invalid_field",
                                                                            "unknown_field", "wrong_state", "vm_error",
                                                                            "disk_full"}
                                                 : std::vector<std::string>{"sandbox_not_found", "bad_json", "invalid_field",
                                                                            "unknown_field", "wrong_state", "over_capacity",
                                                                            "vm_error", "disk_full"},
                               .request_schema = "ArchiveRequest",
                               .response_schema = "Sandbox"},
                     [&m, archive](http::Request& req) {
                         const JsonBody b(req.body, {"wait"});
                         const bool wait = b.boolean("wait").value_or(true);
                         const store::SandboxRecord r =
                             archive ? m.archive(req.params["id"], wait) : m.unarchive(req.params["id"], wait);
                         return json_response(wait ? 200 : 202, sandbox_json(r, m.progress(r.id)));
                     });
    }

    c.router.add(RouteSpec{.method = "POST",
                           .pattern = "/v1/sandboxes/{id}/fork",
                           .summary = "Fork a sandbox into n (1-4) new sandboxes; 200 if at least one was made",
                           .errors = {"sandbox_not_found", "bad_json", "invalid_field", "unknown_field", "out_of_range",
                                      "wrong_state", "sandbox_archived", "over_capacity", "vm_error", "disk_full"},
                           .request_schema = "Fork",
                           .response_schema = "ForkResult"},
                 [&m](http::Request& req) {
                     const JsonBody b(req.body, {"n"});
                     const auto n = static_cast<uint32_t>(b.integer("n", 1, 4).value_or(1));
                     const std::vector<ForkChild> children = m.fork(req.params["id"], n);
                     json list = json::array();
                     const ForkChild* first_error = nullptr;
                     bool any = false;
                     for (const ForkChild& child : children) {
                         if (child.sandbox) {
                             any = true;
                             list.push_back(json{{"sandbox", sandbox_json(*child.sandbox)}, {"error", nullptr}});
                         } else {
                             if (!first_error) first_error = &child;
                             list.push_back(json{{"sandbox", nullptr},
                                                 {"error", {{"code", child.error_code}, {"message", child.error}}}});
                         }
                     }
                     if (!any && first_error) throw ApiError(first_error->error_code, first_error->error);
                     return json_response(200, json{{"children", list}});
                 });

    c.router.add(RouteSpec{.method = "GET",
                           .pattern = "/v1/sandboxes/{id}/metrics",
                           .summary = "Host-side figures of a sandbox (vCPU time, VMM RSS, disk bytes); never wakes it",
                           .errors = id_errors,
                           .worker = false,
                           .response_schema = "SandboxMetrics"},
                 [&m](http::Request& req) {
                     const SandboxMetrics s = m.metrics(req.params["id"]);
                     return json_response(200, json{{"state", s.state},
                                                    {"cpu_time_ms", s.cpu_time_ms},
                                                    {"vmm_rss_bytes", s.vmm_rss_bytes},
                                                    {"disk_bytes", s.disk_bytes},
                                                    {"vmm_running", s.vmm_running}});
                 });

    for (const char* which : {"console", "vmm"}) {
        c.router.add(RouteSpec{.method = "GET",
                               .pattern = fmt::format("/v1/sandboxes/{{id}}/logs/{}", which),
                               .summary = std::string("The end of the sandbox's ") +
                                          (std::string(which) == "console" ? "guest console" : "VMM log"),
                               .errors = {"sandbox_not_found", "invalid_field", "out_of_range"},
                               .worker = false,
                               .response_schema = "text",
                               .query = {{"tail_bytes", "integer", false, "at most this many bytes (default 65536, up to 1 MiB)"}}},
                     [&m, which](http::Request& req) {
                         const auto tail = query_integer(req, "tail_bytes", 1, 1 << 20).value_or(64 * 1024);
                         http::Response r;
                         r.content_type = "text/plain; charset=utf-8";
                         r.body = m.log(req.params["id"], which, static_cast<size_t>(tail));
                         return r;
                     });
    }
}

}  // namespace nanovm::daemon
