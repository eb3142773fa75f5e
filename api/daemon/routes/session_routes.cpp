// Sessions: a shell in the guest whose cwd and exported variables carry over between
// commands: create (POST /v1/sandboxes/{id}/sessions), list, exec in one, delete
// (routes.hpp; the manager's side is sandbox/manager_sessions.cpp).
#include <fmt/format.h>

#include "api/daemon/api_error.hpp"
#include "api/daemon/json_body.hpp"
#include "api/daemon/routes/exec_output.hpp"
#include "api/daemon/routes/resource_json.hpp"
#include "api/daemon/routes/routes.hpp"
#include "api/daemon/sandbox/manager.hpp"

namespace nanovm::daemon {

namespace {

using nlohmann::json;

json session_json(const store::SessionRecord& s) {
    return json{{"id", s.id}, {"sandbox_id", s.sandbox_id}, {"created_at", rfc3339(s.created_ms)}};
}

// Sessions' shells run as root for now (the agent's SESSION_OPEN has no user): a
// `user` is taken only if it says root.
void check_session_user(const json& user) {
    if (user.is_null()) return;
    if (!user.is_number_integer() && !user.is_string())
        throw ApiError("invalid_field", "\"user\" must be a uid (integer) or \"uid:gid\"");
    if (user == 0 || user == "0" || user == "0:0") return;
    throw ApiError("invalid_value", "sessions run as root (uid 0) for now: use exec or commands with \"user\"");
}

}  // namespace

void add_session_routes(RouteContext& c) {
    SandboxManager& m = *c.manager;

    c.router.add(RouteSpec{.method = "POST",
                           .pattern = "/v1/sandboxes/{id}/sessions",
                           .summary = "Start a session: a shell whose cwd and exported variables carry over between "
                                      "its commands",
                           .success = 201,
                           .errors = guest_errors({"bad_json", "invalid_field", "unknown_field", "invalid_path", "invalid_value",
                                           "path_not_found", "permission_denied", "over_capacity"}),
                           .request_schema = "CreateSession",
                           .response_schema = "Session"},
                 [&m](http::Request& req) {
                     const JsonBody b(req.body, {"cwd", "env", "user"});
                     SessionRequest r;
                     if (auto cwd = b.path_string("cwd")) {
                         check_guest_path(*cwd);
                         r.cwd = *cwd;
                     }
                     if (auto env = b.environment("env")) r.env = std::move(*env);
                     check_session_user(b.raw("user"));
                     return json_response(201, session_json(m.create_session(req.params["id"], r)));
                 });

    c.router.add(RouteSpec{.method = "GET",
                           .pattern = "/v1/sandboxes/{id}/sessions",
                           .summary = "A sandbox's sessions, oldest first",
                           .errors = {"sandbox_not_found"},
                           .worker = false,
                           .response_schema = "SessionList"},
                 [&m](http::Request& req) {
                     json list = json::array();
                     for (const auto& s : m.list_sessions(req.params["id"])) list.push_back(session_json(s));
                     return json_response(200, json{{"sessions", list}});
                 });

    c.router.add(RouteSpec{.method = "POST",
                           .pattern = "/v1/sandboxes/{id}/sessions/{sid}/exec",
                           .summary = "Run a shell line in a session (its cwd and variables carry over): the exec "
                                      "result, or with stream: true NDJSON lines then an exit line",
                           .errors = guest_errors({"bad_json", "invalid_field", "unknown_field", "out_of_range", "invalid_value",
                                           "session_not_found"}),
                           .body_limit = 256 * 1024,
                           .request_schema = "SessionExec",
                           .response_schema = "ExecResult"},
                 [&m](http::Request& req) {
                     const JsonBody b(req.body, {"cmd", "timeout_s", "stream", "output_encoding"});
                     const auto cmd = b.string("cmd", 128 * 1024);
                     if (!cmd || cmd->empty()) throw ApiError("invalid_field", "\"cmd\" (a shell line) is required");
                     const std::chrono::seconds timeout(b.integer("timeout_s", 0, 86400).value_or(0));
                     const std::string id = req.params["id"];
                     std::string sid = req.params["sid"];
                     for (char& ch : sid) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
                     return exec_answer(
                         b.boolean("stream").value_or(false), output_encoding(b),
                         [&m, id, sid] {
                             // 404 for an unknown session before the stream starts.
                             bool found = false;
                             for (const auto& s : m.list_sessions(id)) found = found || s.id == sid;
                             if (!found) throw ApiError("session_not_found", "no session has this id in this sandbox");
                             m.get_usable(id);
                         },
                         [&m, id, sid, line = *cmd, timeout](const ExecSinks* sinks) {
                             return m.session_exec(id, sid, line, timeout, sinks);
                         });
                 });

    c.router.add(RouteSpec{.method = "DELETE",
                           .pattern = "/v1/sandboxes/{id}/sessions/{sid}",
                           .summary = "End a session (its shell, and a command it runs, are killed)",
                           .success = 204,
                           .errors = guest_errors({"session_not_found"})},
                 [&m](http::Request& req) {
                     m.remove_session(req.params["id"], req.params["sid"]);
                     return no_content();
                 });
}

}  // namespace nanovm::daemon
