// `nanovm sandbox ...`: nanovmd's sandboxes from the command line (a client of the
// daemon's API, docs/api.md; api/cli/daemon_client.hpp finds it).
//
//   sandbox create [--image NAME | --snapshot ID | --template NAME] [--cpus N] [--memory MiB]
//                  [--timeout S] [--on-timeout delete|archive] [--autosleep S]
//                  [--label K=V]... [--disable-internet]        print the new sandbox's id
//   sandbox ls [--state S] [--label K=V]...                      a table of sandboxes
//   sandbox get ID                                               one sandbox
//   sandbox exec ID [--timeout S] [--cwd DIR] [-e K=V] [--user U] [-i] -- CMD ARGS...
//                                                                streamed; its exit status
//   sandbox exec ID --session SID -- WORDS...                    a shell line in a session
//   sandbox exec ID --background [...] -- CMD ARGS...            print the command's id
//   sandbox session create|ls|rm, sandbox command ls|get|logs|wait|kill|stdin
//                                                                (sandbox_job_commands.hpp)
//   sandbox cp ID:/GUEST_PATH HOST_PATH|-  |  sandbox cp HOST_PATH|- ID:/GUEST_PATH
//   sandbox snapshot ID [--wait] [--leave-paused]                print the snapshot's id
//   sandbox fork ID [-n N]                                       print the children's ids
//   sandbox pause ID | resume ID | sleep ID | reboot ID | rm ID...
//   sandbox archive|unarchive ID [--no-wait], sandbox update ID [--timeout S | --no-timeout]
//           [--autosleep S] [--label K=V... | --clear-labels], sandbox logs ID [--vmm]
//           [--tail-bytes N], sandbox metrics ID          (sandbox_rest_commands.hpp)
//
// Every one takes --state-dir and --json. IDs may be abbreviated to a unique prefix.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "api/cli/daemon_client.hpp"

namespace nanovm::cli {

/// The options of every `sandbox` subcommand (each fills its own fields).
struct SandboxOptions {
    ClientOptions client;
    std::string id;                         ///< the one-id commands
    std::vector<std::string> ids;           ///< rm
    std::string image, snapshot_id, template_name;  ///< create
    std::optional<int64_t> cpus, memory_mb, timeout_s;  ///< create (timeout_s: exec, update too)
    std::optional<int64_t> autosleep_s;     ///< create, update (seconds)
    std::string on_timeout;                 ///< create: "delete" or "archive" ("": the daemon's default)
    bool no_timeout = false, clear_labels = false;  ///< update
    bool no_wait = false;                   ///< archive, unarchive
    bool vmm_log = false;                   ///< logs --vmm
    std::optional<int64_t> tail_bytes;      ///< logs
    bool disable_internet = false;          ///< create
    std::vector<std::string> labels;        ///< create, ls, update
    std::string state;                      ///< ls
    std::vector<std::string> argv;          ///< exec
    std::string cwd, user;                  ///< exec
    std::vector<std::string> env;           ///< exec
    bool stdin_data = false;                ///< exec -i
    std::string copy_from, copy_to;         ///< cp
    bool wait_durable = false, leave_paused = false;  ///< snapshot
    int64_t fork_count = 1;                 ///< fork
    std::string session;                    ///< exec --session; session rm
    bool background = false;                ///< exec --background
    std::string command_id;                 ///< command get|logs|wait|kill|stdin
    bool follow = false;                    ///< command logs -f
    bool eof = false;                       ///< command stdin --eof
    int64_t signal = 9;                     ///< command kill
};

/// The registered subcommands.
struct SandboxCommands {
    CLI::App* group = nullptr;
    CLI::App *create = nullptr, *ls = nullptr, *get = nullptr, *exec = nullptr, *cp = nullptr, *snapshot = nullptr,
             *fork = nullptr, *pause = nullptr, *resume = nullptr, *sleep = nullptr,
             *reboot = nullptr, *rm = nullptr;
    // sandbox_rest_commands.cpp
    CLI::App *archive = nullptr, *unarchive = nullptr, *update = nullptr, *logs = nullptr, *metrics = nullptr;
    // sandbox_job_commands.cpp
    CLI::App *session = nullptr, *session_create = nullptr, *session_ls = nullptr, *session_rm = nullptr;
    CLI::App *command = nullptr, *command_ls = nullptr, *command_get = nullptr, *command_logs = nullptr,
             *command_wait = nullptr, *command_kill = nullptr, *command_stdin = nullptr;
};

/// Registers `sandbox` and its subcommands on `app`, filling `options`.
SandboxCommands add_sandbox_commands(CLI::App& app, SandboxOptions& options);

/// Runs the parsed one. Returns the exit status (daemon_client.hpp; `exec`: the
/// command's, 125 for nanovm's own failures). Never throws.
/// The API path of sandbox `id` ("/v1/sandboxes/<id>", the id percent-encoded as one
/// segment); the sandbox commands' routes hang below it.
std::string sandbox_path(const std::string& id);

int run_sandbox_command(const SandboxCommands& commands, const SandboxOptions& options);

}  // namespace nanovm::cli
