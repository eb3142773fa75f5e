// POST /v1/sandboxes/{id}/exec: a command's whole result, or its output streamed as
// NDJSON then its exit (routes.hpp).
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

// "1000", "1000:1000" or an integer: the uid (and gid).
void parse_user(const json& v, agent::Command& c) {
    if (v.is_null()) return;
    if (v.is_number_integer()) {
        if (v.get<int64_t>() < 0 || v.get<int64_t>() > 0xfffffffe) throw ApiError("out_of_range", "\"user\" must be a uid from 0 to 4294967294");
        c.uid = static_cast<uint32_t>(v.get<int64_t>());
        return;
    }
    if (!v.is_string()) throw ApiError("invalid_field", "\"user\" must be a uid (integer) or \"uid:gid\"");
    const std::string text = v.get<std::string>();
    const auto number = [&](const std::string& part) -> uint32_t {
        if (part.empty() || part.size() > 10 || part.find_first_not_of("0123456789") != std::string::npos ||
            std::stoull(part) > 0xfffffffeULL)
            throw ApiError("invalid_field", fmt::format("\"user\" \"{}\": want uid or uid:gid (numbers)", text.substr(0, 32)));
        return static_cast<uint32_t>(std::stoull(part));
    };
    const size_t colon = text.find(':');
    c.uid = number(text.substr(0, colon));
    if (colon != std::string::npos) c.gid = number(text.substr(colon + 1));
}

}  // namespace

agent::Command parse_command(const JsonBody& b) {
    agent::Command c;
    const auto cmd = b.string("cmd", 128 * 1024);
    const auto argv = b.strings("argv", 4096, 128 * 1024);
    if (cmd.has_value() == argv.has_value()) throw ApiError("invalid_field", "give \"cmd\" (a shell line) or \"argv\", one of them");
    if (cmd) {
        if (cmd->empty()) throw ApiError("invalid_field", "\"cmd\" is empty");
        c.shell = *cmd;
    } else {
        if (argv->empty() || argv->front().empty()) throw ApiError("invalid_field", "\"argv\" needs a program");
        c.argv = *argv;
    }
    if (auto env = b.environment("env")) c.env = std::move(*env);
    if (auto cwd = b.path_string("cwd")) {
        check_guest_path(*cwd);
        c.cwd = *cwd;
    }
    parse_user(b.raw("user"), c);
    if (auto in = b.string("stdin", 16u << 20)) c.stdin_data = *in;
    if (auto t = b.integer("timeout_s", 0, 86400)) c.timeout = std::chrono::seconds(*t);
    // Each part has its own bound; together they must fit the agent's one request.
    if (const size_t bytes = agent::exec_request_bytes(c); bytes > agent::proto::kMaxPayload)
        throw ApiError("out_of_range", fmt::format("\"cmd\" or \"argv\", \"env\" and \"cwd\" take {} bytes together; at "
                                                   "most {} (the guest agent's one request)",
                                                   bytes, agent::proto::kMaxPayload));
    return c;
}

void add_exec_routes(RouteContext& c) {
    SandboxManager& m = *c.manager;
    c.router.add(
        RouteSpec{.method = "POST",
                  .pattern = "/v1/sandboxes/{id}/exec",
                  .summary = "Run a command (a shell line or an argv): its whole result, or with stream: true its output "
                             "as NDJSON lines then an exit line; timeout_s kills it in the guest",
                  .errors = {"sandbox_not_found", "bad_json", "invalid_field", "unknown_field", "out_of_range",
                             "invalid_value", "invalid_path", "sandbox_paused", "sandbox_archived", "wrong_state",
                             "vm_error"},
                  .body_limit = 20u << 20,
                  .request_schema = "Exec",
                  .response_schema = "ExecResult"},
        [&m](http::Request& req) {
            const JsonBody b(req.body, {"cmd", "argv", "env", "cwd", "user", "stdin", "timeout_s", "stream",
                                        "output_encoding"});
            ExecRequest request{parse_command(b)};
            const std::string id = req.params["id"];
            return exec_answer(
                b.boolean("stream").value_or(false), output_encoding(b), [&m, id] { m.get_usable(id); },
                [&m, id, request = std::move(request)](const ExecSinks* sinks) { return m.exec(id, request, sinks); });
        });
}

}  // namespace nanovm::daemon
