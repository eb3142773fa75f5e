// `nanovm vm ...` (see vm_command.hpp).
#include "api/cli/vm_command.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <thread>
#include <iostream>
#include <map>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "api/agent_client/agent_client.hpp"
#include "api/cli/run_command.hpp"
#include "api/vm/boot_options.hpp"
#include "api/vm/control_client.hpp"
#include "api/vm/control_protocol.hpp"
#include "api/vm/copy_spec.hpp"
#include "api/vm/exec_stream.hpp"
#include "api/vm/launcher.hpp"
#include "api/vm/standby_keeper.hpp"
#include "api/vm/state_dir.hpp"
#include "api/vm/termination_signals.hpp"
#include "vmm/error.hpp"
#include "vmm/log.hpp"

namespace nanovm {

namespace {

using nlohmann::json;

// The VM `id_text` names, checked to be alive and answering; its status.
struct LiveVm {
    vm::VmPaths paths;
    json status;
};

// How much of a dead VM's vmm.log its error shows: the "ended" line and, after a
// guest crash, the console lines the VMM logged just before it (a panic's reason).
constexpr size_t kDeadVmLogLines = 6;

// What a dead VM's vmm.log says about its end, for an error or `vm list`.
std::string how_it_ended(const vm::VmPaths& paths) {
    const std::string last = vm::vmm_log_tail(paths, kDeadVmLogLines);
    return last.empty() ? "its VMM died without a word in its log" : "the end of its log: " + last;
}

// Removes a dead VM's directory unless NANOVM_KEEP_STATE=1 asks to keep it; says which.
std::string clean_up_dead(const vm::VmPaths& paths) {
    if (vm::keep_state_requested()) return fmt::format("its state directory {} is kept (NANOVM_KEEP_STATE=1)", paths.dir);
    vm::remove_if_dead(paths);
    return "its state directory was removed";
}

LiveVm live_vm(const std::string& id_text) {
    const vm::VmPaths paths = vm::find_vm(id_text);
    if (!vm::vmm_alive(paths)) {
        const std::string ended = how_it_ended(paths);  // before clean_up_dead removes the log
        throw Error(fmt::format("VM {} is not running ({}); {}", paths.id, ended, clean_up_dead(paths)));
    }
    json status;
    try {
        status = vm::control_call(paths.control_socket(), "status");
    } catch (const std::exception& e) {
        throw Error(fmt::format("VM {} does not answer on its control socket: {}", paths.id, e.what()));
    }
    return LiveVm{paths, std::move(status)};
}

// A live VM whose agent can take commands now.
agent::AgentClient agent_of(const LiveVm& vm) {
    const std::string state = vm.status.value("state", "");
    if (state == "paused")
        throw Error(fmt::format("VM {} is paused: resume it first (nanovm vm resume {})", vm.paths.id, vm.paths.id));
    if (state != "running") throw Error(fmt::format("VM {} is {}", vm.paths.id, state));
    try {
        return agent::AgentClient::connect(agent::Endpoint::vsock(vm.paths.vsock_socket(), agent::proto::kAgentVsockPort));
    } catch (const std::exception& e) {
        throw Error(fmt::format("VM {}: cannot reach its guest agent: {}", vm.paths.id, e.what()));
    }
}

int vm_start(const vm::SandboxSpec& spec) {
    const Fd signals = block_termination_signals();
    try {
        const vm::StartedVm started = vm::start_vm(spec, /*attached=*/false, signals.get());
        std::printf("%s\n", started.paths.id.c_str());
        return 0;
    } catch (const vm::Interrupted& i) {
        return 128 + i.signal;
    }
}

// `vm exec --session NAME`: the words joined into one shell line (as ssh does), run
// in the session's shell, which is opened first if it does not exist yet.
int session_exec(agent::AgentClient& client, const LiveVm& vm, const VmCommandOptions& o) {
    if (!o.cwd.empty() || !o.env.empty())
        throw Error("--session: use cd and export in the session instead of --cwd and --env");
    std::string line;
    for (const std::string& word : o.argv) line += (line.empty() ? "" : " ") + word;
    try {
        client.open_session(o.session);
    } catch (const agent::AgentError& e) {
        if (e.errno_name() != "EEXIST")
            throw Error(fmt::format("VM {}: session {}: {}: {}", vm.paths.id, o.session, e.message(), e.errno_name()));
    }
    const Fd signals = block_termination_signals();
    const auto timeout = std::chrono::milliseconds(std::chrono::seconds(o.timeout_s));
    try {
        return vm::stream_request(
            client,
            [&](agent::OutputCallbacks callbacks) {
                return client.start_in_session(o.session, line, timeout, std::move(callbacks));
            },
            false, timeout, signals.get());
    } catch (const std::exception& e) {
        log_line(fmt::format("VM {}: the guest agent: {}", vm.paths.id, e.what()));
        return vm::kExecNanovmError;
    }
}

int vm_exec(const VmCommandOptions& o) {
    if (o.argv.empty() || o.argv.front().empty()) throw Error("no command: nanovm vm exec ID -- CMD ARGS...");
    for (const std::string& e : o.env) {
        if (e.find('=') == std::string::npos || e.front() == '=') throw Error(fmt::format("--env {}: want KEY=VALUE", e));
    }
    const LiveVm vm = live_vm(o.id);
    agent::AgentClient client = agent_of(vm);
    if (!o.session.empty()) return session_exec(client, vm, o);
    agent::Command command = agent::Command::program(o.argv);
    command.cwd = o.cwd;
    command.env = o.env;
    command.timeout = std::chrono::seconds(o.timeout_s);
    const Fd signals = block_termination_signals();
    try {
        return vm::exec_streaming(client, command,
                                  vm::StreamOptions{!o.no_stdin && !::isatty(STDIN_FILENO), signals.get()});
    } catch (const std::exception& e) {
        log_line(fmt::format("VM {}: the guest agent: {}", vm.paths.id, e.what()));
        return vm::kExecNanovmError;
    }
}

bool host_is_directory(const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

int vm_cp(const VmCommandOptions& o) {
    const vm::CopySpec spec = vm::parse_copy_spec(o.copy_from, o.copy_to);
    const vm::CopyLocation& guest = spec.into_guest() ? spec.to : spec.from;
    const LiveVm vm = live_vm(*guest.vm);
    agent::AgentClient client = agent_of(vm);
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
            try {
                client.upload(host, target);
            } catch (const std::system_error& e) {
                throw Error(e.what());
            }
        } else {
            std::string target = spec.to.path;
            if (host_is_directory(target)) target += "/" + vm::path_basename(guest.path);
            const agent::proto::FileInfo info = client.stat(guest.path);
            if (info.type != agent::proto::FileType::kRegular)
                throw Error(fmt::format("{}:{}: not a regular file (cp copies one file)", *guest.vm, guest.path));
            // Written beside the target and renamed: a failed copy leaves no half file.
            const std::string part = target + ".nanovm-part";
            try {
                client.download(guest.path, part);
                ::chmod(part.c_str(), info.mode & 0777);
                if (::rename(part.c_str(), target.c_str()) != 0) throw_errno("rename " + part + " to " + target);
            } catch (...) {
                ::unlink(part.c_str());
                throw;
            }
        }
    } catch (const agent::AgentError& e) {
        throw Error(fmt::format("{} in VM {}: {}", e.message(), vm.paths.id, e.errno_name()));
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
    std::map<std::string, std::string> endings;  // read before the directories go
    for (const vm::VmPaths& paths : vm::list_vm_dirs())
        if (!vm::vmm_alive(paths)) endings[paths.id] = how_it_ended(paths);
    for (const std::string& id : vm::clean_stale_vm_dirs())
        log_line(fmt::format("removed the state directory of VM {}, which had ended ({})", id,
                             endings.count(id) ? endings[id] : "its VMM died"));
    json rows = json::array();
    for (const vm::VmPaths& paths : vm::list_vm_dirs()) {
        json row{{"id", paths.id}, {"state", "unresponsive"}};
        try {
            const vm::VmInfo info = vm::read_vm_info(paths.info_file());
            row["pid"] = info.pid;
            row["cpus"] = info.cpus;
            row["memory_mib"] = info.memory_mib;
        } catch (const std::exception&) {
            row["state"] = "starting";
        }
        try {
            const json status = vm::control_call(paths.control_socket(), "status", nullptr, std::chrono::seconds(1));
            for (const char* key : {"state", "pid", "cpus", "memory_mib", "uptime_ms"}) {
                if (status.contains(key)) row[key] = status[key];
            }
        } catch (const std::exception&) {
            if (!vm::vmm_alive(paths)) continue;  // it ended meanwhile
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

int vm_control(const std::string& id_text, const char* command) {
    const LiveVm vm = live_vm(id_text);
    try {
        const json answer = vm::control_call(vm.paths.control_socket(), command);
        if (std::string(command) == "status") {
            json status = answer;
            status.erase("ok");
            std::printf("%s\n", status.dump().c_str());
        }
    } catch (const vm::ControlCommandError& e) {
        throw Error(fmt::format("VM {}: {}", vm.paths.id, e.what()));
    }
    return 0;
}

int vm_stop(const VmCommandOptions& o) {
    const vm::VmPaths paths = vm::find_vm(o.id);
    if (!vm::vmm_alive(paths)) {
        const std::string ended = how_it_ended(paths);  // before clean_up_dead removes the log
        throw Error(fmt::format("VM {} was not running ({}); {}", paths.id, ended, clean_up_dead(paths)));
    }
    const auto grace = std::chrono::seconds(o.stop_grace_s);
    try {
        vm::control_call(paths.control_socket(), "stop",
                         {{"force", o.force || o.stop_grace_s == 0},
                          {"timeout_ms", std::chrono::duration_cast<std::chrono::milliseconds>(grace).count()}});
    } catch (const std::exception& e) {
        log_line(fmt::format("VM {}: the stop request failed ({}); killing its VMM", paths.id, e.what()));
        try {
            ::kill(static_cast<pid_t>(vm::read_vm_info(paths.info_file()).pid), SIGKILL);
        } catch (const std::exception&) {
        }
    }
    if (!vm::wait_vmm_gone(paths, grace + std::chrono::seconds(10))) {
        log_line(fmt::format("VM {}: its VMM did not exit: killing it", paths.id));
        try {
            ::kill(static_cast<pid_t>(vm::read_vm_info(paths.info_file()).pid), SIGKILL);
        } catch (const std::exception&) {
        }
        if (!vm::wait_vmm_gone(paths, std::chrono::seconds(5)))
            throw Error(fmt::format("VM {}: its VMM does not exit", paths.id));
    }
    if (!vm::keep_state_requested()) vm::remove_if_dead(paths);
    return 0;
}

// An absolute form of a user's directory argument.
std::string absolute_dir(const std::string& dir) {
    if (dir.empty()) throw Error("the snapshot directory is empty");
    return std::filesystem::absolute(dir).lexically_normal().string();
}

int vm_snapshot(const VmCommandOptions& o) {
    const LiveVm vm = live_vm(o.id);
    const std::string dir = absolute_dir(o.snapshot_dir);
    json answer;
    try {
        answer = vm::control_call(vm.paths.control_socket(), "snapshot",
                                  {{"dir", dir}, {"leave_paused", o.leave_paused}, {"wait_durable", o.wait_durable}},
                                  std::chrono::minutes(30));
    } catch (const vm::ControlCommandError& e) {
        throw Error(fmt::format("VM {}: {}", vm.paths.id, e.what()));
    }
    answer.erase("ok");
    std::printf("%s\n", answer.dump().c_str());
    return 0;
}

int vm_restore(const VmCommandOptions& o) {
    vm::SandboxSpec spec;
    spec.restore_dir = absolute_dir(o.snapshot_dir);
    spec.memory_backend = o.memory_backend;
    spec.fork_standby = o.fork_standby;
    return vm_start(spec);
}

// fork: the parent freezes its disks and RAM into a fork base (it runs on as soon as
// the pause is over, over a private copy-on-write mapping of the frozen RAM), then
// `n` VMs start from it at once, each mapping the same frozen RAM privately
// (snapshot/fork_image.hpp); the base (vm.state, disk layers) lives in the run
// directory's forks/ until no VM uses it (clean_unused_fork_bases).
int vm_fork(const VmCommandOptions& o) {
    if (o.fork_count < 1 || o.fork_count > 4) throw Error(fmt::format("-n {}: must be 1 to 4", o.fork_count));
    const LiveVm parent = live_vm(o.id);
    // Held until the children hold it themselves, so that no cleanup takes the base away.
    const vm::ForkBase fork_base = vm::new_fork_base(parent.paths.id);
    const std::string& base = fork_base.dir;
    std::string memfds, delta;
    try {
        const nlohmann::json answer = vm::control_call(parent.paths.control_socket(), "fork", {{"dir", base}},
                                                       std::chrono::minutes(5));
        memfds = answer.at("memfds").get<std::string>();
        delta = answer.value("delta", std::string());
    } catch (const std::exception& e) {
        std::error_code ec;
        std::filesystem::remove_all(base, ec);
        throw Error(fmt::format("VM {}: fork: {}", parent.paths.id, e.what()));
    }
    // Ctrl-C waits until every child answered or failed: a VMM whose readiness pipe
    // has no reader any more would die of SIGPIPE on "ready".
    const Fd signals = block_termination_signals();
    // The parent's standbys (api/vm/standby_keeper.hpp): each child takes the first free one.
    const std::vector<std::string> standby_sockets = vm::standby_sockets(parent.paths.dir);
    std::vector<std::thread> starters;
    std::vector<std::string> ids(o.fork_count), errors(o.fork_count);
    for (uint32_t i = 0; i < o.fork_count; ++i) {
        starters.emplace_back([&, i] {
            try {
                vm::SandboxSpec spec;
                spec.restore_dir = base;
                spec.fork_memory = memfds;
                spec.fork_delta = delta;
                spec.fork_standby = o.fork_standby;
                spec.standby_sockets = standby_sockets;
                ids[i] = vm::start_vm(spec, /*attached=*/false).paths.id;
            } catch (const std::exception& e) {
                errors[i] = e.what();
            }
        });
    }
    for (std::thread& t : starters) t.join();
    int status = 0;
    for (uint32_t i = 0; i < o.fork_count; ++i) {
        if (!ids[i].empty()) {
            std::printf("%s\n", ids[i].c_str());
        } else {
            log_line(fmt::format("fork {} of VM {}: {}", i + 1, parent.paths.id, errors[i]));
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
                          "file: private mapping of the snapshot's memory file (page cache shared); uffd: pages "
                          "served on first touch")
        ->check(CLI::IsMember({"file", "uffd"}))
        ->capture_default_str();
    add_standby_option(c.restore, o.fork_standby);
    c.fork = c.vm->add_subcommand("fork", "Fork a running VM into N new VMs; print their ids");
    c.fork->add_option("id", o.id, "VM id")->required();
    c.fork->add_option("-n", o.fork_count, "How many children (1 to 4)")
        ->check(CLI::Range(1, 4).description(""))
        ->capture_default_str();
    add_standby_option(c.fork, o.fork_standby);

    c.vmm = app.add_subcommand("_vmm", "");  // hidden: the VMM process (launcher.cpp)
    c.vmm->group("");
    c.vmm->add_option("--id", o.vmm.id)->required();
    c.vmm->add_option("--lock-fd", o.vmm.lock_fd)->required();
    c.vmm->add_option("--ready-fd", o.vmm.ready_fd);
    c.vmm->add_option("--cpus", o.vmm.cpus);
    c.vmm->add_option("--memory", o.vmm.memory_mib);
    c.vmm->add_option("--image", o.vmm.image);
    c.vmm->add_option("--restore", o.vmm.restore_dir);
    c.vmm->add_option("--memory-backend", o.vmm.memory_backend);
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
        if (*c.status) return vm_control(o.id, "status");
        if (*c.pause) return vm_control(o.id, "pause");
        if (*c.resume) return vm_control(o.id, "resume");
        if (*c.stop) return vm_stop(o);
        if (*c.snapshot) return vm_snapshot(o);
        if (*c.restore) return vm_restore(o);
        if (*c.fork) return vm_fork(o);
    } catch (const std::exception& e) {
        log_line(e.what());
        return *c.exec ? vm::kExecNanovmError : 1;
    }
    return 2;
}

}  // namespace nanovm
