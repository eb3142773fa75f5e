// `nanovm snapshot ...` (snapshot_command.hpp).
#include "api/cli/snapshot_command.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>

#include <fmt/format.h>

#include "vmm/fd.hpp"
#include "vmm/log.hpp"

namespace nanovm::cli {

namespace {

using nlohmann::json;

std::string snapshot_path(const std::string& id) { return "/v1/snapshots/" + client::url_encode_segment(id); }

std::string size_text(const json& bytes) {
    if (!bytes.is_number()) return cell(bytes);
    const double b = bytes.get<double>();
    if (b >= 1024.0 * 1024 * 1024) return fmt::format("{:.1f}G", b / (1024.0 * 1024 * 1024));
    if (b >= 1024.0 * 1024) return fmt::format("{:.1f}M", b / (1024.0 * 1024));
    return fmt::format("{:.0f}K", b / 1024.0);
}

int list(client::ApiClient& api, const SnapshotOptions& o) {
    const std::string target =
        o.sandbox.empty() ? "/v1/snapshots"
                          : "/v1/sandboxes/" + client::url_encode_segment(resolve_id(api, "sandbox", o.sandbox)) + "/snapshots";
    const json all = list_all(api, target, "snapshots");
    if (o.client.json) {
        print_json(all);
        return kOk;
    }
    std::vector<std::vector<std::string>> rows;
    for (const json& s : all)
        rows.push_back({cell(s["id"]), cell(s["sandbox_id"]), cell(s["state"]), s["durable"].get<bool>() ? "yes" : "no",
                        size_text(s["size_bytes"]), cell(s["cpus"]), cell(s["memory_mb"]) + "M",
                        cell(s["created_at"])});
    print_table({"ID", "SANDBOX", "STATE", "DURABLE", "SIZE", "CPUS", "MEMORY", "CREATED"}, rows);
    return kOk;
}

int get(client::ApiClient& api, const SnapshotOptions& o) {
    const json s = api.get(snapshot_path(resolve_id(api, "snapshot", o.id)));
    if (o.client.json)
        print_json(s);
    else
        print_fields(s);
    return kOk;
}

int wait(client::ApiClient& api, const SnapshotOptions& o) {
    const std::string id = resolve_id(api, "snapshot", o.id);
    json s;
    {
        Progress progress("waiting until the snapshot is durable");
        s = api.post(snapshot_path(id) + "/wait", json{{"timeout_s", o.wait_s}});
    }
    if (o.client.json) print_json(s);
    if (s.value("durable", false)) return kOk;
    log_line(fmt::format("snapshot {} is not durable after {} s (state {}; the saving goes on)", id, o.wait_s,
                         cell(s["state"])));
    return kFailed;
}

int restore(client::ApiClient& api, const SnapshotOptions& o) {
    const std::string id = resolve_id(api, "snapshot", o.id);
    json body = json::object();
    if (!o.labels.empty()) body["metadata"] = labels_json(o.labels, "--label");
    if (o.timeout_s) body["timeout_s"] = *o.timeout_s;
    json sandbox;
    {
        Progress progress("restoring");
        sandbox = api.post(snapshot_path(id) + "/restore", body);
    }
    if (o.client.json)
        print_json(sandbox);
    else
        std::printf("%s\n", sandbox["id"].get<std::string>().c_str());
    return kOk;
}

int remove(client::ApiClient& api, const SnapshotOptions& o) {
    int status = kOk;
    for (const std::string& text : o.ids) {
        try {
            api.remove(snapshot_path(resolve_id(api, "snapshot", text)));
        } catch (const client::ApiError& e) {
            log_line(fmt::format("{}: {} ({})", text, e.what(), e.code()));
            if (status == kOk) status = exit_status_for(e);
        }
    }
    return status;
}

// The export streamed into FILE (written beside it and renamed: a failed export
// leaves no half file) or stdout.
int export_file(client::ApiClient& api, const SnapshotOptions& o) {
    const std::string id = resolve_id(api, "snapshot", o.id);
    const std::string source = snapshot_path(id) + "/export";
    if (o.file == "-") {
        if (::isatty(STDOUT_FILENO)) throw UsageError("will not write an export to a terminal: give a FILE or redirect");
        const client::Response r =
            api.http().request("GET", source, {}, [](std::string_view piece) { write_all(STDOUT_FILENO, piece); });
        client::throw_if_error(r);
        return kOk;
    }
    const std::string part = o.file + ".nanovm-part";
    const Fd fd(::open(part.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
    if (!fd) throw_errno("open " + part);
    uint64_t bytes = 0;
    try {
        Progress progress("exporting");
        const client::Response r = api.http().request("GET", source, {}, [&](std::string_view piece) {
            write_all(fd.get(), piece);
            bytes += piece.size();
        });
        client::throw_if_error(r);
        if (::fsync(fd.get()) != 0) throw_errno("fsync " + part);
        if (::rename(part.c_str(), o.file.c_str()) != 0) throw_errno("rename " + part + " to " + o.file);
    } catch (...) {
        ::unlink(part.c_str());
        throw;
    }
    if (o.client.json) print_json(json{{"snapshot_id", id}, {"file", o.file}, {"bytes", bytes}});
    return kOk;
}

int import_file(client::ApiClient& api, const SnapshotOptions& o) {
    struct stat st {};
    if (::stat(o.file.c_str(), &st) != 0) throw_errno("stat " + o.file);
    if (!S_ISREG(st.st_mode)) throw UsageError(fmt::format("{}: not a regular file (import reads an export file)", o.file));
    client::RequestBody body;
    body.file = o.file;
    body.content_type = "application/octet-stream";
    client::Response r;
    {
        Progress progress("importing");
        r = api.http().request("POST", "/v1/snapshots/import", body);
    }
    client::throw_if_error(r);
    const json s = json::parse(r.body, nullptr, false);
    if (!s.is_object() || !s.contains("id")) throw Error("the daemon's answer to the import is not a Snapshot");
    if (o.client.json)
        print_json(s);
    else
        std::printf("%s\n", s["id"].get<std::string>().c_str());
    return kOk;
}

}  // namespace

SnapshotCommands add_snapshot_commands(CLI::App& app, SnapshotOptions& o) {
    SnapshotCommands c;
    c.group = app.add_subcommand("snapshot", "nanovmd's snapshots: ls, get, wait, restore, rm, export, import (take "
                                             "one with nanovm sandbox snapshot ID)");
    c.group->require_subcommand(1);
    add_daemon_options(c.group, o.client);
    c.group->footer(std::string("IDs may be abbreviated to a unique prefix. The API: docs/api.md.\n"
                                "snapshot wait exits 1 when the snapshot is not durable within --timeout.\n\n") +
                    kExitHelp);
    const auto id_arg = [&](CLI::App* cmd) { cmd->add_option("id", o.id, "Snapshot id")->required(); };

    c.ls = c.group->add_subcommand("ls", "The snapshots: id, sandbox, state, durable, size, shape");
    c.ls->add_option("--sandbox", o.sandbox, "Only those taken of this sandbox")->type_name("ID");
    c.get = c.group->add_subcommand("get", "One snapshot");
    id_arg(c.get);
    c.wait = c.group->add_subcommand("wait", "Wait until a snapshot is durable (the saving is never cancelled)");
    id_arg(c.wait);
    c.wait->add_option("--timeout", o.wait_s, "Give up waiting after S seconds (0 to 3600)")
        ->type_name("S")
        ->capture_default_str();
    c.restore = c.group->add_subcommand("restore", "Restore a snapshot into a new sandbox; print its id");
    id_arg(c.restore);
    c.restore->add_option("-l,--label", o.labels, "A metadata label of the new sandbox (repeatable)")
        ->type_name("KEY=VALUE");
    c.restore->add_option("--timeout", o.timeout_s, "Delete the new sandbox S seconds after the restore (0: never)")
        ->type_name("S");
    c.rm = c.group->add_subcommand("rm", "Delete snapshots (their files go once no sandbox or snapshot needs them)");
    c.rm->add_option("id", o.ids, "Snapshot ids")->required();
    c.export_ = c.group->add_subcommand(
        "export", "Write a snapshot as one self-contained file (its chain flattened, zstd, checksummed; the root image "
                  "named by its sha256) for import here or on another host");
    id_arg(c.export_);
    c.export_->add_option("file", o.file, "The file to write (- : stdout)")->required();
    c.import = c.group->add_subcommand(
        "import", "Import an export file as a new snapshot (every part checked; the root image must be on this host); "
                  "print its id");
    c.import->add_option("file", o.file, "The export file")->required();
    return c;
}

int run_snapshot_command(const SnapshotCommands& c, const SnapshotOptions& o) {
    return run_client_command(o.client, [&] {
        client::ApiClient api(find_daemon(o.client));
        if (*c.ls) return list(api, o);
        if (*c.get) return get(api, o);
        if (*c.wait) return wait(api, o);
        if (*c.restore) return restore(api, o);
        if (*c.rm) return remove(api, o);
        if (*c.export_) return export_file(api, o);
        if (*c.import) return import_file(api, o);
        return kUsage;
    });
}

}  // namespace nanovm::cli
