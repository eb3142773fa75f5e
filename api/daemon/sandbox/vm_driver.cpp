// The VM layer seen from the manager (vm_driver.hpp).
#include "api/daemon/sandbox/vm_driver.hpp"

#include <filesystem>

#include <fmt/format.h>

#include "api/daemon/api_error.hpp"
#include "api/vm/control_protocol.hpp"
#include "api/vm/guest_ops.hpp"
#include "api/vm/paths.hpp"
#include "api/vm/vm_id.hpp"
#include "api/vm/vm_ops.hpp"

namespace nanovm::daemon {

namespace {

// The catalogue error for a failure of the VM layer: disk_full when the state file
// system is full, else vm_error; `what` names the operation.
[[noreturn]] void throw_vm_error(const std::string& what, const std::exception& e) {
    const std::string message = fmt::format("{}: {}", what, e.what());
    if (message.find("No space left on device") != std::string::npos) throw ApiError("disk_full", message);
    throw ApiError("vm_error", message);
}

}  // namespace

VmDriver::Started VmDriver::start(uint32_t cpus, uint32_t memory_mib, const std::string& image,
                                  const std::string& restore_dir, const std::vector<std::string>& standby_sockets,
                                  const std::string& hostname) {
    vm::SandboxSpec spec;
    spec.run_dir = run_.root;
    spec.keep_dir = true;
    spec.fork_standby = 0;
    spec.cpus = cpus;
    spec.memory_mib = memory_mib;
    spec.image = image;
    spec.restore_dir = restore_dir;
    // A template's restores: the uffd backend copies in the pages the template's
    // last restore touched first (prefetch.pages beside its snapshot) instead of
    // faulting each in (issue 19: ~300 faults of ~2.5 ms each by the agent's first answer).
    if (!restore_dir.empty()) spec.memory_backend = "uffd";
    spec.standby_sockets = standby_sockets;
    spec.hostname = hostname;
    try {
        const vm::StartedVm vm = vm::start_vm(spec, /*attached=*/false, -1);
        return Started{vm.paths.id, vm.paths.dir, vm.pid, vm.from_standby};
    } catch (const vm::StartError& e) {
        vm::remove_vm_dir(e.paths());  // nothing of it is recorded yet
        std::string message = e.what();
        if (!e.console().empty()) message += fmt::format(" (the guest console's last line: {})", e.console().back());
        throw ApiError("vm_error", fmt::format("the sandbox's VM did not start: {}", message));
    } catch (const vm::Interrupted&) {
        throw ApiError("vm_error", "the VM start was interrupted");
    } catch (const std::exception& e) {
        throw_vm_error("the sandbox's VM did not start", e);
    }
}

VmDriver::Fork VmDriver::fork(const std::string& vm_id, uint32_t n) {
    vm::ForkRequest request;
    request.count = n;
    request.child.run_dir = run_.root;
    request.child.keep_dir = true;
    request.child.fork_standby = 0;
    vm::ForkResult result;
    try {
        result = vm::fork_vm(run_, paths(vm_id), request);
    } catch (const std::exception& e) {
        throw_vm_error("fork", e);
    }
    Fork out;
    out.base_dir = result.base_dir;
    out.base_root = std::filesystem::path(result.base_dir).parent_path().string();
    for (vm::ForkChild& child : result.children) {
        ForkChild c;
        if (const auto* started = std::get_if<vm::StartedVm>(&child)) {
            c.started = Started{started->paths.id, started->paths.dir, started->pid};
        } else {
            const auto& failure = std::get<vm::ForkFailure>(child);
            c.error = failure.error;
            if (!failure.console.empty()) c.error += fmt::format(" (the guest console's last line: {})", failure.console.back());
        }
        out.children.push_back(std::move(c));
    }
    return out;
}

vm::VmPaths VmDriver::paths(const std::string& vm_id) const {
    if (!vm::is_vm_id(vm_id)) throw ApiError("internal", fmt::format("\"{}\" is not a VM id", vm_id.substr(0, 32)));
    return run_.vm(vm_id);
}

bool VmDriver::alive(const std::string& vm_id) const { return vm::is_vm_id(vm_id) && vm::vmm_alive(run_.vm(vm_id)); }

pid_t VmDriver::pid(const std::string& vm_id) const {
    try {
        return static_cast<pid_t>(vm::read_vm_info(paths(vm_id).info_file()).pid);
    } catch (const std::exception&) {
        return 0;
    }
}

vm::Adoption VmDriver::adopt(const std::string& vm_id) const { return vm::adopt(run_, vm_id, std::chrono::seconds(5)); }

std::string VmDriver::end_reason(const std::string& vm_id) const {
    return vm::is_vm_id(vm_id) ? vm::vmm_end_reason(run_.vm(vm_id)) : std::string("no VMM was started");
}

VmDriver::Started VmDriver::reboot(const std::string& vm_id) {
    vm::SandboxSpec spec;
    spec.run_dir = run_.root;
    spec.keep_dir = true;
    spec.fork_standby = 0;
    try {
        const vm::StartedVm vm = vm::reboot_vm(paths(vm_id), spec, /*attached=*/false, -1);
        return Started{vm.paths.id, vm.paths.dir, vm.pid};
    } catch (const vm::StartError& e) {
        std::string message = e.what();
        if (!e.console().empty()) message += fmt::format(" (the guest console's last line: {})", e.console().back());
        throw ApiError("vm_error", fmt::format("the sandbox's VM did not boot again: {}", message));
    } catch (const vm::Interrupted&) {
        throw ApiError("vm_error", "the reboot was interrupted");
    } catch (const std::exception& e) {
        throw_vm_error("reboot", e);
    }
}

bool VmDriver::ended_in_reboot(const std::string& vm_id) const {
    if (!vm::is_vm_id(vm_id)) return false;
    return vm::vmm_end_reason(run_.vm(vm_id)).starts_with(fmt::format("VM {} ended: reboot", vm_id));
}

void VmDriver::pause(const std::string& vm_id, bool freeze_clock) {
    try {
        vm::pause_vm(paths(vm_id), freeze_clock);
    } catch (const std::exception& e) {
        throw_vm_error("pause", e);
    }
}

bool VmDriver::resume(const std::string& vm_id) {
    try {
        return vm::resume_vm(paths(vm_id)).value("clock_set_back", false);
    } catch (const std::exception& e) {
        throw_vm_error("resume", e);
    }
}

bool VmDriver::snapshot(const std::string& vm_id, const std::string& dir, bool wait_durable, bool leave_paused) {
    try {
        vm::SnapshotRequest request;
        request.dir = dir;
        request.wait_durable = wait_durable;
        request.leave_paused = leave_paused;
        return vm::snapshot_vm(paths(vm_id), request).durable;
    } catch (const std::exception& e) {
        throw_vm_error("snapshot", e);
    }
}

bool VmDriver::stop(const std::string& vm_id) noexcept {
    try {
        if (!alive(vm_id)) return true;
        vm::StopRequest request;
        request.force = true;
        request.grace = std::chrono::milliseconds(0);
        vm::stop_vm(paths(vm_id), request);
        return !alive(vm_id);
    } catch (const std::exception&) {
        return !alive(vm_id);
    }
}

agent::AgentClient VmDriver::agent(const std::string& vm_id, std::chrono::milliseconds timeout) {
    const vm::VmPaths p = paths(vm_id);
    try {
        // The store said running (every caller checks the sandbox's state first), so
        // the connection is made at once; the VMM's own state is asked only when it
        // fails, to say why (a control-socket round trip on every call otherwise: ~5 ms
        // of each exec and file call in the test host).
        return agent::AgentClient::connect(agent::Endpoint::vsock(p.vsock_socket(), agent::proto::kAgentVsockPort),
                                           timeout);
    } catch (const std::exception& connect_error) {
        try {
            vm::require_running(p);
        } catch (const vm::VmStateError& e) {
            if (e.state() == "paused") throw ApiError("sandbox_paused", "the sandbox is paused: resume it first");
            throw ApiError("vm_error", e.what());
        } catch (const std::exception& e) {
            throw_vm_error("the guest agent", e);
        }
        throw ApiError("vm_error", fmt::format("the guest agent: VM {}: cannot reach its guest agent: {}", p.id,
                                               connect_error.what()));
    }
}

std::vector<vm::VmPaths> VmDriver::vm_dirs() const { return vm::list_vm_dirs(run_); }

std::string VmDriver::image_path(const std::string& name) {
    if (name == "default" || name == "tiny") return cache_dir() + "/rootfs/" + name + "/disk.ext4";
    throw ApiError("invalid_value", fmt::format("image \"{}\": the images are default and tiny", name.substr(0, 64)));
}

}  // namespace nanovm::daemon
