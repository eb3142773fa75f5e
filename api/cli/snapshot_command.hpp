// `nanovm snapshot ...`: nanovmd's snapshots from the command line (a client of the
// daemon's API, docs/api.md). Snapshots are taken with `nanovm sandbox snapshot ID`.
//
//   snapshot ls [--sandbox ID]                     a table of snapshots
//   snapshot get ID                                one snapshot
//   snapshot wait ID [--timeout S]                 until it is durable (exit 1 if not within S)
//   snapshot restore ID [--label K=V]... [--timeout S]   a new sandbox; print its id
//   snapshot rm ID...                              delete (files go once nothing needs them)
//   snapshot export ID FILE                        the snapshot as one file (FILE - : stdout)
//   snapshot import FILE                           a file of export as a new snapshot; print its id
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

struct SnapshotOptions {
    ClientOptions client;
    std::string id;                         ///< the one-id commands
    std::vector<std::string> ids;       ///< rm
    std::string sandbox;                ///< ls --sandbox
    int64_t wait_s = 60;                ///< wait --timeout
    std::optional<int64_t> timeout_s;   ///< restore --timeout (the new sandbox's)
    std::vector<std::string> labels;    ///< restore
    std::string file;                   ///< export (to), import (from)
};

struct SnapshotCommands {
    CLI::App* group = nullptr;
    CLI::App *ls = nullptr, *get = nullptr, *wait = nullptr, *restore = nullptr, *rm = nullptr;
    CLI::App *export_ = nullptr, *import = nullptr;
};

/// Registers `snapshot` and its subcommands on `app`, filling `options`.
SnapshotCommands add_snapshot_commands(CLI::App& app, SnapshotOptions& options);

/// Runs the parsed one. Returns the exit status (daemon_client.hpp). Never throws.
int run_snapshot_command(const SnapshotCommands& commands, const SnapshotOptions& options);

}  // namespace nanovm::cli
