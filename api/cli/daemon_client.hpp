// What the CLI's daemon commands (`nanovm sandbox ...`, `nanovm snapshot ...`,
// api/cli/sandbox_command.cpp, snapshot_command.cpp) share: finding nanovmd, their exit
// statuses, turning a failure into one line and a status, ids by unique prefix, tables
// and the progress line.
#pragma once

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "api/client/api_client.hpp"

namespace nanovm::cli {

/// Exit statuses of `nanovm sandbox|snapshot ...` (not `sandbox exec`: see kExecHelp).
inline constexpr int kOk = 0;
inline constexpr int kFailed = 1;        ///< the daemon or a VM failed (5xx: vm_error, internal, disk_full)
inline constexpr int kUsage = 2;         ///< bad command line, or the daemon refused the values (400, 413, 422)
inline constexpr int kNoDaemon = 3;      ///< no daemon answers at the socket (or URL)
inline constexpr int kNotFound = 4;      ///< no such sandbox, snapshot or guest path (404)
inline constexpr int kWrongState = 5;    ///< the sandbox or snapshot is in the wrong state (409: paused...)
inline constexpr int kOverCapacity = 6;  ///< over the daemon's caps, or busy (503): try later
/// The daemon refused the token (401), or NANOVM_URL is set with no token to send
/// (neither NANOVM_TOKEN nor a readable <state>/token): the TCP auth setup is wrong.
inline constexpr int kUnauthorized = 7;

/// The text of the exit statuses in --help and the README.
inline constexpr const char* kExitHelp =
    "Exit status:\n"
    "  0  done\n"
    "  1  the daemon or the sandbox's VM failed (the daemon's message says why)\n"
    "  2  usage: a bad command line, or the daemon refused a value (400, 413, 422: e.g. --cpus 9)\n"
    "  3  the daemon is not running (start it: nanovm daemon [--state-dir DIR])\n"
    "  4  no such sandbox, snapshot or guest path (404)\n"
    "  5  wrong state: e.g. the sandbox is paused or still creating (409)\n"
    "  6  over the daemon's caps (sandboxes, memory) or busy: try later (503)\n"
    "  7  the daemon refused the token (401), or NANOVM_URL is set without a token: set NANOVM_TOKEN to\n"
    "     <state>/token's contents\n";

/// How the daemon commands reach nanovmd.
struct ClientOptions {
    std::string state_dir;  ///< --state-dir ("": $NANOVM_STATE_DIR, /var/lib/nanovm for root, XDG)
    bool json = false;      ///< --json: JSON on stdout instead of tables and ids
};

/// Adds --state-dir and --json to a command group (inherited by its subcommands).
void add_daemon_options(CLI::App* group, ClientOptions& options);

/// Where the daemon is: $NANOVM_URL (http://127.0.0.1:PORT, with $NANOVM_TOKEN or
/// <state>/token) if set, else <state>/nanovmd.sock with <state> found by the daemon's
/// own rule (api/daemon/daemon_options.hpp). Throws Error (no state directory),
/// UsageError (a NANOVM_URL that is not http://LOOPBACK:PORT), MissingToken.
client::Endpoint find_daemon(const ClientOptions& options);

/// Runs `body` and maps what it throws to one line on stderr and an exit status
/// above (client::Unreachable -> kNoDaemon with how to start the daemon; ApiError by
/// its HTTP status; MissingToken -> kUnauthorized; anything else kFailed).
int run_client_command(const ClientOptions& options, const std::function<int()>& body);

/// The exit status for an ApiError (404 kNotFound, 409 kWrongState...).
int exit_status_for(const client::ApiError& e);

/// The full id of a sandbox (`kind` "sandbox", listed at /v1/sandboxes) or snapshot
/// ("snapshot", /v1/snapshots) named by a unique prefix; a full UUID is returned as it
/// is. Throws ApiError 404 for none, Error (usage) when several match. `list_target`:
/// where the ids are listed when not at /v1/<kind>s (a sandbox's sessions, one
/// unpaged answer; sandboxes and snapshots are read a page at a time).
std::string resolve_id(client::ApiClient& api, const std::string& kind, const std::string& text,
                       const std::string& list_target = "");

/// Every item of a paged list (`field` "sandboxes" or "snapshots") at `target`
/// (which may already carry a query).
nlohmann::json list_all(client::ApiClient& api, const std::string& target, const std::string& field);

/// Prints rows under headers, columns padded to their widest cell.
void print_table(const std::vector<std::string>& headers, const std::vector<std::vector<std::string>>& rows);

/// A JSON value as a table cell: strings bare, null "-".
std::string cell(const nlohmann::json& value);

/// Labels {"k": "v"...} as "k=v,k2=v2" ("-" for none).
std::string labels_text(const nlohmann::json& metadata);

/// Prints an object's fields one per line, "key:  value" (objects as labels_text).
void print_fields(const nlohmann::json& object);

/// Prints `value` on stdout as JSON (one line).
void print_json(const nlohmann::json& value);

/// "KEY=VALUE" options into a JSON object of strings. Throws Error (usage) for one without '='.
nlohmann::json labels_json(const std::vector<std::string>& labels, const char* option);

/// A usage mistake found after parsing (exit kUsage).
class UsageError : public Error {
public:
    using Error::Error;
};

/// NANOVM_URL is set but there is no token to send (exit kUnauthorized, as for a
/// token the daemon refuses: both are the TCP auth setup).
class MissingToken : public Error {
public:
    using Error::Error;
};

/// "what... 1.2 s" on stderr, redrawn every 200 ms while a long request runs, and
/// erased when it ends; nothing unless stderr is a terminal.
class Progress {
public:
    explicit Progress(std::string what);
    ~Progress();
    Progress(const Progress&) = delete;
    Progress& operator=(const Progress&) = delete;

private:
    std::string what_;
    std::atomic<bool> done_{false};
    std::thread thread_;
};

}  // namespace nanovm::cli
