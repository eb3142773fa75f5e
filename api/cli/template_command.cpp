// `nanovm template ...` (template_command.hpp).
#include "api/cli/template_command.hpp"

#include <chrono>
#include <cstdio>
#include <thread>

#include <fmt/format.h>

#include "vmm/log.hpp"

namespace nanovm::cli {

namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

std::string template_path(const std::string& name) { return "/v1/templates/" + client::url_encode_segment(name); }

int create(client::ApiClient& api, const TemplateOptions& o) {
    json body{{"name", o.name}};
    if (!o.image.empty()) body["image"] = o.image;
    if (!o.snapshot_id.empty()) body["snapshot_id"] = resolve_id(api, "snapshot", o.snapshot_id);
    if (o.cpus) body["cpus"] = *o.cpus;
    if (o.memory_mb) body["memory_mb"] = *o.memory_mb;
    if (!o.setup.empty()) body["setup"] = o.setup;
    json t = api.post("/v1/templates", body);
    if (!o.no_wait) {
        Progress progress("building the template");
        while (t.value("state", "") == "building") {
            std::this_thread::sleep_for(std::chrono::seconds(1));
            t = api.get(template_path(o.name));
        }
    }
    const bool failed = t.value("state", "") == "failed";
    // --json: the record in any state. Plain: the name only of a template that can be
    // used, so that `name=$(nanovm template create ...)` is empty when its build failed.
    if (o.client.json)
        print_json(t);
    else if (!failed)
        std::printf("%s\n", o.name.c_str());
    if (failed) {
        log_line(fmt::format("template {} failed: {}", o.name, cell(t["error"])));
        return kFailed;
    }
    return kOk;
}

int list(client::ApiClient& api, const TemplateOptions& o) {
    const json all = api.get("/v1/templates")["templates"];
    if (o.client.json) {
        print_json(all);
        return kOk;
    }
    std::vector<std::vector<std::string>> rows;
    for (const json& t : all) {
        const std::string source = t["snapshot_id"].is_string()
                                       ? "snapshot " + t["snapshot_id"].get<std::string>().substr(0, 8)
                                       : cell(t["image"]) + (t["setup"].empty() ? "" : fmt::format(" +{} setup", t["setup"].size()));
        rows.push_back({cell(t["name"]), cell(t["state"]), cell(t["cpus"]), cell(t["memory_mb"]) + "M", source,
                        cell(t["uses"]), cell(t["last_used_at"])});
    }
    print_table({"NAME", "STATE", "CPUS", "MEMORY", "SOURCE", "USES", "LAST_USED"}, rows);
    return kOk;
}

int get(client::ApiClient& api, const TemplateOptions& o) {
    const json t = api.get(template_path(o.name));
    if (o.client.json)
        print_json(t);
    else
        print_fields(t);
    return kOk;
}

int remove(client::ApiClient& api, const TemplateOptions& o) {
    api.remove(template_path(o.name) + (o.force ? "?force=true" : ""));
    return kOk;
}

}  // namespace

json create_sandbox(client::ApiClient& api, const json& body) {
    const auto deadline = Clock::now() + std::chrono::minutes(30);
    for (;;) {
        try {
            return api.post("/v1/sandboxes", body);
        } catch (const client::ApiError& e) {
            if (e.code() != "template_building" || Clock::now() >= deadline) throw;
        }
        std::this_thread::sleep_for(std::chrono::seconds(2));
    }
}

TemplateCommands add_template_commands(CLI::App& app, TemplateOptions& o) {
    TemplateCommands c;
    c.group = app.add_subcommand("template", "nanovmd's templates: create, list, get, delete (sandbox create "
                                             "--template NAME restores one)");
    c.group->require_subcommand(1);
    add_daemon_options(c.group, o.client);
    c.group->footer(std::string("The API: docs/api.md \"Templates\". template create exits 1 when the build "
                                "failed.\n\n") +
                    kExitHelp);
    const auto name_arg = [&](CLI::App* cmd) { cmd->add_option("name", o.name, "Template name")->required(); };

    c.create = c.group->add_subcommand("create", "Build a template: an image booted once with setup lines run in it, "
                                                 "or a snapshot; print its name once ready");
    name_arg(c.create);
    c.create->add_option("--image", o.image, "Image name: default or tiny [default: default]")->type_name("NAME");
    c.create->add_option("--snapshot", o.snapshot_id, "The template is this snapshot (its shape)")->type_name("ID");
    c.create->add_option("--cpus", o.cpus, "vCPUs (1 to 4) [default: 2]")->type_name("N");
    c.create->add_option("--memory", o.memory_mb, "Guest RAM in MiB (128 to 8192) [default: 1024]")->type_name("MiB");
    c.create->add_option("--setup", o.setup, "A shell line run as root before the snapshot (repeatable, in order)")
        ->type_name("LINE");
    c.create->add_flag("--no-wait", o.no_wait, "Answer once the build started (state building)");
    c.list = c.group->add_subcommand("list", "The templates: name, state, shape, source, uses");
    c.list->alias("ls");
    c.get = c.group->add_subcommand("get", "One template: state (and why it failed), image, shape, setup");
    name_arg(c.get);
    c.remove = c.group->add_subcommand("delete", "Delete a template (refused while sandboxes made from it exist)");
    c.remove->alias("rm");
    name_arg(c.remove);
    c.remove->add_flag("--force", o.force, "Delete it even so (its files stay until those sandboxes are gone)");
    return c;
}

int run_template_command(const TemplateCommands& c, const TemplateOptions& o) {
    return run_client_command(o.client, [&] {
        client::ApiClient api(find_daemon(o.client));
        if (*c.create) return create(api, o);
        if (*c.list) return list(api, o);
        if (*c.get) return get(api, o);
        if (*c.remove) return remove(api, o);
        return kUsage;
    });
}

}  // namespace nanovm::cli
