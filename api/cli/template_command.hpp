// `nanovm template ...`: nanovmd's templates from the command line (a client of the
// daemon's API, docs/api.md "Templates").
//
//   template create NAME [--image NAME] [--cpus N] [--memory MiB] [--setup LINE]...
//                        [--snapshot ID] [--no-wait]   build it; print NAME once ready
//   template list                                      a table of templates
//   template get NAME                                  one template
//   template delete NAME [--force]                     delete (409 while sandboxes use it)
//
// Every one takes --state-dir and --json; exit statuses as `nanovm sandbox`
// (daemon_client.hpp): a build that failed exits 1 with its reason.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/cli/daemon_client.hpp"

namespace nanovm::cli {

struct TemplateOptions {
    ClientOptions client;
    std::string name;
    std::string image;
    std::string snapshot_id;
    std::optional<uint32_t> cpus;
    std::optional<uint32_t> memory_mb;
    std::vector<std::string> setup;
    bool no_wait = false;
    bool force = false;
};

struct TemplateCommands {
    CLI::App* group = nullptr;
    CLI::App *create = nullptr, *list = nullptr, *get = nullptr, *remove = nullptr;
};

/// Registers `template` and its subcommands on `app`, filling `options`.
TemplateCommands add_template_commands(CLI::App& app, TemplateOptions& options);

/// Runs the parsed one. Returns the exit status (daemon_client.hpp). Never throws.
int run_template_command(const TemplateCommands& commands, const TemplateOptions& options);

/// POST /v1/sandboxes with `body`, asked again every 2 s while the daemon answers 503
/// template_building (the create's template is being built), at most 30 minutes.
/// Returns the Sandbox; throws client::ApiError as ApiClient::post.
nlohmann::json create_sandbox(client::ApiClient& api, const nlohmann::json& body);

}  // namespace nanovm::cli
