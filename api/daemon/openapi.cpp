// The OpenAPI document (openapi.hpp).
#include "api/daemon/openapi.hpp"

#include <set>

#include "api/daemon/api_error.hpp"
#include "api/daemon/sandbox/transitions.hpp"

namespace nanovm::daemon {

namespace {

using nlohmann::json;

json object(json properties, std::vector<std::string> required = {}) {
    json o{{"type", "object"}, {"additionalProperties", false}, {"properties", std::move(properties)}};
    if (!required.empty()) o["required"] = required;
    return o;
}

json state_names() {
    json names = json::array();
    for (SandboxState s : all_states()) names.push_back(to_string(s));
    return names;
}

json ref(const std::string& name) { return json{{"$ref", "#/components/schemas/" + name}}; }

json schemas() {
    const json str{{"type", "string"}}, integer{{"type", "integer"}}, boolean{{"type", "boolean"}};
    const json nullable_str{{"type", "string"}, {"nullable", true}};
    const json labels{{"type", "object"}, {"additionalProperties", {{"type", "string"}}}};
    const json encoding{{"type", "string"}, {"enum", {"utf8", "base64"}}, {"default", "utf8"}};
    json s;
    s["Error"] = object({{"error", object({{"code", str}, {"message", str}}, {"code", "message"})}}, {"error"});
    s["Health"] = object({{"status", str}, {"version", str}, {"uptime_s", integer}, {"sandboxes", integer}});
    s["Shape"] = object({{"cpus", integer}, {"memory_mb", integer}, {"disable_internet", boolean}});
    s["Sandbox"] = object({{"id", str},
                           {"state", {{"type", "string"}, {"enum", state_names()}}},
                           {"error", nullable_str},
                           {"cpus", integer},
                           {"memory_mb", integer},
                           {"disable_internet", boolean},
                           {"image", nullable_str},
                           {"template", nullable_str},
                           {"snapshot_id", nullable_str},
                           {"parent_id", nullable_str},
                           {"metadata", labels},
                           {"timeout_s", {{"type", "integer"}, {"nullable", true}}},
                           {"end_at", nullable_str},
                           {"autosleep_s", integer},
                           {"on_timeout", {{"type", "string"}, {"enum", {"delete", "archive"}}}},
                           {"created_at", str},
                           {"image_digest", nullable_str},
                           {"progress", {{"type", "object"},
                                         {"nullable", true},
                                         {"properties", {{"phase", str}, {"bytes_done", integer}, {"bytes_total", integer}}}}}});
    s["SandboxList"] = object({{"sandboxes", {{"type", "array"}, {"items", ref("Sandbox")}}}, {"next", nullable_str}});
    s["CreateSandbox"] = object({{"image", str},
                                 {"snapshot_id", str},
                                 {"template", str},
                                 {"cpus", {{"type", "integer"}, {"minimum", 1}, {"maximum", 4}, {"default", 2}}},
                                 {"memory_mb", {{"type", "integer"}, {"minimum", 128}, {"maximum", 8192}, {"default", 1024}}},
                                 {"disable_internet", boolean},
                                 {"metadata", labels},
                                 {"timeout_s", {{"type", "integer"}, {"minimum", 0}, {"maximum", 604800}}},
                                 {"autosleep_s", {{"type", "integer"}, {"minimum", 0}, {"maximum", 604800}}},
                                 {"on_timeout", {{"type", "string"}, {"enum", {"delete", "archive"}}}}});
    s["PatchSandbox"] = object({{"timeout_s", {{"type", "integer"}, {"nullable", true}}},
                                {"autosleep_s", {{"type", "integer"}, {"minimum", 0}, {"maximum", 604800}}},
                                {"metadata", labels}});
    s["Exec"] = object({{"cmd", str},
                        {"argv", {{"type", "array"}, {"items", str}}},
                        {"env", labels},
                        {"cwd", str},
                        {"user", {{"oneOf", {integer, str}}}},
                        {"stdin", str},
                        {"timeout_s", {{"type", "integer"}, {"minimum", 0}, {"maximum", 86400}}},
                        {"stream", boolean},
                        {"output_encoding", encoding}});
    s["ExecResult"] = object({{"stdout", str},
                              {"stderr", str},
                              {"exit_code", integer},
                              {"signal", {{"type", "integer"}, {"nullable", true}}},
                              {"timed_out", boolean},
                              {"output_truncated", boolean},
                              {"duration_ms", {{"type", "number"}}}});
    s["CreateSession"] = object({{"cwd", str}, {"env", labels}, {"user", {{"oneOf", {integer, str}}}}});
    s["Session"] = object({{"id", str}, {"sandbox_id", str}, {"created_at", str}});
    s["SessionList"] = object({{"sessions", {{"type", "array"}, {"items", ref("Session")}}}});
    s["SessionExec"] = object({{"cmd", str},
                               {"timeout_s", {{"type", "integer"}, {"minimum", 0}, {"maximum", 86400}}},
                               {"stream", boolean},
                               {"output_encoding", encoding}},
                              {"cmd"});
    s["StartCommand"] = object({{"cmd", str},
                                {"argv", {{"type", "array"}, {"items", str}}},
                                {"env", labels},
                                {"cwd", str},
                                {"user", {{"oneOf", {integer, str}}}},
                                {"stdin", str},
                                {"timeout_s", {{"type", "integer"}, {"minimum", 0}, {"maximum", 86400}}}});
    const json nullable_int{{"type", "integer"}, {"nullable", true}};
    s["Command"] = object({{"id", str},
                           {"sandbox_id", str},
                           {"state", {{"type", "string"}, {"enum", {"running", "exited"}}}},
                           {"cmd", nullable_str},
                           {"argv", {{"type", "array"}, {"items", str}, {"nullable", true}}},
                           {"exit_code", nullable_int},
                           {"signal", nullable_int},
                           {"timed_out", boolean},
                           {"stdin_open", boolean},
                           {"stdout_bytes", integer},
                           {"stderr_bytes", integer},
                           {"started_at", str},
                           {"ended_at", nullable_str}});
    s["CommandList"] = object({{"commands", {{"type", "array"}, {"items", ref("Command")}}}});
    s["WaitCommand"] = object({{"timeout_s", {{"type", "integer"}, {"minimum", 0}, {"maximum", 3600}, {"default", 60}}}});
    s["KillCommand"] = object({{"signal", {{"type", "integer"}, {"minimum", 1}, {"maximum", 64}, {"default", 9}}}});
    s["FileInfo"] = object({{"path", str}, {"name", str}, {"type", str}, {"size", integer}, {"mode", integer},
                            {"mtime", str}});
    s["FileList"] = object({{"path", str}, {"entries", {{"type", "array"}, {"items", ref("FileInfo")}}}});
    s["Mkdir"] = object({{"path", str}, {"parents", boolean}}, {"path"});
    s["CreateSnapshot"] = object({{"wait_durable", boolean}, {"leave_paused", boolean}});
    s["Snapshot"] = object({{"id", str},
                            {"sandbox_id", nullable_str},
                            {"created_at", str},
                            {"state", {{"type", "string"}, {"enum", {"saving", "ready", "error"}}}},
                            {"durable", boolean},
                            {"size_bytes", integer},
                            {"cpus", integer},
                            {"memory_mb", integer},
                            {"disable_internet", boolean},
                            {"image_digest", nullable_str},
                            {"error", nullable_str}});
    s["SnapshotList"] = object({{"snapshots", {{"type", "array"}, {"items", ref("Snapshot")}}}, {"next", nullable_str}});
    s["WaitDurable"] = object({{"timeout_s", {{"type", "integer"}, {"minimum", 0}, {"maximum", 3600}}}});
    s["Restore"] = object({{"metadata", labels}, {"timeout_s", integer}});
    s["ArchiveRequest"] = object({{"wait", {{"type", "boolean"}, {"default", true}}}});
    s["Fork"] = object({{"n", {{"type", "integer"}, {"minimum", 1}, {"maximum", 4}, {"default", 1}}}});
    s["ForkResult"] = object(
        {{"children", {{"type", "array"}, {"items", object({{"sandbox", ref("Sandbox")}, {"error", ref("Error")}})}}}});
    s["SandboxMetrics"] = object({{"cpu_time_ms", {{"type", "number"}}},
                                  {"vmm_rss_bytes", integer},
                                  {"disk_bytes", integer},
                                  {"vmm_running", boolean},
                                  {"state", str}});
    // pause, resume, sleep, reboot: no fields (an empty body or {}; anything else is
    // bad_json or unknown_field).
    s["Empty"] = object(json::object());
    s["CreateTemplate"] = object({{"name", str},
                                  {"image", str},
                                  {"cpus", {{"type", "integer"}, {"minimum", 1}, {"maximum", 4}, {"default", 2}}},
                                  {"memory_mb", {{"type", "integer"}, {"minimum", 128}, {"maximum", 8192}, {"default", 1024}}},
                                  {"snapshot_id", str},
                                  {"setup", {{"type", "array"}, {"items", str}, {"maxItems", 64}}}},
                                 {"name"});
    s["Template"] = object({{"name", str},
                            {"state", {{"type", "string"}, {"enum", {"building", "ready", "failed"}}}},
                            {"error", nullable_str},
                            {"image", nullable_str},
                            {"image_digest", nullable_str},
                            {"cpus", integer},
                            {"memory_mb", integer},
                            {"snapshot_id", nullable_str},
                            {"setup", {{"type", "array"}, {"items", str}}},
                            {"implicit", boolean},
                            {"uses", integer},
                            {"created_at", str},
                            {"last_used_at", nullable_str}});
    s["TemplateList"] = object({{"templates", {{"type", "array"}, {"items", ref("Template")}}}});
    return s;
}

json response_for(const std::string& schema, const std::string& description) {
    if (schema.empty()) return json{{"description", description}};
    if (schema == "binary")
        return json{{"description", description},
                    {"content", {{"application/octet-stream", {{"schema", {{"type", "string"}, {"format", "binary"}}}}}}}};
    if (schema == "ndjson")
        return json{{"description", description},
                    {"content", {{"application/x-ndjson", {{"schema", {{"type", "string"}}}}}}}};
    if (schema == "text")
        return json{{"description", description}, {"content", {{"text/plain", {{"schema", {{"type", "string"}}}}}}}};
    return json{{"description", description}, {"content", {{"application/json", {{"schema", ref(schema)}}}}}};
}

}  // namespace

json transitions_document() {
    json ops = json::array();
    for (const Transition& t : transition_table()) {
        json cells = json::object();
        for (SandboxState s : all_states()) {
            if (const auto r = refusal(t.op, s))
                cells[std::string(to_string(s))] = json{{"allowed", false}, {"code", r->code}, {"message", r->message}};
            else
                cells[std::string(to_string(s))] = json{{"allowed", true}, {"no_op", no_op(t.op, s)}};
        }
        const auto name = [](const std::optional<SandboxState>& s) { return s ? json(to_string(*s)) : json(nullptr); };
        ops.push_back(json{{"op", to_string(t.op)},
                           {"by_daemon", t.by_daemon},
                           {"during", name(t.during)},
                           {"to", name(t.to)},
                           {"states", cells}});
    }
    return json{{"states", state_names()}, {"ops", ops}};
}

json openapi_document(const std::vector<RouteSpec>& routes) {
    json paths = json::object();
    for (const RouteSpec& r : routes) {
        json op{{"summary", r.summary}, {"operationId", r.method + " " + r.pattern}};
        json parameters = json::array();
        size_t pos = 0;
        while ((pos = r.pattern.find('{', pos)) != std::string::npos) {
            const size_t end = r.pattern.find('}', pos);
            const std::string name = r.pattern.substr(pos + 1, end - pos - 1);
            // Ids are UUIDs; a template is named, a background command numbered (the guest's job).
            json schema{{"type", "string"}};
            if (name != "name" && name != "cid") schema["format"] = "uuid";
            parameters.push_back(json{{"name", name}, {"in", "path"}, {"required", true}, {"schema", schema}});
            pos = end;
        }
        for (const QueryParam& q : r.query)
            parameters.push_back(json{{"name", q.name},
                                      {"in", "query"},
                                      {"required", q.required},
                                      {"description", q.description},
                                      {"schema", {{"type", q.type}}}});
        if (!parameters.empty()) op["parameters"] = parameters;
        if (r.request_schema == "binary")
            op["requestBody"] = json{{"required", true},
                                     {"content", {{"application/octet-stream", {{"schema", {{"type", "string"}, {"format", "binary"}}}}}}}};
        else if (!r.request_schema.empty())
            op["requestBody"] = json{{"content", {{"application/json", {{"schema", ref(r.request_schema)}}}}}};
        if (!r.request_schema.empty()) {
            // The body's limit (413 beyond), and the daemon option that sets it if any.
            op["x-nanovm-body-limit"] = r.body_limit;
            const size_t flag = r.body_too_large_hint.find("--");
            if (flag != std::string::npos) {
                const size_t end = r.body_too_large_hint.find_first_of(" )", flag);
                op["x-nanovm-body-limit-option"] = r.body_too_large_hint.substr(flag, end == std::string::npos ? end : end - flag);
            }
        }
        json responses;
        responses[std::to_string(r.success)] = response_for(r.response_schema, "success");
        std::set<std::string> codes(r.errors.begin(), r.errors.end());
        codes.insert(common_errors().begin(), common_errors().end());
        std::map<int, std::vector<std::string>> by_status;
        for (const std::string& code : codes) by_status[error_kind(code).status].push_back(code);
        for (const auto& [status, list] : by_status) {
            std::string text;
            for (const std::string& c : list) text += (text.empty() ? "" : ", ") + c;
            json resp = response_for("Error", text);
            resp["x-nanovm-codes"] = list;
            responses[std::to_string(status)] = resp;
        }
        op["responses"] = responses;
        std::string method = r.method;
        for (char& c : method) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        paths[r.pattern][method] = op;
    }
    json errors = json::array();
    for (const ErrorKind& k : error_catalogue())
        errors.push_back(json{{"code", k.code}, {"status", k.status}, {"description", k.description}});
    return json{{"openapi", "3.0.3"},
                {"info", {{"title", "nanovmd"}, {"version", "1"}, {"description", "The nanovm sandbox service (docs/api.md)."}}},
                {"paths", paths},
                {"components", {{"schemas", schemas()}}},
                {"x-nanovm-errors", errors},
                {"x-nanovm-transitions", transitions_document()}};
}

}  // namespace nanovm::daemon
