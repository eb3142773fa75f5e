// `nanovm sandbox archive|unarchive|update|logs|metrics`: a sandbox's rest states, its
// settings, its logs and its host-side figures from the command line (docs/api.md,
// "Sandbox states" and "Sandboxes"):
//
//   sandbox archive ID [--no-wait]      pack it into the archive store; wait for `archived`
//   sandbox unarchive ID [--no-wait]    restore it under the same id; wait for `running`
//                                       (both show the daemon's `progress` on stderr)
//   sandbox update ID [--timeout S | --no-timeout] [--autosleep S] [-l KEY=VALUE... | --clear-labels]
//                                       PATCH its timeout, autosleep and labels
//   sandbox logs ID [--vmm] [--tail-bytes N]   the end of its guest console (or VMM log)
//   sandbox metrics ID                  cpu time, VMM RSS, disk bytes (never wakes it)
//
// Like the other state commands (pause, sleep...) they print nothing on success but
// with --json, which prints the Sandbox (metrics: its figures).
#pragma once

#include <optional>

#include "api/cli/sandbox_command.hpp"
#include "api/client/api_client.hpp"

namespace nanovm::cli {

/// The largest --timeout and --autosleep (seconds: 7 days, the daemon's limit).
inline constexpr int64_t kMaxSandboxSeconds = 7 * 86400;
/// The largest --tail-bytes (1 MiB, the daemon's limit).
inline constexpr int64_t kMaxTailBytes = 1 << 20;

/// Registers archive, unarchive, update, logs and metrics under the `sandbox` group `c.group`.
void add_sandbox_rest_commands(SandboxCommands& c, SandboxOptions& o);

/// Runs the parsed one of them: its exit status, or nullopt if none was parsed.
/// archive/unarchive without --no-wait: kOk once the sandbox is `archived`/`running`;
/// kFailed (with the reason on stderr) when it settles in any other state (an archive
/// that failed leaves it `running` or `paused`, an unarchive that failed `archived`,
/// either may leave it `error`). update without a change: UsageError (kUsage).
/// Throws what ApiClient throws (run_client_command maps it to a status).
std::optional<int> run_sandbox_rest_command(const SandboxCommands& c, const SandboxOptions& o,
                                            client::ApiClient& api);

}  // namespace nanovm::cli
