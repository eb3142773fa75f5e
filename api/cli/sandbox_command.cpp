// `nanovm sandbox ...` (sandbox_command.hpp).
#include "api/cli/sandbox_command.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <iterator>
#include <iostream>

#include <fmt/format.h>

#include "api/cli/exec_stream.hpp"
#include "api/cli/ndjson_output.hpp"
#include "api/cli/sandbox_job_commands.hpp"
#include "api/cli/sandbox_rest_commands.hpp"
#include "api/cli/run_command.hpp"
#include "api/cli/template_command.hpp"
#include "vmm/fd.hpp"
#include "vmm/log.hpp"
#include "vmm/printable.hpp"

namespace nanovm::cli {

namespace {

using nlohmann::json;


std::string source_of(const json& s) {
    if (s["parent_id"].is_string()) return "fork of " + s["parent_id"].get<std::string>().substr(0, 8);
    if (s["snapshot_id"].is_string()) return "snapshot " + s["snapshot_id"].get<std::string>().substr(0, 8);
    // A named template; an implicit one (auto:IMAGE:CPUSxMiB) is shown by its image.
    if (const auto t = s.find("template"); t != s.end() && t->is_string() && !t->get<std::string>().starts_with("auto:"))
        return "template " + t->get<std::string>();
    return cell(s["image"]);
}

int create(client::ApiClient& api, const SandboxOptions& o) {
    json body = json::object();
    if (!o.image.empty()) body["image"] = o.image;
    if (!o.snapshot_id.empty()) body["snapshot_id"] = resolve_id(api, "snapshot", o.snapshot_id);
    if (!o.template_name.empty()) body["template"] = o.template_name;
    if (o.cpus) body["cpus"] = *o.cpus;
    if (o.memory_mb) body["memory_mb"] = *o.memory_mb;
    if (o.timeout_s) body["timeout_s"] = *o.timeout_s;
    if (o.autosleep_s) body["autosleep_s"] = *o.autosleep_s;
    if (!o.on_timeout.empty()) body["on_timeout"] = o.on_timeout;
    if (o.disable_internet) body["disable_internet"] = true;
    if (!o.labels.empty()) body["metadata"] = labels_json(o.labels, "--label");
    json sandbox;
    {
        Progress progress(o.snapshot_id.empty() ? "creating a sandbox" : "restoring a snapshot into a sandbox");
        sandbox = create_sandbox(api, body);  // waits while its template is built
    }
    if (o.client.json)
        print_json(sandbox);
    else
        std::printf("%s\n", sandbox["id"].get<std::string>().c_str());
    return kOk;
}

int list(client::ApiClient& api, const SandboxOptions& o) {
    std::string target = "/v1/sandboxes";
    std::string query;
    if (!o.state.empty()) query += "&state=" + client::url_encode(o.state);
    const json labels = labels_json(o.labels, "--label");  // kept: items() refers into it
    for (const auto& [k, v] : labels.items())
        query += "&metadata." + client::url_encode(k) + "=" + client::url_encode(v.get<std::string>());
    if (!query.empty()) target += "?" + query.substr(1);
    const json all = list_all(api, target, "sandboxes");
    if (o.client.json) {
        print_json(all);
        return kOk;
    }
    std::vector<std::vector<std::string>> rows;
    for (const json& s : all)
        rows.push_back({cell(s["id"]), cell(s["state"]), cell(s["cpus"]), cell(s["memory_mb"]) + "M", source_of(s),
                        cell(s["created_at"]), cell(s["end_at"]), labels_text(s["metadata"])});
    print_table({"ID", "STATE", "CPUS", "MEMORY", "SOURCE", "CREATED", "END_AT", "LABELS"}, rows);
    return kOk;
}

int get(client::ApiClient& api, const SandboxOptions& o) {
    const json s = api.get(sandbox_path(resolve_id(api, "sandbox", o.id)));
    if (o.client.json)
        print_json(s);
    else
        print_fields(s);
    return kOk;
}

// A session's shell line from exec's words: joined by spaces, as ssh does.
std::string shell_line(const std::vector<std::string>& words) {
    std::string line;
    for (const std::string& w : words) line += (line.empty() ? "" : " ") + w;
    return line;
}

int exec(client::ApiClient& api, const SandboxOptions& o) {
    if (o.argv.empty() || o.argv.front().empty()) throw UsageError("no command: nanovm sandbox exec ID -- CMD ARGS...");
    if (!o.session.empty() && o.background) throw UsageError("--session and --background: one or the other");
    if (!o.session.empty() && (!o.cwd.empty() || !o.env.empty() || !o.user.empty() || o.stdin_data))
        throw UsageError("--session runs in the session's own cwd and environment, as root, without stdin: "
                         "no --cwd, --env, --user or --stdin with it");
    const std::string id = resolve_id(api, "sandbox", o.id);
    // Streamed output comes as base64, so that it reaches our stdout byte for byte.
    const bool stream = !o.client.json && !o.background;
    json body{{"argv", o.argv}};
    std::string target = sandbox_path(id) + "/exec";
    if (!o.session.empty()) {
        body = json{{"cmd", shell_line(o.argv)}};
        target = sandbox_path(id) + "/sessions/" + client::url_encode_segment(resolve_id(api, "session", o.session, sandbox_path(id) + "/sessions")) + "/exec";
    } else if (o.background) {
        target = sandbox_path(id) + "/commands";
    }
    if (!o.background) {
        body["stream"] = stream;
        if (stream) body["output_encoding"] = "base64";
    }
    if (!o.env.empty()) body["env"] = labels_json(o.env, "--env");
    if (!o.cwd.empty()) body["cwd"] = o.cwd;
    if (!o.user.empty()) body["user"] = o.user;
    if (o.timeout_s) body["timeout_s"] = *o.timeout_s;
    if (o.stdin_data) {
        std::string in(std::istreambuf_iterator<char>(std::cin), {});
        // The API takes stdin as a JSON string: UTF-8 text only.
        if (const size_t bad = first_non_utf8(in); bad != std::string_view::npos)
            throw UsageError(fmt::format("-i: stdin is not UTF-8 text (byte {} of {}); the API takes stdin as text: copy "
                                         "binary input in with `nanovm sandbox cp HOST_PATH ID:/GUEST_PATH` and "
                                         "redirect from it",
                                         bad, in.size()));
        body["stdin"] = std::move(in);
    }
    if (o.background) {
        const json command = api.post(target, body);
        if (o.client.json)
            print_json(command);
        else
            std::printf("%s\n", command["id"].get<std::string>().c_str());
        return kOk;
    }
    if (!stream) {
        const json result = api.post(target, body);
        print_json(result);
        if (result.value("timed_out", false)) return kExecTimedOut;
        return result.value("exit_code", kExecNanovmError);
    }
    NdjsonOutput output(/*base64=*/true);
    client::RequestBody rb;
    rb.data = body.dump();
    const client::Response r =
        api.http().request("POST", target, rb, [&](std::string_view piece) { output.feed(piece); });
    client::throw_if_error(r);
    return output.status("sandbox " + id, o.timeout_s);
}

// One side of `sandbox cp`: ID:/GUEST_PATH (ID: a sandbox id or a prefix of one) or a host path.
struct CopySide {
    std::optional<std::string> id;
    std::string path;
};

CopySide copy_side(const std::string& text) {
    if (text.empty()) throw UsageError("cp: an empty path");
    const size_t colon = text.find(':');
    if (colon != std::string::npos && colon > 0 && colon <= 36 &&
        text.find_first_not_of("0123456789abcdef-") >= colon) {
        const std::string path = text.substr(colon + 1);
        if (path.empty() || path.front() != '/')
            throw UsageError(fmt::format("{}: the guest path must be absolute (ID:/path)", text));
        return CopySide{text.substr(0, colon), path};
    }
    return CopySide{std::nullopt, text};
}

std::string basename_of(const std::string& path) {
    const size_t slash = path.rfind('/');
    return slash == std::string::npos ? path : path.substr(slash + 1);
}

bool host_is_directory(const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::string files_target(const std::string& id, const std::string& guest_path, const std::string& extra = "") {
    return sandbox_path(id) + "/files?path=" + client::url_encode(guest_path) + extra;
}

int copy(client::ApiClient& api, const SandboxOptions& o) {
    const CopySide from = copy_side(o.copy_from), to = copy_side(o.copy_to);
    if (from.id.has_value() == to.id.has_value())
        throw UsageError("cp copies between this host and one sandbox: ID:/GUEST_PATH HOST_PATH or HOST_PATH ID:/GUEST_PATH");
    const CopySide& guest = to.id ? to : from;
    const std::string id = resolve_id(api, "sandbox", *guest.id);
    if (to.id) {
        const std::string& host = from.path;
        std::string target = guest.path;
        client::RequestBody rb;
        rb.content_type = "application/octet-stream";
        std::string mode = "644";
        if (host == "-") {
            rb.data = std::string(std::istreambuf_iterator<char>(std::cin), {});
        } else {
            struct stat st {};
            if (::stat(host.c_str(), &st) != 0) throw_errno("stat " + host);
            if (S_ISDIR(st.st_mode)) throw UsageError(fmt::format("{}: is a directory (cp copies one file)", host));
            mode = fmt::format("{:o}", st.st_mode & 0777);
            rb.file = host;
            bool into_dir = target.back() == '/';
            if (!into_dir) {
                try {
                    into_dir = api.get(sandbox_path(id) + "/files/stat?path=" + client::url_encode(target))
                                   .value("type", "") == "directory";
                } catch (const client::ApiError& e) {
                    if (e.status() != 404) throw;  // not there yet: the target is the file itself
                }
            }
            if (into_dir) target = (target.back() == '/' ? target : target + "/") + basename_of(host);
        }
        const client::Response r = api.http().request("PUT", files_target(id, target, "&mode=" + mode), rb);
        client::throw_if_error(r);
        if (o.client.json) std::printf("%s\n", r.body.c_str());
        return kOk;
    }
    std::string target = to.path;
    const std::string source = files_target(id, guest.path);
    if (target == "-") {
        const client::Response r =
            api.http().request("GET", source, {}, [](std::string_view piece) { write_all(STDOUT_FILENO, piece); });
        client::throw_if_error(r);
        return kOk;
    }
    if (host_is_directory(target)) target += "/" + basename_of(guest.path);
    // Written beside the target and renamed: a failed copy leaves no half file.
    const std::string part = target + ".nanovm-part";
    const Fd fd(::open(part.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (!fd) throw_errno("open " + part);
    try {
        const client::Response r =
            api.http().request("GET", source, {}, [&](std::string_view piece) { write_all(fd.get(), piece); });
        client::throw_if_error(r);
        if (::rename(part.c_str(), target.c_str()) != 0) throw_errno("rename " + part + " to " + target);
    } catch (...) {
        ::unlink(part.c_str());
        throw;
    }
    return kOk;
}

int snapshot(client::ApiClient& api, const SandboxOptions& o) {
    const std::string id = resolve_id(api, "sandbox", o.id);
    json snap;
    {
        Progress progress(o.wait_durable ? "snapshotting (until durable)" : "snapshotting");
        snap = api.post(sandbox_path(id) + "/snapshots",
                        json{{"wait_durable", o.wait_durable}, {"leave_paused", o.leave_paused}});
    }
    if (o.client.json)
        print_json(snap);
    else
        std::printf("%s\n", snap["id"].get<std::string>().c_str());
    return kOk;
}

int fork(client::ApiClient& api, const SandboxOptions& o) {
    const std::string id = resolve_id(api, "sandbox", o.id);
    json answer;
    {
        Progress progress(fmt::format("forking into {}", o.fork_count));
        answer = api.post(sandbox_path(id) + "/fork", json{{"n", o.fork_count}});
    }
    if (o.client.json) {
        print_json(answer);
        return kOk;
    }
    size_t i = 0;
    for (const json& child : answer.at("children")) {
        ++i;
        if (child["sandbox"].is_object())
            std::printf("%s\n", child["sandbox"]["id"].get<std::string>().c_str());
        else
            log_line(fmt::format("child {}: {} ({})", i, child["error"].value("message", ""),
                                 child["error"].value("code", "")));
    }
    return kOk;
}

int pause_resume(client::ApiClient& api, const SandboxOptions& o, const char* verb) {
    const json s = api.post(sandbox_path(resolve_id(api, "sandbox", o.id)) + "/" + verb);
    if (o.client.json) print_json(s);
    return kOk;
}

int remove(client::ApiClient& api, const SandboxOptions& o) {
    int status = kOk;
    for (const std::string& text : o.ids) {
        try {
            Progress progress("deleting " + text);
            api.remove(sandbox_path(resolve_id(api, "sandbox", text)));
        } catch (const client::ApiError& e) {
            log_line(fmt::format("{}: {} ({})", text, e.what(), e.code()));
            if (status == kOk) status = exit_status_for(e);
        }
    }
    return status;
}

constexpr const char* kExecHelp =
    "Exit status: the command's own; 128+N if signal N killed it; 124 if --timeout killed it;\n"
    "125 if nanovm failed (bad option, the daemon not running, no such sandbox, the sandbox paused or\n"
    "failed: the message says which); 126 if the command could not run (e.g. EACCES); 127 if it was not\n"
    "found. The command is an argv, not a shell line: use  -- sh -c 'echo $HOME; exit 3'  for one.\n"
    "Stdin goes to the command only with -i (read whole, then sent). Output reaches ours byte for byte.\n"
    "--session SID runs the words, joined by spaces into a shell line (as ssh does), in a session\n"
    "(nanovm sandbox session create): its cd and export hold for the next. --background starts the\n"
    "command and prints its id at once (exit 0): see nanovm sandbox command.";

}  // namespace

std::string sandbox_path(const std::string& id) { return "/v1/sandboxes/" + client::url_encode_segment(id); }

SandboxCommands add_sandbox_commands(CLI::App& app, SandboxOptions& o) {
    SandboxCommands c;
    c.group = app.add_subcommand("sandbox", "nanovmd's sandboxes: create, ls, get, exec, cp, snapshot, fork, pause, "
                                            "resume, sleep, reboot, archive, unarchive, update, logs, metrics, rm, "
                                            "session, command (through the daemon's API)");
    c.group->require_subcommand(1);
    add_daemon_options(c.group, o.client);
    c.group->footer(std::string("IDs may be abbreviated to a unique prefix. The API: docs/api.md.\n\n") + kExitHelp);
    const auto id_arg = [&](CLI::App* cmd) { cmd->add_option("id", o.id, "Sandbox id")->required(); };

    c.create = c.group->add_subcommand("create", "Create a sandbox and start it; print its id once its agent answers");
    c.create->add_option("--image", o.image, "Image name: default or tiny [default: default]")->type_name("NAME");
    c.create->add_option("--snapshot", o.snapshot_id, "Restore this snapshot instead of booting an image")
        ->type_name("ID");
    c.create->add_option("--template", o.template_name, "Restore this template (nanovm template create)")
        ->type_name("NAME");
    c.create->add_option("--cpus", o.cpus, "vCPUs (1 to 4) [default: 2]")->type_name("N");
    c.create->add_option("--memory", o.memory_mb, "Guest RAM in MiB (128 to 8192) [default: 1024]")->type_name("MiB");
    c.create->add_option("--timeout", o.timeout_s, "Delete the sandbox S seconds after creation (0: never)")
        ->type_name("S")
        ->check(CLI::Range(int64_t{0}, kMaxSandboxSeconds).description(""));
    c.create->add_option("--on-timeout", o.on_timeout, "What --timeout does: delete, or archive (nanovm sandbox "
                                                       "archive) [default: delete]")
        ->type_name("delete|archive")
        ->check(CLI::IsMember({"delete", "archive"}));
    c.create->add_option("--autosleep", o.autosleep_s, "Sleep the sandbox once idle for S seconds (0: never; a running command or a busy CPU is not idle) "
                                                       "[default: the daemon's --autosleep]")
        ->type_name("S")
        ->check(CLI::Range(int64_t{0}, kMaxSandboxSeconds).description(""));
    c.create->add_option("-l,--label", o.labels, "A metadata label (repeatable)")->type_name("KEY=VALUE");
    c.create->add_flag("--disable-internet", o.disable_internet, "Recorded (sandboxes have no network yet)");

    c.ls = c.group->add_subcommand("ls", "The sandboxes: id, state, shape, source, times, labels");
    c.ls->add_option("--state", o.state, "Only those in this state (creating, running, paused, sleeping, archived, rebooting, error...)")
        ->type_name("STATE");
    c.ls->add_option("-l,--label", o.labels, "Only those with this label (repeatable: all must match)")
        ->type_name("KEY=VALUE");

    c.get = c.group->add_subcommand("get", "One sandbox: state, shape, source, timeout, labels");
    id_arg(c.get);

    c.exec = c.group->add_subcommand("exec", "Run a command in a sandbox, streaming its output; exit with its status");
    id_arg(c.exec);
    c.exec->add_option("--timeout", o.timeout_s, "Kill the command (in the guest) after S seconds")->type_name("S");
    c.exec->add_option("--cwd", o.cwd, "Working directory in the guest [default: /]")->type_name("DIR");
    c.exec->add_option("-e,--env", o.env, "Set KEY=VALUE (repeatable)")->type_name("KEY=VALUE");
    c.exec->add_option("-u,--user", o.user, "Run as uid or uid:gid")->type_name("UID[:GID]");
    c.exec->add_flag("-i,--stdin", o.stdin_data, "Send our stdin (read to its end first) to the command");
    c.exec->add_option("-s,--session", o.session, "Run in this session (its cwd and variables carry over)")
        ->type_name("SID");
    c.exec->add_flag("-d,--background", o.background, "Start it as a background command; print its id");
    c.exec->add_option("command", o.argv, "The command and its arguments, after --")->required();
    c.exec->footer(kExecHelp);

    c.cp = c.group->add_subcommand("cp", "Copy one file: ID:/GUEST_PATH HOST_PATH, or HOST_PATH ID:/GUEST_PATH "
                                         "(HOST_PATH - : stdin or stdout)");
    c.cp->add_option("source", o.copy_from, "ID:/GUEST_PATH or HOST_PATH")->required();
    c.cp->add_option("target", o.copy_to, "HOST_PATH or ID:/GUEST_PATH (a directory: the file goes inside)")
        ->required();

    c.snapshot = c.group->add_subcommand("snapshot", "Snapshot a sandbox (memory, disk, processes); print the "
                                                     "snapshot's id");
    id_arg(c.snapshot);
    c.snapshot->add_flag("--wait", o.wait_durable, "Answer once the snapshot is saved (durable)");
    c.snapshot->add_flag("--leave-paused", o.leave_paused,
                         "Leave the sandbox sleeping (its next exec or file call wakes it)");

    c.fork = c.group->add_subcommand("fork", "Fork a sandbox into N new ones (memory, files, processes); print "
                                             "their ids");
    id_arg(c.fork);
    c.fork->add_option("-n,--count", o.fork_count, "Children (1 to 4)")->type_name("N")->capture_default_str();

    c.pause = c.group->add_subcommand("pause", "Stop a sandbox's vCPUs (exec and files answer 409 until resume)");
    id_arg(c.pause);
    c.resume = c.group->add_subcommand("resume", "Let a paused or sleeping sandbox run again");
    id_arg(c.resume);
    c.sleep = c.group->add_subcommand("sleep", "Stop a sandbox's vCPUs until its next exec or file call wakes it");
    id_arg(c.sleep);
    c.reboot = c.group->add_subcommand("reboot", "Boot a sandbox's guest cold over its kept disk (processes are lost)");
    id_arg(c.reboot);
    c.rm = c.group->add_subcommand("rm", "Stop and delete sandboxes (their snapshots stay)");
    c.rm->add_option("id", o.ids, "Sandbox ids")->required();
    add_sandbox_rest_commands(c, o);
    add_sandbox_job_commands(c, o);
    return c;
}

int run_sandbox_command(const SandboxCommands& c, const SandboxOptions& o) {
    if (*c.exec || exec_like(c)) {
        // exec keeps 0-124 for the command: nanovm's own failures are 125.
        int status = kExecNanovmError;
        const int rc = run_client_command(o.client, [&] {
            client::ApiClient api(find_daemon(o.client));
            status = *c.exec ? exec(api, o) : run_sandbox_job_command(c, o, api).value_or(kExecNanovmError);
            return kOk;
        });
        return rc == kOk ? status : kExecNanovmError;
    }
    return run_client_command(o.client, [&] {
        client::ApiClient api(find_daemon(o.client));
        if (*c.create) return create(api, o);
        if (*c.ls) return list(api, o);
        if (*c.get) return get(api, o);
        if (*c.cp) return copy(api, o);
        if (*c.snapshot) return snapshot(api, o);
        if (*c.fork) return fork(api, o);
        if (*c.pause) return pause_resume(api, o, "pause");
        if (*c.resume) return pause_resume(api, o, "resume");
        if (*c.sleep) return pause_resume(api, o, "sleep");
        if (*c.reboot) return pause_resume(api, o, "reboot");
        if (*c.rm) return remove(api, o);
        if (const auto status = run_sandbox_rest_command(c, o, api)) return *status;
        if (const auto status = run_sandbox_job_command(c, o, api)) return *status;
        return kUsage;
    });
}

}  // namespace nanovm::cli
