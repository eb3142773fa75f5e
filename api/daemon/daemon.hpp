// `nanovm daemon` (nanovmd): the sandbox service. Serves the REST API of
// docs/api.md on <state>/nanovmd.sock and, with --listen, on loopback TCP with a
// bearer token; see daemon_options.hpp for the state directory's files.
#pragma once

namespace CLI {
class App;
}

namespace nanovm::daemon {

struct DaemonOptions;

/// Adds the `daemon` subcommand and its options (filled into `options`).
CLI::App* add_daemon_command(CLI::App& app, DaemonOptions& options);

/// Runs the daemon until SIGINT/SIGTERM. Returns the process exit status; errors
/// before serving (a state directory it cannot use, another daemon on it, a socket
/// path too long) are one line on stderr and status 1.
int run_daemon(const DaemonOptions& options);

}  // namespace nanovm::daemon
