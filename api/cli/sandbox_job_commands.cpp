// `nanovm sandbox session|command ...` (sandbox_job_commands.hpp).
#include "api/cli/sandbox_job_commands.hpp"

#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <iterator>

#include <fmt/format.h>

#include "api/cli/exec_stream.hpp"
#include "api/cli/ndjson_output.hpp"
#include "vmm/log.hpp"

namespace nanovm::cli {

namespace {

using nlohmann::json;

std::string sandbox_path(client::ApiClient& api, const SandboxOptions& o) {
    return cli::sandbox_path(resolve_id(api, "sandbox", o.id));
}

std::string command_path(client::ApiClient& api, const SandboxOptions& o) {
    return sandbox_path(api, o) + "/commands/" + client::url_encode_segment(o.command_id);
}

// One command's row: id, state, exit code, start, the command.
std::vector<std::string> command_row(const json& c) {
    const std::string what = c["cmd"].is_string() ? c["cmd"].get<std::string>() : [&] {
        std::string words;
        for (const json& w : c["argv"]) words += (words.empty() ? "" : " ") + w.get<std::string>();
        return words;
    }();
    return {cell(c["id"]), cell(c["state"]), cell(c["exit_code"]), cell(c["started_at"]), what.substr(0, 60)};
}

// The exit status of a Command answer, as sandbox exec's (kExecHelp).
int command_status(const json& c) {
    if (c.value("state", "") != "exited") {
        log_line(fmt::format("command {} is still running", cell(c["id"])));
        return kExecTimedOut;
    }
    return c["exit_code"].is_number_integer() ? c["exit_code"].get<int>() : kExecNanovmError;
}

int session_command(client::ApiClient& api, const SandboxCommands& c, const SandboxOptions& o) {
    const std::string base = sandbox_path(api, o) + "/sessions";
    if (*c.session_create) {
        json body = json::object();
        if (!o.cwd.empty()) body["cwd"] = o.cwd;
        if (!o.env.empty()) body["env"] = labels_json(o.env, "--env");
        const json s = api.post(base, body);
        if (o.client.json)
            print_json(s);
        else
            std::printf("%s\n", s["id"].get<std::string>().c_str());
        return kOk;
    }
    if (*c.session_ls) {
        const json list = api.get(base).at("sessions");
        if (o.client.json) {
            print_json(list);
            return kOk;
        }
        std::vector<std::vector<std::string>> rows;
        for (const json& s : list) rows.push_back({cell(s["id"]), cell(s["created_at"])});
        print_table({"ID", "CREATED"}, rows);
        return kOk;
    }
    api.remove(base + "/" + client::url_encode_segment(resolve_id(api, "session", o.session, base)));
    return kOk;
}

int command_command(client::ApiClient& api, const SandboxCommands& c, const SandboxOptions& o) {
    if (*c.command_ls) {
        const json list = api.get(sandbox_path(api, o) + "/commands").at("commands");
        if (o.client.json) {
            print_json(list);
            return kOk;
        }
        std::vector<std::vector<std::string>> rows;
        for (const json& cmd : list) rows.push_back(command_row(cmd));
        print_table({"ID", "STATE", "EXIT", "STARTED", "COMMAND"}, rows);
        return kOk;
    }
    const std::string path = command_path(api, o);
    if (*c.command_logs) {
        // Bytes exactly (base64 on the wire); with -f until the end, then its status.
        NdjsonOutput output(/*base64=*/true);
        const client::Response r =
            api.http().request("GET", path + "/output?output_encoding=base64&follow=" + (o.follow ? "true" : "false"),
                               {}, [&](std::string_view piece) { output.feed(piece); });
        client::throw_if_error(r);
        return o.follow || output.exited() ? output.status("command " + o.command_id, std::nullopt) : kOk;
    }
    if (*c.command_stdin) {
        client::RequestBody rb;
        rb.content_type = "application/octet-stream";
        rb.data = std::string(std::istreambuf_iterator<char>(std::cin), {});
        client::throw_if_error(api.http().request("POST", path + "/stdin" + (o.eof ? "?eof=true" : ""), rb));
        return kOk;
    }
    json answer;
    if (*c.command_get) answer = api.get(path);
    if (*c.command_kill) answer = api.post(path + "/kill", json{{"signal", o.signal}});
    if (*c.command_wait) {
        Progress progress("waiting for command " + o.command_id);
        answer = api.post(path + "/wait", json{{"timeout_s", o.timeout_s.value_or(3600)}});
    }
    if (o.client.json)
        print_json(answer);
    else if (!*c.command_wait)
        print_fields(answer);
    return *c.command_wait ? command_status(answer) : kOk;
}

}  // namespace

void add_sandbox_job_commands(SandboxCommands& c, SandboxOptions& o) {
    const auto id_arg = [&](CLI::App* cmd) { cmd->add_option("id", o.id, "Sandbox id")->required(); };
    const auto command_arg = [&](CLI::App* cmd) {
        id_arg(cmd);
        cmd->add_option("command_id", o.command_id, "Command id (from exec --background or command ls)")->required();
    };

    c.session = c.group->add_subcommand("session", "A sandbox's sessions: shells whose cwd and variables carry over "
                                                   "(run in one with exec --session)");
    c.session->require_subcommand(1);
    c.session_create = c.session->add_subcommand("create", "Start a session; print its id");
    id_arg(c.session_create);
    c.session_create->add_option("--cwd", o.cwd, "Its first working directory [default: /]")->type_name("DIR");
    c.session_create->add_option("-e,--env", o.env, "Set KEY=VALUE (repeatable)")->type_name("KEY=VALUE");
    c.session_ls = c.session->add_subcommand("ls", "The sandbox's sessions");
    id_arg(c.session_ls);
    c.session_rm = c.session->add_subcommand("rm", "End a session (its shell is killed)");
    id_arg(c.session_rm);
    c.session_rm->add_option("session", o.session, "Session id")->required();

    c.command = c.group->add_subcommand("command", "A sandbox's background commands (started with exec --background)");
    c.command->require_subcommand(1);
    c.command_ls = c.command->add_subcommand("ls", "The sandbox's background commands, running and ended");
    id_arg(c.command_ls);
    c.command_get = c.command->add_subcommand("get", "One background command: state, exit code, times");
    command_arg(c.command_get);
    c.command_logs = c.command->add_subcommand("logs", "A background command's output (the guest keeps the last "
                                                       "1 MiB of each stream)");
    command_arg(c.command_logs);
    c.command_logs->add_flag("-f,--follow", o.follow, "Follow it until the command ends; exit with its status");
    c.command_wait = c.command->add_subcommand("wait", "Wait for a background command to end; exit with its status "
                                                       "(124 if it still runs at --timeout)");
    command_arg(c.command_wait);
    c.command_wait->add_option("--timeout", o.timeout_s, "Wait at most S seconds [default: 3600]")->type_name("S");
    c.command_kill = c.command->add_subcommand("kill", "Send a signal to a background command's process group");
    command_arg(c.command_kill);
    c.command_kill->add_option("--signal", o.signal, "Signal number (1 to 64)")->type_name("N")->capture_default_str();
    c.command_stdin = c.command->add_subcommand("stdin", "Send our stdin (read to its end) to a background command");
    command_arg(c.command_stdin);
    c.command_stdin->add_flag("--eof", o.eof, "Then close its stdin");
}

bool exec_like(const SandboxCommands& c) {
    return (c.command_logs && *c.command_logs) || (c.command_wait && *c.command_wait);
}

std::optional<int> run_sandbox_job_command(const SandboxCommands& c, const SandboxOptions& o,
                                           client::ApiClient& api) {
    if (*c.session) return session_command(api, c, o);
    if (*c.command) return command_command(api, c, o);
    return std::nullopt;
}

}  // namespace nanovm::cli
