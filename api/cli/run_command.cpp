// `nanovm run` (see run_command.hpp).
#include "api/cli/run_command.hpp"

#include <signal.h>
#include <unistd.h>

#include <fmt/format.h>

#include "api/agent_client/agent_client.hpp"
#include "api/cli/exec_stream.hpp"
#include "api/vm/boot_options.hpp"
#include "api/vm/control_client.hpp"
#include "api/vm/termination_signals.hpp"
#include "vmm/error.hpp"
#include "vmm/log.hpp"

namespace nanovm {

namespace {

// Stops the VM at once (its disk is thrown away anyway) and waits for its VMM.
void stop_now(const vm::StartedVm& started) {
    try {
        vm::control_call(started.paths.control_socket(), "stop", {{"force", true}}, std::chrono::seconds(5));
    } catch (const std::exception& e) {
        log_line(fmt::format("stopping VM {}: {}; killing its VMM", started.paths.id, e.what()));
        ::kill(started.pid, SIGTERM);
    }
    vm::reap_vmm(started.pid, std::chrono::seconds(10));
    vm::remove_if_dead(started.paths);
}

int run(const RunOptions& options) {
    if (options.argv.empty() || options.argv.front().empty())
        throw Error("no command: nanovm run [options] -- CMD ARGS...");
    const Fd signals = block_termination_signals();
    vm::StartedVm started;
    try {
        // A one-command VM is not forked: no standbys for it.
        vm::SandboxSpec spec = options.spec;
        spec.fork_standby = 0;
        started = start_vm_for_cli(spec, /*attached=*/true, signals.get());
    } catch (const vm::Interrupted& i) {
        return 128 + i.signal;
    }
    int status = kExecNanovmError;
    try {
        agent::AgentClient client = agent::AgentClient::connect(
            agent::Endpoint::vsock(started.paths.vsock_socket(), agent::proto::kAgentVsockPort));
        agent::Command command = agent::Command::program(options.argv);
        command.cwd = options.cwd;
        command.env = options.env;
        command.timeout = std::chrono::seconds(options.timeout_s);
        status = exec_streaming(client, command,
                                    StreamOptions{!options.no_stdin && !::isatty(STDIN_FILENO), signals.get()});
    } catch (const std::exception& e) {
        log_line(fmt::format("the guest agent: {}", e.what()));
    }
    stop_now(started);
    return status;
}

}  // namespace

void print_guest_console(const std::vector<std::string>& console) {
    for (const std::string& line : console) log_line("guest console: " + line);
}

vm::StartedVm start_vm_for_cli(const vm::SandboxSpec& spec, bool attached, int signal_fd) {
    vm::clean_stale_vm_dirs(spec.run_dir.empty() ? vm::default_run_dir() : vm::RunDir{spec.run_dir});
    try {
        return vm::start_vm(spec, attached, signal_fd);
    } catch (const vm::StartError& e) {
        print_guest_console(e.console());
        throw;
    }
}

CLI::App* add_run_command(CLI::App& app, RunOptions& options) {
    CLI::App* cmd = app.add_subcommand("run", "Run one command in a fresh sandbox VM, then remove the VM");
    cmd->add_option("--cpus", options.spec.cpus, "vCPUs (1 to 4)")
        ->type_name("N")
        ->check(CLI::Range(kMinCpus, kMaxCpus).description(""))
        ->capture_default_str();
    cmd->add_option("--memory", options.spec.memory_mib, "Guest RAM in MiB (128 to 8192)")
        ->type_name("MiB")
        ->check(CLI::Range(kMinMemoryMib, kMaxMemoryMib).description(""))
        ->capture_default_str();
    cmd->add_option("--image", options.spec.image,
                    "Root disk image (ext4 with /sbin/nanovm-init), attached read-only and never changed "
                    "[default: tools/rootfs/build's default image]")
        ->type_name("IMG");
    cmd->add_option("--disk", options.spec.disks,
                    "An extra raw disk: PATH[,ro][,serial=ID] (repeatable; /dev/vdc, vdd, ... in the guest)")
        ->type_name("SPEC");
    cmd->add_option("--timeout", options.timeout_s, "Kill the command (its whole process group) after S seconds")
        ->type_name("S");
    cmd->add_option("--cwd", options.cwd, "Working directory in the guest [default: /]")->type_name("DIR");
    cmd->add_option("-e,--env", options.env, "Set KEY=VALUE in the command's environment (repeatable)")
        ->type_name("KEY=VALUE");
    cmd->add_flag("-n,--no-stdin", options.no_stdin, "Do not forward stdin (the command reads /dev/null)");
    cmd->add_option("command", options.argv, "The command and its arguments, after --")->required();
    cmd->footer(exec_status_help("bad option, no kernel or root disk, no /dev/kvm, the VM did not boot"));
    return cmd;
}

int run_run(const RunOptions& options) {
    try {
        for (const std::string& e : options.env) {
            if (e.find('=') == std::string::npos || e.front() == '=')
                throw Error(fmt::format("--env {}: want KEY=VALUE", e));
        }
        return run(options);
    } catch (const std::exception& e) {
        log_line(e.what());
    } catch (...) {
        log_line("unknown error");
    }
    return kExecNanovmError;
}

}  // namespace nanovm
