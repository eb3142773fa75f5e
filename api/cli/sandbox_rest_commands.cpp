// `nanovm sandbox archive|unarchive|update|logs|metrics` (sandbox_rest_commands.hpp).
#include "api/cli/sandbox_rest_commands.hpp"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include <fmt/format.h>

#include "vmm/fd.hpp"
#include "vmm/log.hpp"

namespace nanovm::cli {

namespace {

using nlohmann::json;

// An object's field; null when it is missing (or `object` is not an object).
const json& field(const json& object, const char* key) {
    static const json null;
    if (!object.is_object()) return null;
    const auto it = object.find(key);
    return it == object.end() ? null : *it;
}

std::string text(const json& object, const char* key) {
    const json& v = field(object, key);
    return v.is_string() ? v.get<std::string>() : "";
}

std::string state_of(const json& s) {
    const std::string state = text(s, "state");
    return state.empty() ? "?" : state;
}

// A number field of an object, 0 when it is missing or not a number.
double number(const json& object, const char* key) {
    const json& v = field(object, key);
    return v.is_number() ? v.get<double>() : 0.0;
}

std::string mib(double bytes) { return fmt::format("{:.1f} MiB", bytes / (1 << 20)); }

// A Sandbox's `progress` ({"phase", "bytes_done", "bytes_total"}, or null) as
// "pack 12.5 MiB of 40.1 MiB (31%)"; "" for null.
std::string progress_text(const json& progress) {
    if (!progress.is_object()) return "";
    std::string out = text(progress, "phase");
    const double done = number(progress, "bytes_done"), total = number(progress, "bytes_total");
    if (total > 0) out += fmt::format(" {} of {} ({:.0f}%)", mib(done), mib(total), 100.0 * done / total);
    return out;
}

// What an archive or unarchive shows while the CLI waits: on a terminal, one line on
// stderr redrawn at each poll ("archive 1a2b3c4d: pack 12.5 MiB of 40.1 MiB (31%)...
// 3.2 s"), erased at the end; else a line at each phase change.
class PhaseLine {
public:
    explicit PhaseLine(std::string what) : what_(std::move(what)), tty_(::isatty(STDERR_FILENO) != 0) {}
    ~PhaseLine() {
        if (tty_ && drawn_) {
            std::fprintf(stderr, "\r\033[K");
            std::fflush(stderr);
        }
    }
    PhaseLine(const PhaseLine&) = delete;
    PhaseLine& operator=(const PhaseLine&) = delete;

    void show(const json& progress) {
        const std::string phase = text(progress, "phase");
        if (tty_) {
            const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
            const std::string now = progress_text(progress);
            std::fprintf(stderr, "\r%s%s... %.1f s\033[K", what_.c_str(), now.empty() ? "" : (": " + now).c_str(), s);
            std::fflush(stderr);
            drawn_ = true;
        } else if (!phase.empty() && phase != phase_) {
            log_line(fmt::format("{}: {}", what_, phase));
        }
        if (!phase.empty()) phase_ = phase;
    }

private:
    std::string what_;
    bool tty_;
    bool drawn_ = false;
    std::string phase_;
    std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

// POST .../archive or .../unarchive with wait false, then (unless --no-wait) a GET of
// the sandbox every 200 ms until it leaves `archiving`/`unarchiving`.
int archive_unarchive(client::ApiClient& api, const SandboxOptions& o, bool archive) {
    const std::string id = resolve_id(api, "sandbox", o.id);
    const std::string path = sandbox_path(id);
    const std::string verb = archive ? "archive" : "unarchive";
    const std::string during = archive ? "archiving" : "unarchiving";
    const std::string goal = archive ? "archived" : "running";
    json s = api.post(path + "/" + verb, json{{"wait", false}});
    if (o.no_wait) {
        if (o.client.json)
            print_json(s);
        else
            std::printf("%s\n", state_of(s).c_str());
        return kOk;
    }
    {
        PhaseLine line(fmt::format("{} {}", verb, id.substr(0, 8)));
        while (state_of(s) == during) {
            line.show(field(s, "progress"));
            std::this_thread::sleep_for(std::chrono::milliseconds(200));
            try {
                s = api.get(path);
            } catch (const client::ApiError& e) {
                if (e.status() != 404) throw;
                throw client::ApiError(404, e.code(), fmt::format("sandbox {} was deleted during its {}", id, verb));
            }
        }
    }
    if (state_of(s) == goal) {
        if (o.client.json) print_json(s);
        return kOk;
    }
    // An archive that failed leaves the sandbox as it was (running or paused), an
    // unarchive that failed leaves it archived: the reason is in `error` either way.
    const std::string reason = text(s, "error");
    log_line(fmt::format("sandbox {}: the {} failed: it is {} now ({})", id, verb, state_of(s),
                         reason.empty() ? "the daemon's log says why" : reason));
    if (o.client.json) print_json(s);
    return kFailed;
}

int update(client::ApiClient& api, const SandboxOptions& o) {
    if (o.timeout_s && o.no_timeout) throw UsageError("update: --timeout and --no-timeout: one or the other");
    if (!o.labels.empty() && o.clear_labels) throw UsageError("update: --label and --clear-labels: one or the other");
    json body = json::object();
    if (o.no_timeout) body["timeout_s"] = nullptr;
    if (o.timeout_s) body["timeout_s"] = *o.timeout_s;
    if (o.autosleep_s) body["autosleep_s"] = *o.autosleep_s;
    if (o.clear_labels) body["metadata"] = json::object();
    if (!o.labels.empty()) body["metadata"] = labels_json(o.labels, "--label");
    if (body.empty())
        throw UsageError("update: nothing to change: give --timeout S, --no-timeout, --autosleep S, --label KEY=VALUE "
                         "or --clear-labels");
    const json s = api.call("PATCH", sandbox_path(resolve_id(api, "sandbox", o.id)), body);
    if (o.client.json) print_json(s);
    return kOk;
}

int logs(client::ApiClient& api, const SandboxOptions& o) {
    std::string target = sandbox_path(resolve_id(api, "sandbox", o.id)) + (o.vmm_log ? "/logs/vmm" : "/logs/console");
    if (o.tail_bytes) target += fmt::format("?tail_bytes={}", *o.tail_bytes);
    const client::Response r =
        api.http().request("GET", target, {}, [](std::string_view piece) { write_all(STDOUT_FILENO, piece); });
    client::throw_if_error(r);
    return kOk;
}

int metrics(client::ApiClient& api, const SandboxOptions& o) {
    const json m = api.get(sandbox_path(resolve_id(api, "sandbox", o.id)) + "/metrics");
    if (o.client.json) {
        print_json(m);
        return kOk;
    }
    const auto figure = [&](const char* key, const std::string& shown) {
        return field(m, key).is_number() ? shown : "-";
    };
    const json& vmm = field(m, "vmm_running");
    print_table({"STATE", "CPU_TIME", "VMM_RSS", "DISK", "VMM"},
                {{cell(field(m, "state")),
                  figure("cpu_time_ms", fmt::format("{:.2f} s", number(m, "cpu_time_ms") / 1000)),
                  figure("vmm_rss_bytes", mib(number(m, "vmm_rss_bytes"))),
                  figure("disk_bytes", mib(number(m, "disk_bytes"))),
                  vmm.is_boolean() ? (vmm.get<bool>() ? "running" : "stopped") : "-"}});
    return kOk;
}

constexpr const char* kArchiveHelp =
    "Without --no-wait the command follows the daemon's progress (phases snapshot, pack, stop; unarchive:\n"
    "unpack, restore) on stderr and exits 0 once the sandbox is archived (running). A failure exits 1 with\n"
    "the reason: a failed archive leaves the sandbox as it was (running, or paused), a failed unarchive\n"
    "leaves it archived. Ctrl-C ends the waiting, not the archive. --no-wait prints the state the daemon\n"
    "answered (archiving, unarchiving) at once and exits 0: follow it with nanovm sandbox get ID.";

// The footer every other sandbox subcommand inherits, which a footer of its own replaces.
std::string archive_footer() {
    return std::string(kArchiveHelp) + "\n\nIDs may be abbreviated to a unique prefix. The API: docs/api.md.\n\n" +
           kExitHelp;
}

}  // namespace

void add_sandbox_rest_commands(SandboxCommands& c, SandboxOptions& o) {
    const auto id_arg = [&](CLI::App* cmd) { cmd->add_option("id", o.id, "Sandbox id")->required(); };

    c.archive = c.group->add_subcommand("archive", "Pack a sandbox's memory and disks into the archive store and end "
                                                   "its VM (its timeout stops); wait until it is archived");
    id_arg(c.archive);
    c.archive->add_flag("--no-wait", o.no_wait, "Print the state (archiving) at once; do not wait");
    c.archive->footer(archive_footer());
    c.unarchive = c.group->add_subcommand("unarchive", "Restore an archived sandbox under the same id (files, "
                                                       "processes, sessions); wait until it runs");
    id_arg(c.unarchive);
    c.unarchive->add_flag("--no-wait", o.no_wait, "Print the state (unarchiving) at once; do not wait");
    c.unarchive->footer(archive_footer());

    c.update = c.group->add_subcommand("update", "Change a sandbox's timeout, autosleep or labels (in any state; "
                                                 "never wakes it)");
    id_arg(c.update);
    c.update->add_option("--timeout", o.timeout_s, "Delete it (or archive it: create --on-timeout) S seconds from now "
                                                   "(0: never)")
        ->type_name("S")
        ->check(CLI::Range(int64_t{0}, kMaxSandboxSeconds).description(""));
    c.update->add_flag("--no-timeout", o.no_timeout, "No timeout: it lives until deleted");
    c.update->add_option("--autosleep", o.autosleep_s, "Sleep it once idle for S seconds (0: never; a running command or a busy CPU is not idle)")
        ->type_name("S")
        ->check(CLI::Range(int64_t{0}, kMaxSandboxSeconds).description(""));
    c.update->add_option("-l,--label", o.labels, "Replace its labels with these (repeatable: give each one to keep)")
        ->type_name("KEY=VALUE");
    c.update->add_flag("--clear-labels", o.clear_labels, "Remove all its labels");

    c.logs = c.group->add_subcommand("logs", "The end of a sandbox's guest console (or with --vmm its VMM's log) "
                                             "on stdout");
    id_arg(c.logs);
    c.logs->add_flag("--vmm", o.vmm_log, "The VMM process's log instead of the guest console");
    c.logs->footer(
        "Both are its current VMM's: a sandbox made by a restore (template, snapshot, unarchive) has what its\n"
        "guest printed since (often nothing); an archived sandbox has none.\n\nIDs may be abbreviated to a unique "
        "prefix. The API: docs/api.md.\n\n" +
        std::string(kExitHelp));
    c.logs->add_option("--tail-bytes", o.tail_bytes, "At most the last N bytes (1 to 1048576) [default: 65536]")
        ->type_name("N")
        ->check(CLI::Range(int64_t{1}, kMaxTailBytes).description(""));

    c.metrics = c.group->add_subcommand("metrics", "A sandbox's host-side figures: its VMM's CPU time and RSS, its "
                                                   "disk bytes (never wakes it)");
    id_arg(c.metrics);
}

std::optional<int> run_sandbox_rest_command(const SandboxCommands& c, const SandboxOptions& o,
                                            client::ApiClient& api) {
    if (*c.archive) return archive_unarchive(api, o, /*archive=*/true);
    if (*c.unarchive) return archive_unarchive(api, o, /*archive=*/false);
    if (*c.update) return update(api, o);
    if (*c.logs) return logs(api, o);
    if (*c.metrics) return metrics(api, o);
    return std::nullopt;
}

}  // namespace nanovm::cli
