// `nanovm sandbox session ...` and `nanovm sandbox command ...`: a sandbox's sessions
// and background commands from the command line (docs/api.md, "Sessions" and
// "Background commands"):
//
//   sandbox session create ID [--cwd DIR] [-e K=V]...    print the session's id
//   sandbox session ls ID                                a table of its sessions
//   sandbox session rm ID SID                            end it
//   sandbox command ls ID                                a table of its background commands
//   sandbox command get ID CID                           one command
//   sandbox command logs ID CID [-f]                     its output (with -f: until it ends,
//                                                        then exit with its status)
//   sandbox command wait ID CID [--timeout S]            wait; exit with its status
//   sandbox command kill ID CID [--signal N]             signal it (default 9)
//   sandbox command stdin ID CID [--eof]                 send our stdin to it
//
// Session ids may be abbreviated to a unique prefix; command ids are the daemon's.
#pragma once

#include <optional>
#include <string>

#include "api/cli/sandbox_command.hpp"
#include "api/client/api_client.hpp"

namespace nanovm::cli {

/// Registers `session` and `command` under the `sandbox` group `c.group`.
void add_sandbox_job_commands(SandboxCommands& c, SandboxOptions& o);

/// Runs the parsed one of them: its exit status, or nullopt if none was parsed.
/// `command logs -f` and `command wait` exit as sandbox exec does (the command's
/// status, 124 when the wait ran out, 125 for nanovm's failures: exec_like()).
std::optional<int> run_sandbox_job_command(const SandboxCommands& c, const SandboxOptions& o,
                                           client::ApiClient& api);

/// True for the parsed commands that exit with a command's status.
bool exec_like(const SandboxCommands& c);

}  // namespace nanovm::cli
