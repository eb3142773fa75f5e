// `nanovm run [options] -- CMD ARGS...`: a fresh sandbox for one command. Boots the
// default kernel and root disk (read-only, with a private writable overlay), runs
// CMD through the guest agent with its output streamed to ours, exits with its
// status, and stops the VM and removes its state.
#pragma once

#include <chrono>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "api/vm/launcher.hpp"

namespace nanovm {

/// The options of `nanovm run`.
struct RunOptions {
    vm::SandboxSpec spec;
    uint32_t timeout_s = 0;             ///< kill the command after this long; 0: none
    bool no_stdin = false;              ///< do not forward stdin (it is /dev/null then)
    std::string cwd;                    ///< working directory in the guest ("" = /)
    std::vector<std::string> env;       ///< KEY=VALUE
    std::vector<std::string> argv;      ///< the command (argv, not a shell line)
};

/// vm::start_vm for a command line: first removes the stale VM directories (and
/// unused fork bases) of the spec's run directory (vm::clean_stale_vm_dirs: the
/// CLI's decision, nanovmd keeps them), and on a vm::StartError prints the guest
/// console's last lines to stderr ("nanovm: guest console: ...") before rethrowing.
/// Throws what vm::start_vm throws.
vm::StartedVm start_vm_for_cli(const vm::SandboxSpec& spec, bool attached, int signal_fd);

/// Prints `console` (a failed start's guest console lines) to stderr, one
/// "nanovm: guest console: LINE" each.
void print_guest_console(const std::vector<std::string>& console);

/// Registers `run` on `app`, filling `options`.
CLI::App* add_run_command(CLI::App& app, RunOptions& options);

/// Runs it. Returns the command's exit status, or the codes of api/cli/exec_stream.hpp
/// (125: nanovm failed, with one line on stderr). Never throws.
int run_run(const RunOptions& options);

/// The text of `nanovm run --help` and `nanovm vm exec --help` about exit statuses;
/// `failures` lists what makes that command itself fail with 125.
inline std::string exec_status_help(std::string_view failures) {
    return fmt::format(
        "Exit status: the command's own; 128+N if signal N killed it; 124 if --timeout killed it;\n"
        "125 if nanovm failed ({});\n"
        "126 if the command could not run (e.g. EACCES); 127 if it was not found.\n"
        "The command is an argv, not a shell line: use  -- sh -c 'echo $HOME; exit 3'  for one.\n"
        "Stdin is forwarded unless it is a terminal or --no-stdin is given.",
        failures);
}

}  // namespace nanovm
