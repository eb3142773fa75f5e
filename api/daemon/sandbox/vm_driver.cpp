// The VM layer seen from the manager (vm_driver.hpp).
#include "api/daemon/sandbox/vm_driver.hpp"

#include <signal.h>

#include <thread>

#include <fmt/format.h>

#include "api/daemon/api_error.hpp"
#include "api/vm/paths.hpp"
#include "api/vm/control_client.hpp"
#include "api/vm/control_protocol.hpp"
#include "api/vm/vm_id.hpp"
#include "guest-init/protocol/frame.hpp"

namespace nanovm::daemon::vmdriver {

Started start(vm::SandboxSpec spec) {
    spec.fork_standby = 0;
    try {
        const vm::StartedVm vm = vm::start_vm(spec, /*attached=*/false, -1);
        return Started{vm.paths.id, vm.paths.dir, vm.pid};
    } catch (const vm::Interrupted&) {
        throw ApiError("vm_error", "the VM start was interrupted");
    } catch (const std::exception& e) {
        throw ApiError("vm_error", fmt::format("the sandbox's VM did not start: {}", e.what()));
    }
}

vm::VmPaths paths(const std::string& vm_id) { return vm::vm_paths(vm_id); }

bool alive(const std::string& vm_id) { return vm::is_vm_id(vm_id) && vm::vmm_alive(paths(vm_id)); }

pid_t pid(const std::string& vm_id) {
    try {
        return static_cast<pid_t>(vm::read_vm_info(paths(vm_id).info_file()).pid);
    } catch (const std::exception&) {
        return 0;
    }
}

nlohmann::json control(const std::string& vm_id, const std::string& command, const nlohmann::json& args,
                       std::chrono::milliseconds timeout) {
    try {
        return vm::control_call(paths(vm_id).control_socket(), command, args, timeout);
    } catch (const vm::ControlCommandError& e) {
        throw ApiError("vm_error", fmt::format("{}: the VMM refused: {}", command, e.what()));
    } catch (const std::exception& e) {
        throw ApiError("vm_error", fmt::format("{}: the VMM does not answer: {}", command, e.what()));
    }
}

bool stop(const std::string& vm_id) noexcept {
    try {
        if (!alive(vm_id)) return true;
        const vm::VmPaths p = paths(vm_id);
        try {
            vm::control_call(p.control_socket(), "stop", {{"force", true}}, std::chrono::seconds(5));
        } catch (const std::exception&) {
        }
        if (vm::wait_vmm_gone(p, std::chrono::seconds(10))) return true;
        if (const pid_t p_id = pid(vm_id); p_id > 0) ::kill(p_id, SIGKILL);
        return vm::wait_vmm_gone(p, std::chrono::seconds(5));
    } catch (const std::exception&) {
        return false;
    }
}

agent::AgentClient agent(const std::string& vm_id, std::chrono::milliseconds timeout) {
    try {
        return agent::AgentClient::connect(
            agent::Endpoint::vsock(paths(vm_id).vsock_socket(), agent::proto::kAgentVsockPort), timeout);
    } catch (const std::exception& e) {
        throw ApiError("vm_error", fmt::format("cannot reach the guest agent: {}", e.what()));
    }
}

std::string log_tail(const std::string& vm_id) { return vm::vmm_log_tail(paths(vm_id), 6); }

std::string image_path(const std::string& name) {
    if (name == "default" || name == "tiny") return cache_dir() + "/rootfs/" + name + "/disk.ext4";
    throw ApiError("invalid_value", fmt::format("image \"{}\": the images are default and tiny", name.substr(0, 64)));
}

}  // namespace nanovm::daemon::vmdriver
