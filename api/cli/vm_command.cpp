// `nanovm vm ...` (see vm_command.hpp).
#include "api/cli/vm_command.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <variant>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "api/agent_client/agent_client.hpp"
#include "api/cli/exec_stream.hpp"
#include "api/cli/run_command.hpp"
#include "api/vm/adopt.hpp"
#include "api/vm/boot_options.hpp"
#include "api/vm/control_client.hpp"
#include "api/vm/control_protocol.hpp"
#include "api/vm/copy_spec.hpp"
#include "api/vm/guest_ops.hpp"
#include "api/vm/launcher.hpp"
#include "api/vm/state_dir.hpp"
#include "api/vm/termination_signals.hpp"
#include "api/vm/vm_ops.hpp"
#include "vmm/error.hpp"
#include "vmm/log.hpp"

namespace nanovm {

namespace {

using nlohmann::json;

// The CLI's run directory: $NANOVM_RUN_DIR, $XDG_RUNTIME_DIR/nanovm, or the cache's.
vm::RunDir cli_run_dir() { return vm::default_run_dir(); }

// Removes a dead VM's directory unless NANOVM_KEEP_STATE=1 asks to keep it; says which.
std::string clean_up_dead(const vm::VmPaths& paths) {
    if (vm::keep_state_requested()) return fmt::format("its state directory {} is kept (NANOVM_KEEP_STATE=1)", paths.dir);
    vm::remove_if_dead(paths);
    return "its state directory was removed";
}

// Runs `op` on VM `paths`; a VM found dead is cleaned up (the CLI's decision) and
// named, a paused one gets the command that resumes it.
template <typename Op>
auto on_vm(const vm::VmPaths& paths, Op&& op) {
    try {
        return op();
    } catch (const vm::VmStateError& e) {
        if (e.state() == "dead") throw Error(fmt::format("{}; {}", e.what(), clean_up_dead(paths)));
        if (e.state() == "paused") throw Error(fmt::format("{} (nanovm vm resume {})", e.what(), paths.id));
        throw;
    } catch (const vm::ControlCommandError& e) {
        throw Error(fmt::format("VM {}: {}", paths.id, e.what()));
    }
}

// The VM `id_text` names (a unique prefix will do).
vm::VmPaths named_vm(const std::string& id_text) { return vm::find_vm(cli_run_dir(), id_text); }

// A connection to the guest agent of the running VM `paths`.
agent::AgentClient agent_of(const vm::VmPaths& paths) {
    return on_vm(paths, [&] { return vm::connect_agent(paths); });
}

int vm_start(vm::SandboxSpec spec) {
    const Fd signals = block_termination_signals();
    spec.run_dir = cli_run_dir().root;
    try {
        const vm::StartedVm started = start_vm_for_cli(spec, /*attached=*/false, signals.get());
        std::printf("%s\n", started.paths.id.c_str());
        return 0;
    } catch (const vm::Interrupted& i) {
        return 128 + i.signal;
    }
}

// `vm exec --session NAME`: the words joined into one shell line (as ssh does), run
// in the session's shell, which is opened first if it does not exist yet.
int session_exec(agent::AgentClient& client, const vm::VmPaths& paths, const VmCommandOptions& o) {
    if (!o.cwd.empty() || !o.env.empty())
        throw Error("--session: use cd and export in the session instead of --cwd and --env");
    std::string line;
    for (const std::string& word : o.argv) line += (line.empty() ? "" : " ") + word;
    try {
        client.open_session(o.session);
    } catch (const agent::AgentError& e) {
        if (e.errno_name() != "EEXIST")
            throw Error(fmt::format("VM {}: session {}: {}: {}", paths.id, o.session, e.message(), e.errno_name()));
    }
    const Fd signals = block_termination_signals();
    const auto timeout = std::chrono::milliseconds(std::chrono::seconds(o.timeout_s));
    try {
        return stream_request(
            client,
            [&](agent::OutputCallbacks callbacks) {
                return client.start_in_session(o.session, line, timeout, std::move(callbacks));
            },
            false, timeout, signals.get());
    } catch (const std::exception& e) {
        log_line(fmt::format("VM {}: the guest agent: {}", paths.id, e.what()));
        return kExecNanovmError;
    }
}

int vm_exec(const VmCommandOptions& o) {
    if (o.argv.empty() || o.argv.front().empty()) throw Error("no command: nanovm vm exec ID -- CMD ARGS...");
    for (const std::string& e : o.env) {
        if (e.find('=') == std::string::npos || e.front() == '=') throw Error(fmt::format("--env {}: want KEY=VALUE", e));
    }
    const vm::VmPaths paths = named_vm(o.id);
    agent::AgentClient client = agent_of(paths);
    if (!o.session.empty()) return session_exec(client, paths, o);
    agent::Command command = agent::Command::program(o.argv);
    command.cwd = o.cwd;
    command.env = o.env;
    command.timeout = std::chrono::seconds(o.timeout_s);
    const Fd signals = block_termination_signals();
    try {
        return exec_streaming(client, command,
                                  StreamOptions{!o.no_stdin && !::isatty(STDIN_FILENO), signals.get()});
    } catch (const std::exception& e) {
        log_line(fmt::format("VM {}: the guest agent: {}", paths.id, e.what()));
        return kExecNanovmError;
    }
}

bool host_is_directory(const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

int vm_cp(const VmCommandOptions& o) {
    const vm::CopySpec spec = vm::parse_copy_spec(o.copy_from, o.copy_to);
    const vm::CopyLocation& guest = spec.into_guest() ? spec.to : spec.from;
    const vm::VmPaths paths = named_vm(*guest.vm);
    agent::AgentClient client = agent_of(paths);
    try {
        if (spec.into_guest()) {
            const std::string& host = spec.from.path;
            if (host_is_directory(host)) throw Error(fmt::format("{}: is a directory (cp copies one file)", host));
            std::string target = guest.path;
            bool guest_dir = target.back() == '/';
            if (!guest_dir) {
                try {
                    guest_dir = client.stat(target).type == agent::proto::FileType::kDirectory;
                } catch (const agent::AgentError&) {
                    // Not there yet: the target is the file itself.
                }
            }
            if (guest_dir) target = (target.back() == '/' ? target : target + "/") + vm::path_basename(host);
            const Fd fd(::open(host.c_str(), O_RDONLY | O_CLOEXEC));
            if (!fd) throw_errno("open " + host);
            struct stat st {};
            if (::fstat(fd.get(), &st) != 0) throw_errno("stat " + host);
            vm::write_guest_file_from_fd(client, target, fd.get(),
                                         vm::GuestWriteOptions{static_cast<uint32_t>(st.st_mode & 07777)});
        } else {
            std::string target = spec.to.path;
            if (host_is_directory(target)) target += "/" + vm::path_basename(guest.path);
            const agent::proto::FileInfo info = client.stat(guest.path);
            if (info.type != agent::proto::FileType::kRegular)
                throw Error(fmt::format("{}:{}: not a regular file (cp copies one file)", *guest.vm, guest.path));
            // Written beside the target and renamed: a failed copy leaves no half file.
            const std::string part = target + ".nanovm-part";
            try {
                const Fd fd(::open(part.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
                if (!fd) throw_errno("open " + part);
                vm::read_guest_file_to_fd(client, guest.path, fd.get());
                ::fchmod(fd.get(), info.mode & 0777);
                if (::rename(part.c_str(), target.c_str()) != 0) throw_errno("rename " + part + " to " + target);
            } catch (...) {
                ::unlink(part.c_str());
                throw;
            }
        }
    } catch (const agent::AgentError& e) {
        throw Error(fmt::format("{} in VM {}: {}", e.message(), paths.id, e.errno_name()));
    } catch (const std::system_error& e) {
        throw Error(e.what());
    }
    return 0;
}

std::string format_uptime(int64_t ms) {
    const int64_t s = ms / 1000;
    if (s < 60) return fmt::format("{}s", s);
    if (s < 3600) return fmt::format("{}m{:02}s", s / 60, s % 60);
    return fmt::format("{}h{:02}m", s / 3600, (s / 60) % 60);
}

int vm_list(bool as_json) {
    const vm::RunDir run = cli_run_dir();
    std::map<std::string, std::string> endings;  // read before the directories go
    for (const vm::VmPaths& paths : vm::list_vm_dirs(run))
        if (!vm::vmm_alive(paths)) endings[paths.id] = vm::vmm_end_reason(paths);
    for (const std::string& id : vm::clean_stale_vm_dirs(run))
        log_line(fmt::format("removed the state directory of VM {}, which had ended ({})", id,
                             endings.count(id) ? endings[id] : "its VMM died"));
    json rows = json::array();
    for (const vm::VmPaths& paths : vm::list_vm_dirs(run)) {
        const vm::Adoption found = vm::adopt(run, paths.id, std::chrono::seconds(1));
        if (found.state == vm::Adoption::State::dead || found.state == vm::Adoption::State::missing)
            continue;  // it ended meanwhile
        json row{{"id", paths.id}, {"state", "unresponsive"}};
        try {
            const vm::VmInfo info = vm::read_vm_info(paths.info_file());
            row["pid"] = info.pid;
            row["cpus"] = info.cpus;
            row["memory_mib"] = info.memory_mib;
        } catch (const std::exception&) {
            row["state"] = "starting";
        }
        for (const char* key : {"state", "pid", "cpus", "memory_mib", "uptime_ms"}) {
            if (found.status.contains(key)) row[key] = found.status[key];
        }
        rows.push_back(row);
    }
    if (as_json) {
        std::printf("%s\n", rows.dump().c_str());
        return 0;
    }
    std::printf("%-12s  %-12s  %8s  %4s  %7s  %s\n", "ID", "STATE", "PID", "CPUS", "MEMORY", "UPTIME");
    for (const json& r : rows) {
        const auto num = [&r](const char* key) { return r.contains(key) ? r[key].dump() : std::string("-"); };
        std::printf("%-12s  %-12s  %8s  %4s  %7s  %s\n", r["id"].get<std::string>().c_str(),
                    r["state"].get<std::string>().c_str(), num("pid").c_str(), num("cpus").c_str(),
                    r.contains("memory_mib") ? (num("memory_mib") + "M").c_str() : "-",
                    r.contains("uptime_ms") ? format_uptime(r["uptime_ms"].get<int64_t>()).c_str() : "-");
    }
    return 0;
}

int vm_status(const std::string& id_text) {
    const vm::VmPaths paths = named_vm(id_text);
    const json status = on_vm(paths, [&] { return vm::vm_status(paths); });
    std::printf("%s\n", status.dump().c_str());
    return 0;
}

int vm_pause(const std::string& id_text, bool pause) {
    const vm::VmPaths paths = named_vm(id_text);
    on_vm(paths, [&] { return pause ? vm::pause_vm(paths) : vm::resume_vm(paths); });
    return 0;
}

int vm_stop(const VmCommandOptions& o) {
    const vm::VmPaths paths = named_vm(o.id);
    if (!vm::vmm_alive(paths)) {
        const std::string ended = vm::vmm_end_reason(paths);  // before clean_up_dead removes the log
        throw Error(fmt::format("VM {} was not running ({}); {}", paths.id, ended, clean_up_dead(paths)));
    }
    const vm::StopResult stopped =
        vm::stop_vm(paths, vm::StopRequest{o.force, std::chrono::seconds(o.stop_grace_s)});
    if (!stopped.note.empty())
        log_line(fmt::format("VM {}: {}{}", paths.id, stopped.note, stopped.killed ? ": its VMM was killed" : ""));
    if (!vm::keep_state_requested()) vm::remove_if_dead(paths);
    return 0;
}

// An absolute form of a user's directory argument.
std::string absolute_dir(const std::string& dir) {
    if (dir.empty()) throw Error("the snapshot directory is empty");
    return std::filesystem::absolute(dir).lexically_normal().string();
}

int vm_snapshot(const VmCommandOptions& o) {
    const vm::VmPaths paths = named_vm(o.id);
    const vm::SnapshotResult result = on_vm(paths, [&] {
        return vm::snapshot_vm(paths, vm::SnapshotRequest{absolute_dir(o.snapshot_dir), o.wait_durable, o.leave_paused});
    });
    std::printf("%s\n", result.answer.dump().c_str());
    return 0;
}

int vm_restore(const VmCommandOptions& o) {
    vm::SandboxSpec spec;
    spec.restore_dir = absolute_dir(o.snapshot_dir);
    spec.memory_backend = o.memory_backend;
    spec.fork_standby = o.fork_standby;
    spec.standby_sockets = o.into_standby;
    return vm_start(spec);
}

// fork: the parent freezes its disks and RAM into a fork base (it runs on as soon as
// the pause is over, over a private copy-on-write mapping of the frozen RAM), then
// `n` VMs start from it at once, each mapping the same frozen RAM privately
// (snapshot/fork_image.hpp); the base (vm.state, disk layers) lives in the run
// directory's forks/ until no VM uses it (clean_unused_fork_bases).
int vm_fork(const VmCommandOptions& o) {
    if (o.fork_count < 1 || o.fork_count > 4) throw Error(fmt::format("-n {}: must be 1 to 4", o.fork_count));
    const vm::RunDir run = cli_run_dir();
    const vm::VmPaths parent = named_vm(o.id);
    vm::ForkRequest request;
    request.count = o.fork_count;
    request.child.fork_standby = o.fork_standby;
    // Ctrl-C waits until every child answered or failed (signals blocked, unread):
    // the children are started either way, and are printed.
    const Fd signals = block_termination_signals();
    const vm::ForkResult forked = on_vm(parent, [&] { return vm::fork_vm(run, parent, request); });
    int status = 0;
    for (size_t i = 0; i < forked.children.size(); ++i) {
        if (const auto* child = std::get_if<vm::StartedVm>(&forked.children[i])) {
            std::printf("%s\n", child->paths.id.c_str());
        } else {
            const auto& failure = std::get<vm::ForkFailure>(forked.children[i]);
            print_guest_console(failure.console);
            log_line(fmt::format("fork {} of VM {}: {}", i + 1, parent.id, failure.error));
            status = 1;
        }
    }
    return status;
}

void add_standby_option(CLI::App* cmd, uint32_t& count) {
    cmd->add_option("--fork-standby", count,
                    "Standby VMMs the new VM keeps for its own forks (0 to 4): a fork child that takes one starts "
                    "without a new process or KVM set-up")
        ->type_name("N")
        ->check(CLI::Range(0u, vm::kMaxForkStandby).description(""))
        ->capture_default_str();
}

void add_shape_options(CLI::App* cmd, vm::SandboxSpec& spec) {
    cmd->add_option("--cpus", spec.cpus, "vCPUs (1 to 4)")
        ->type_name("N")
        ->check(CLI::Range(kMinCpus, kMaxCpus).description(""))
        ->capture_default_str();
    cmd->add_option("--memory", spec.memory_mib, "Guest RAM in MiB (128 to 8192)")
        ->type_name("MiB")
        ->check(CLI::Range(kMinMemoryMib, kMaxMemoryMib).description(""))
        ->capture_default_str();
    cmd->add_option("--image", spec.image,
                    "Root disk image, attached read-only and never changed [default: tools/rootfs/build's default]")
        ->type_name("IMG");
    cmd->add_option("--disk", spec.disks, "An extra raw disk: PATH[,ro][,serial=ID] (repeatable; /dev/vdc, ...)")
        ->type_name("SPEC");
}

}  // namespace

VmCommands add_vm_commands(CLI::App& app, VmCommandOptions& o) {
    VmCommands c;
    c.vm = app.add_subcommand(
        "vm", "Long-lived sandbox VMs: start, exec, cp, list, status, pause, resume, snapshot, restore, fork, stop");
    c.vm->require_subcommand(1);
    c.vm->footer("IDs may be abbreviated to a unique prefix. State: $NANOVM_RUN_DIR (default "
                 "$XDG_RUNTIME_DIR/nanovm, else ~/.cache/nanovm/run)/vms/<id>/.");

    c.start = c.vm->add_subcommand("start", "Start a sandbox VM in the background; print its id once it answers");
    add_shape_options(c.start, o.spec);
    add_standby_option(c.start, o.spec.fork_standby);

    c.exec = c.vm->add_subcommand("exec", "Run a command in a VM, streaming its output; exit with its status");
    c.exec->add_option("id", o.id, "VM id")->required();
    c.exec->add_option("--timeout", o.timeout_s, "Kill the command after S seconds")->type_name("S");
    c.exec->add_option("--cwd", o.cwd, "Working directory in the guest [default: /]")->type_name("DIR");
    c.exec->add_option("-e,--env", o.env, "Set KEY=VALUE (repeatable)")->type_name("KEY=VALUE");
    c.exec->add_flag("-n,--no-stdin", o.no_stdin, "Do not forward stdin");
    c.exec->add_option("--session", o.session,
                       "Run in the persistent shell NAME (opened if new): cwd and variables carry over; the words "
                       "after -- are joined into one shell line, as ssh does; no stdin")
        ->type_name("NAME");
    c.exec->add_option("command", o.argv, "The command and its arguments, after --")->required();
    c.exec->footer(exec_status_help(
        "bad option, no such VM, the VM is paused or not running, its agent did not answer"));

    c.cp = c.vm->add_subcommand("cp", "Copy one file: ID:/GUEST_PATH HOST_PATH, or HOST_PATH ID:/GUEST_PATH");
    c.cp->add_option("source", o.copy_from, "ID:/GUEST_PATH or HOST_PATH")->required();
    c.cp->add_option("target", o.copy_to, "HOST_PATH or ID:/GUEST_PATH (a directory: the file goes inside)")
        ->required();

    c.list = c.vm->add_subcommand("list", "The VMs of this user: id, state, pid, shape, uptime");
    c.list->add_flag("--json", o.json, "One JSON array instead of a table");

    c.status = c.vm->add_subcommand("status", "A VM's status from its control socket, as JSON");
    c.status->add_option("id", o.id, "VM id")->required();
    c.pause = c.vm->add_subcommand("pause", "Stop a VM's vCPUs (its memory and devices stay)");
    c.pause->add_option("id", o.id, "VM id")->required();
    c.resume = c.vm->add_subcommand("resume", "Let a paused VM's vCPUs run again");
    c.resume->add_option("id", o.id, "VM id")->required();

    c.stop = c.vm->add_subcommand("stop", "Power a VM off (its agent shuts the guest down) and remove its state");
    c.stop->add_option("id", o.id, "VM id")->required();
    c.stop->add_flag("--force", o.force, "Stop the vCPUs at once, without a guest power-off");
    c.stop->add_option("--timeout", o.stop_grace_s,
                       "Seconds (0 to 600) to wait for the guest's power-off before forcing it; 0: at once, as "
                       "--force [10]")
        ->type_name("S")
        ->check(CLI::Range(0, 600).description(""));

    c.snapshot = c.vm->add_subcommand(
        "snapshot", "Save a VM (memory, disk, devices, running processes) into a new directory; print timings as JSON");
    c.snapshot->add_option("id", o.id, "VM id")->required();
    c.snapshot->add_option("dir", o.snapshot_dir, "The snapshot directory (must not exist, or be empty)")->required();
    c.snapshot->add_flag("--leave-paused", o.leave_paused, "Leave the VM paused afterwards");
    c.snapshot->add_flag("--wait-durable", o.wait_durable,
                         "Return once the snapshot is on stable storage (else it finishes in the background)");
    c.restore = c.vm->add_subcommand("restore", "Start a new VM from a snapshot directory; print its id once it answers");
    c.restore->add_option("dir", o.snapshot_dir, "A snapshot directory (nanovm vm snapshot)")->required();
    c.restore->add_option("--memory-backend", o.memory_backend,
                          "file: pages served on first touch from the snapshot's memory files; uffd: the same, "
                          "after the pages the last uffd restore touched first")
        ->check(CLI::IsMember({"file", "uffd"}))
        ->capture_default_str();
    add_standby_option(c.restore, o.fork_standby);
    c.restore->add_option("--into-standby", o.into_standby,
                          "Restore into a VMM made ahead: another running VM's fork standby of the snapshot's "
                          "shape, by its socket (<run dir>/vms/<id>/standby-<n>.sock; several are tried in order)")
        ->check(CLI::ExistingPath);
    c.fork = c.vm->add_subcommand("fork", "Fork a running VM into N new VMs; print their ids");
    c.fork->add_option("id", o.id, "VM id")->required();
    c.fork->add_option("-n", o.fork_count, "How many children (1 to 4)")
        ->check(CLI::Range(1, 4).description(""))
        ->capture_default_str();
    add_standby_option(c.fork, o.fork_standby);

    c.vmm = app.add_subcommand("_vmm", "");  // hidden: the VMM process (launcher.cpp)
    c.vmm->group("");
    c.vmm->add_option("--id", o.vmm.id)->required();
    c.vmm->add_option("--run-dir", o.vmm.run_dir);
    c.vmm->add_flag("--keep-dir", o.vmm.keep_dir);
    c.vmm->add_flag("--reboot", o.vmm.reboot);
    c.vmm->add_option("--lock-fd", o.vmm.lock_fd)->required();
    c.vmm->add_option("--ready-fd", o.vmm.ready_fd);
    c.vmm->add_option("--cpus", o.vmm.cpus);
    c.vmm->add_option("--memory", o.vmm.memory_mib);
    c.vmm->add_option("--image", o.vmm.image);
    c.vmm->add_option("--restore", o.vmm.restore_dir);
    c.vmm->add_option("--memory-backend", o.vmm.memory_backend);
    c.vmm->add_option("--hostname", o.vmm.hostname);
    c.vmm->add_option("--fork-memory", o.vmm.fork_memory);
    c.vmm->add_option("--fork-delta", o.vmm.fork_delta);
    c.vmm->add_option("--disk", o.vmm.disks);
    c.vmm->add_option("--boot-timeout-ms", o.vmm_boot_timeout_ms);
    c.vmm->add_option("--fork-standby", o.vmm.fork_standby)->check(CLI::Range(0u, vm::kMaxForkStandby));

    c.standby = app.add_subcommand("_standby", "");  // hidden: a fork standby (api/vm/fork_standby.hpp)
    c.standby->group("");
    c.standby->add_option("--socket", o.standby.socket)->required();
    c.standby->add_option("--status-fd", o.standby.status_fd)->required();
    c.standby->add_option("--parent-pid", o.standby.parent_pid)->required();
    c.standby->add_option("--cpus", o.standby.vcpus)->required()->check(CLI::Range(kMinCpus, kMaxCpus));
    c.standby->add_option("--ram-bytes", o.standby.ram_bytes)->required();
    c.standby->add_option("--fork-base", o.standby.fork_base);
    return c;
}

int run_vm_command(const VmCommands& c, const VmCommandOptions& o) {
    try {
        if (*c.vmm) {
            vm::VmmOptions vmm = o.vmm;
            vmm.boot_timeout = std::chrono::milliseconds(o.vmm_boot_timeout_ms);
            return vm::run_vmm(vmm);
        }
        if (*c.standby) return vm::run_fork_standby(o.standby);
        if (*c.start) return vm_start(o.spec);
        if (*c.exec) return vm_exec(o);
        if (*c.cp) return vm_cp(o);
        if (*c.list) return vm_list(o.json);
        if (*c.status) return vm_status(o.id);
        if (*c.pause) return vm_pause(o.id, true);
        if (*c.resume) return vm_pause(o.id, false);
        if (*c.stop) return vm_stop(o);
        if (*c.snapshot) return vm_snapshot(o);
        if (*c.restore) return vm_restore(o);
        if (*c.fork) return vm_fork(o);
    } catch (const std::exception& e) {
        log_line(e.what());
        return *c.exec ? kExecNanovmError : 1;
    }
    return 2;
}

}  // namespace nanovm
