// Control-socket operations on a running VM (see vm_ops.hpp).
#include "api/vm/vm_ops.hpp"

#include <signal.h>

#include <filesystem>
#include <thread>

#include <fmt/format.h>

#include "api/vm/adopt.hpp"
#include "api/vm/control_client.hpp"
#include "api/vm/control_protocol.hpp"
#include "api/vm/standby_keeper.hpp"

namespace nanovm::vm {

namespace {

using nlohmann::json;
using std::chrono::milliseconds;

// One control request to a VM that must be alive; the answer without "ok".
json call(const VmPaths& paths, std::string_view command, const json& args, milliseconds timeout) {
    if (!vmm_alive(paths))
        throw VmStateError(fmt::format("VM {} is not running ({})", paths.id, vmm_end_reason(paths)), "dead");
    json answer = control_call(paths.control_socket(), command, args, timeout);
    answer.erase("ok");
    return answer;
}

// SIGKILLs the VMM named in vm.json; false if there is none to kill.
bool kill_vmm(const VmPaths& paths) {
    try {
        const pid_t pid = static_cast<pid_t>(read_vm_info(paths.info_file()).pid);
        return pid > 0 && ::kill(pid, SIGKILL) == 0;
    } catch (const std::exception&) {
        return false;
    }
}

double number(const json& j, const char* key, double otherwise) {
    const auto it = j.find(key);
    return it != j.end() && it->is_number() ? it->get<double>() : otherwise;
}

}  // namespace

json vm_status(const VmPaths& paths, milliseconds timeout) {
    try {
        return call(paths, "status", nullptr, timeout);
    } catch (const VmStateError&) {
        throw;
    } catch (const std::exception& e) {
        if (!vmm_alive(paths))  // it ended meanwhile
            throw VmStateError(fmt::format("VM {} is not running ({})", paths.id, vmm_end_reason(paths)), "dead");
        throw Error(fmt::format("VM {} does not answer on its control socket: {}", paths.id, e.what()));
    }
}

json require_running(const VmPaths& paths) {
    json status = vm_status(paths);
    const std::string state = status.value("state", "");
    if (state == "paused")
        throw VmStateError(fmt::format("VM {} is paused: resume it first", paths.id), state);
    if (state != "running") throw VmStateError(fmt::format("VM {} is {}", paths.id, state), state);
    return status;
}

json pause_vm(const VmPaths& paths, bool freeze_clock) {
    return call(paths, "pause", freeze_clock ? json{{"freeze_clock", true}} : json(nullptr), std::chrono::seconds(30));
}

json resume_vm(const VmPaths& paths) { return call(paths, "resume", nullptr, std::chrono::seconds(30)); }

SnapshotResult snapshot_vm(const VmPaths& paths, const SnapshotRequest& request, milliseconds timeout) {
    if (request.dir.empty() || request.dir.front() != '/')
        throw Error(fmt::format("snapshot directory '{}': must be an absolute path", request.dir));
    const json answer = call(paths, "snapshot",
                             {{"dir", request.dir},
                              {"leave_paused", request.leave_paused},
                              {"wait_durable", request.wait_durable}},
                             timeout);
    SnapshotResult out;
    out.dir = answer.value("dir", request.dir);
    out.durable = answer.value("durable", false);
    out.snapshot_ms = number(answer, "snapshot_ms", 0);
    out.pause_ms = number(answer, "pause_ms", 0);
    out.durable_ms = number(answer, "durable_ms", -1);
    out.state = answer.value("state", "");
    out.answer = answer;
    return out;
}

StopResult stop_vm(const VmPaths& paths, const StopRequest& request) {
    StopResult out;
    if (!vmm_alive(paths)) {
        out.was_running = false;
        return out;
    }
    try {
        control_call(paths.control_socket(), "stop",
                     {{"force", request.force || request.grace.count() == 0}, {"timeout_ms", request.grace.count()}});
    } catch (const std::exception& e) {
        out.note = fmt::format("the stop request failed ({})", e.what());
        out.killed = kill_vmm(paths);
    }
    if (!wait_vmm_gone(paths, request.grace + std::chrono::seconds(10))) {
        if (out.note.empty()) out.note = "its VMM did not exit";
        out.killed = kill_vmm(paths) || out.killed;
        if (!wait_vmm_gone(paths, std::chrono::seconds(5)))
            throw Error(fmt::format("VM {}: its VMM does not exit, even after SIGKILL", paths.id));
    }
    return out;
}

StartedVm restore_vm(SandboxSpec spec, const std::string& dir, bool attached, int signal_fd) {
    spec.restore_dir = dir;
    return start_vm(spec, attached, signal_fd);
}

ForkResult fork_vm(const RunDir& run, const VmPaths& parent, const ForkRequest& request) {
    if (request.count < 1 || request.count > 4) throw Error(fmt::format("fork: {} children: must be 1 to 4", request.count));
    // Held until the children hold it themselves, so that no clean-up takes it away.
    const ForkBase fork_base = new_fork_base(run, parent.id);
    ForkResult out;
    out.base_dir = fork_base.dir;
    try {
        out.answer = call(parent, "fork", {{"dir", fork_base.dir}}, std::chrono::minutes(5));
        out.answer.at("memfds").get<std::string>();  // a malformed answer fails here
    } catch (...) {
        std::error_code ec;
        std::filesystem::remove_all(std::filesystem::path(fork_base.dir).parent_path(), ec);
        throw;
    }
    SandboxSpec spec = request.child;
    spec.run_dir = run.root;
    spec.restore_dir = fork_base.dir;
    spec.fork_memory = out.answer.at("memfds").get<std::string>();
    spec.fork_delta = out.answer.value("delta", std::string());
    // The parent's standbys (standby_keeper.hpp): each child takes the first free one.
    spec.standby_sockets = standby_sockets(parent.dir);
    out.children.resize(request.count);
    std::vector<std::thread> starters;
    for (uint32_t i = 0; i < request.count; ++i) {
        starters.emplace_back([&, i] {
            try {
                out.children[i] = start_vm(spec, /*attached=*/false);
            } catch (const StartError& e) {
                out.children[i] = ForkFailure{e.what(), e.console()};
            } catch (const std::exception& e) {
                out.children[i] = ForkFailure{e.what(), {}};
            } catch (const Interrupted&) {
                out.children[i] = ForkFailure{"interrupted", {}};
            }
        });
    }
    for (std::thread& t : starters) t.join();
    return out;
}

}  // namespace nanovm::vm
