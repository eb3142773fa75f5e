// Background commands: start (POST /v1/sandboxes/{id}/commands: the id back at once),
// list, get, their output (buffered, then with follow the live output), wait, stdin,
// kill (routes.hpp; the manager's side is sandbox/manager_commands.cpp).
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
using agent::proto::JobStream;

json command_json(const CommandInfo& c) {
    const agent::JobInfo& j = c.job;
    const bool ended = !j.running;
    return json{{"id", c.id},
                {"sandbox_id", c.sandbox_id},
                {"state", ended ? "exited" : "running"},
                {"cmd", j.shell && !j.argv.empty() ? json(j.argv.front()) : json(nullptr)},
                {"argv", j.shell ? json(nullptr) : json(j.argv)},
                {"exit_code", ended ? json(j.status.shell_code()) : json(nullptr)},
                {"signal", ended && j.status.signaled ? json(j.status.value) : json(nullptr)},
                {"timed_out", ended && j.status.timed_out},
                {"stdin_open", j.stdin_open},
                {"stdout_bytes", j.stdout_bytes},
                {"stderr_bytes", j.stderr_bytes},
                {"started_at", rfc3339(j.started_unix_ms)},
                {"ended_at", c.ended_ms ? json(rfc3339(*c.ended_ms)) : json(nullptr)}};
}

// The exit line that ends a command's output once it has ended.
json exit_line(const CommandInfo& c) {
    json j = command_json(c);
    return json{{"type", "exit"}, {"exit_code", j["exit_code"]}, {"signal", j["signal"]}, {"timed_out", j["timed_out"]}};
}

}  // namespace

void add_command_routes(RouteContext& c) {
    SandboxManager& m = *c.manager;

    c.router.add(RouteSpec{.method = "POST",
                           .pattern = "/v1/sandboxes/{id}/commands",
                           .summary = "Start a background command (a shell line or an argv): its id at once; it runs on "
                                      "when the client or the daemon goes away",
                           .success = 201,
                           .errors = guest_errors({"bad_json", "invalid_field", "unknown_field", "out_of_range", "invalid_path",
                                           "invalid_value", "over_capacity"}),
                           .body_limit = 20u << 20,
                           .request_schema = "StartCommand",
                           .response_schema = "Command"},
                 [&m](http::Request& req) {
                     const JsonBody b(req.body, {"cmd", "argv", "env", "cwd", "user", "stdin", "timeout_s"});
                     return json_response(201, command_json(m.start_command(req.params["id"], parse_command(b))));
                 });

    c.router.add(RouteSpec{.method = "GET",
                           .pattern = "/v1/sandboxes/{id}/commands",
                           .summary = "A sandbox's background commands, running and ended (the guest keeps the last 16)",
                           .errors = guest_errors(),
                           .response_schema = "CommandList"},
                 [&m](http::Request& req) {
                     json list = json::array();
                     for (const auto& cmd : m.list_commands(req.params["id"])) list.push_back(command_json(cmd));
                     return json_response(200, json{{"commands", list}});
                 });

    c.router.add(RouteSpec{.method = "GET",
                           .pattern = "/v1/sandboxes/{id}/commands/{cid}",
                           .summary = "A background command: running or exited, its exit code",
                           .errors = guest_errors({"command_not_found"}),
                           .response_schema = "Command"},
                 [&m](http::Request& req) {
                     return json_response(200, command_json(m.get_command(req.params["id"], req.params["cid"])));
                 });

    c.router.add(
        RouteSpec{.method = "GET",
                  .pattern = "/v1/sandboxes/{id}/commands/{cid}/output",
                  .summary = "A background command's output as NDJSON: what is buffered, then with follow=true the "
                             "live output and an exit line once it ends",
                  .errors = guest_errors({"invalid_field", "invalid_value", "command_not_found"}),
                  .response_schema = "ndjson",
                  .query = {{"follow", "boolean", false, "then the live output until the command ends (default false)"},
                            {"output_encoding", "string", false, "utf8 (default) or base64"}}},
        [&m](http::Request& req) {
            const bool follow = query_bool(req, "follow").value_or(false);
            OutputEncoding encoding = OutputEncoding::utf8;
            if (auto it = req.query.find("output_encoding"); it != req.query.end()) {
                if (it->second == "base64")
                    encoding = OutputEncoding::base64;
                else if (it->second != "utf8")
                    throw ApiError("invalid_value", "output_encoding must be utf8 or base64");
            }
            const std::string id = req.params["id"], cid = req.params["cid"];
            m.get_command(id, cid);  // 404 and 409 before the stream starts
            http::Response r;
            r.content_type = "application/x-ndjson";
            r.stream = [&m, id, cid, follow, encoding](http::StreamSink& sink) {
                OutputLines lines(sink, encoding);
                uint64_t next[2] = {0, 0};  // the next offset expected: stdout, stderr
                try {
                    const CommandInfo end = m.command_output(
                        id, cid, follow, [&](JobStream stream, uint64_t offset, std::string_view data) {
                            const int s = stream == JobStream::kStderr;
                            // Bytes the guest no longer keeps (past its buffer): say how many.
                            if (offset > next[s] &&
                                !lines.line(json{{"type", "dropped"}, {"stream", s ? "stderr" : "stdout"},
                                                 {"bytes", offset - next[s]}}))
                                return false;
                            next[s] = offset + data.size();
                            return lines.data(s, data);
                        },
                        [&sink] { return sink.client_gone(); });
                    lines.finish();
                    if (!end.job.running && end.job.id != 0) lines.line(exit_line(end));
                } catch (const ApiError& e) {
                    lines.line(json{{"type", "error"}, {"error", {{"code", e.code()}, {"message", e.what()}}}});
                }
            };
            return r;
        });

    c.router.add(RouteSpec{.method = "POST",
                           .pattern = "/v1/sandboxes/{id}/commands/{cid}/wait",
                           .summary = "Wait up to timeout_s (default 60) for a background command to end; answers it "
                                      "either way",
                           .errors = guest_errors({"bad_json", "invalid_field", "unknown_field", "out_of_range",
                                           "command_not_found"}),
                           .request_schema = "WaitCommand",
                           .response_schema = "Command"},
                 [&m](http::Request& req) {
                     const JsonBody b(req.body, {"timeout_s"});
                     const std::chrono::seconds timeout(b.integer("timeout_s", 0, 3600).value_or(60));
                     return json_response(200, command_json(m.wait_command(req.params["id"], req.params["cid"], timeout)));
                 });

    c.router.add(RouteSpec{.method = "POST",
                           .pattern = "/v1/sandboxes/{id}/commands/{cid}/stdin",
                           .summary = "Feed a background command's stdin with the body's bytes; eof=true closes it after",
                           .success = 204,
                           .errors = guest_errors({"invalid_field", "command_not_found"}),
                           .body_limit = 16u << 20,
                           .request_schema = "binary",
                           .query = {{"eof", "boolean", false, "close stdin after the bytes (default false)"}}},
                 [&m](http::Request& req) {
                     const bool eof = query_bool(req, "eof").value_or(false);
                     m.command_stdin(req.params["id"], req.params["cid"], req.body, eof);
                     return no_content();
                 });

    c.router.add(RouteSpec{.method = "POST",
                           .pattern = "/v1/sandboxes/{id}/commands/{cid}/kill",
                           .summary = "Send a signal (default 9, SIGKILL) to a background command's process group",
                           .errors = guest_errors({"bad_json", "invalid_field", "unknown_field", "out_of_range",
                                           "command_not_found"}),
                           .request_schema = "KillCommand",
                           .response_schema = "Command"},
                 [&m](http::Request& req) {
                     const JsonBody b(req.body, {"signal"});
                     const int signal = static_cast<int>(b.integer("signal", 1, 64).value_or(9));
                     return json_response(200, command_json(m.kill_command(req.params["id"], req.params["cid"], signal)));
                 });
}

}  // namespace nanovm::daemon
