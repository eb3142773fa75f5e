// `nanovm vm ...`: long-lived sandboxes driven one command at a time.
//
//   vm start [--cpus N] [--memory MiB] [--image IMG] [--disk SPEC]  start one, print its id
//   vm exec ID [--timeout S] [--cwd DIR] [-e K=V] -- CMD ARGS...     run a command in it
//   vm exec ID --session NAME -- SHELL WORDS...                      ... in a persistent shell
//   vm cp ID:/GUEST_PATH HOST_PATH | vm cp HOST_PATH ID:/GUEST_PATH  copy one file
//   vm list [--json]                                                 the VMs and their state
//   vm status ID                                                     its control status (JSON)
//   vm pause ID | vm resume ID                                       stop / restart its vCPUs
//   vm stop ID [--force] [--timeout S]                               power it off, remove its state
//
// And the hidden `nanovm _vmm`, the VMM process itself (api/vm/vmm_process.hpp).
// IDs may be abbreviated to any unique prefix.
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "api/vm/launcher.hpp"
#include "api/vm/fork_standby.hpp"
#include "api/vm/vmm_process.hpp"

namespace nanovm {

/// The options of every `vm` subcommand (each fills its own fields).
struct VmCommandOptions {
    vm::SandboxSpec spec;                    ///< start
    std::string id;                          ///< exec, status, pause, resume, stop
    std::vector<std::string> argv;           ///< exec
    uint32_t timeout_s = 0;                  ///< exec: kill after (0: never)
    uint32_t stop_grace_s = 10;              ///< stop: seconds to wait for the power-off (0: force at once)
    std::string cwd;                         ///< exec
    std::vector<std::string> env;            ///< exec
    bool no_stdin = false;                   ///< exec
    std::string session;                     ///< exec: run in this persistent shell
    std::string copy_from, copy_to;          ///< cp
    bool json = false;                       ///< list
    bool force = false;                      ///< stop
    std::string snapshot_dir;                ///< snapshot (target), restore (source)
    bool leave_paused = false;               ///< snapshot
    bool wait_durable = false;               ///< snapshot
    std::string memory_backend = "file";     ///< restore, fork: file | uffd
    uint32_t fork_count = 1;                 ///< fork: children, 1..4
    uint32_t fork_standby = 1;               ///< restore, fork: standbys the new VMs keep (start: spec.fork_standby)
    /// restore (hidden --into-standby): standby sockets to offer the restore to first
    /// (a standby of the snapshot's shape, api/vm/fork_standby.hpp; the template pool comes later)
    std::vector<std::string> into_standby;
    vm::VmmOptions vmm;                      ///< _vmm
    vm::StandbyOptions standby;              ///< _standby
    uint32_t vmm_boot_timeout_ms = 60000;    ///< _vmm
};

/// The subcommands, registered by add_vm_commands.
struct VmCommands {
    CLI::App* vm = nullptr;
    CLI::App* start = nullptr;
    CLI::App* exec = nullptr;
    CLI::App* cp = nullptr;
    CLI::App* list = nullptr;
    CLI::App* status = nullptr;
    CLI::App* pause = nullptr;
    CLI::App* resume = nullptr;
    CLI::App* stop = nullptr;
    CLI::App* snapshot = nullptr;
    CLI::App* restore = nullptr;
    CLI::App* fork = nullptr;
    CLI::App* vmm = nullptr;  ///< the hidden `_vmm` (on the top level)
    CLI::App* standby = nullptr;  ///< the hidden `_standby` (on the top level; api/vm/fork_standby.hpp)
};

/// Registers `vm` and `_vmm` on `app`, filling `options`.
VmCommands add_vm_commands(CLI::App& app, VmCommandOptions& options);

/// Runs whichever of them was parsed. Returns the exit status: 0, 1 (an error, one
/// line on stderr); `vm exec` returns what `nanovm run` does (api/cli/run_command.hpp).
/// Never throws.
int run_vm_command(const VmCommands& commands, const VmCommandOptions& options);

}  // namespace nanovm
