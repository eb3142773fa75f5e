// Guest agent operations on a running VM (see guest_ops.hpp).
#include "api/vm/guest_ops.hpp"

#include <unistd.h>

#include <cerrno>

#include <fmt/format.h>

#include "api/vm/vm_ops.hpp"
#include "vmm/error.hpp"
#include "vmm/fd.hpp"

namespace nanovm::vm {

namespace {

// Reads up to `size` bytes of `fd` (EINTR retried). Throws SysError.
size_t read_some(int fd, char* buf, size_t size) {
    for (;;) {
        const ssize_t n = ::read(fd, buf, size);
        if (n >= 0) return static_cast<size_t>(n);
        if (errno != EINTR) throw_errno("read");
    }
}

}  // namespace

agent::AgentClient connect_agent(const VmPaths& paths, std::chrono::milliseconds timeout) {
    require_running(paths);
    try {
        return agent::AgentClient::connect(agent::Endpoint::vsock(paths.vsock_socket(), agent::proto::kAgentVsockPort),
                                           timeout);
    } catch (const std::exception& e) {
        throw Error(fmt::format("VM {}: cannot reach its guest agent: {}", paths.id, e.what()));
    }
}

agent::ExecResult exec_command(agent::AgentClient& client, const agent::Command& command,
                               const agent::OutputCallbacks& callbacks) {
    return client.run(command, callbacks);
}

agent::ExecResult exec_command(const VmPaths& paths, const agent::Command& command,
                               const agent::OutputCallbacks& callbacks) {
    agent::AgentClient client = connect_agent(paths);
    return exec_command(client, command, callbacks);
}

uint64_t read_guest_file(agent::AgentClient& client, const std::string& guest_path,
                         const std::function<void(std::string_view)>& sink) {
    return client.read_file(guest_path, sink);
}

uint64_t read_guest_file(const VmPaths& paths, const std::string& guest_path,
                         const std::function<void(std::string_view)>& sink) {
    agent::AgentClient client = connect_agent(paths);
    return read_guest_file(client, guest_path, sink);
}

uint64_t read_guest_file_to_fd(agent::AgentClient& client, const std::string& guest_path, int fd) {
    return client.read_file(guest_path, [fd](std::string_view chunk) { write_all(fd, chunk); });
}

uint64_t read_guest_file_to_fd(const VmPaths& paths, const std::string& guest_path, int fd) {
    agent::AgentClient client = connect_agent(paths);
    return read_guest_file_to_fd(client, guest_path, fd);
}

std::string guest_parent(std::string_view guest_path) {
    while (guest_path.size() > 1 && guest_path.back() == '/') guest_path.remove_suffix(1);
    const size_t slash = guest_path.rfind('/');
    if (slash == std::string_view::npos) return "";
    return slash == 0 ? "/" : std::string(guest_path.substr(0, slash));
}

uint64_t write_guest_file(agent::AgentClient& client, const std::string& guest_path,
                          const std::function<size_t(char*, size_t)>& source, const GuestWriteOptions& options) {
    if (options.make_parents) {
        // The agent writes a temporary file in the target's directory, which must
        // exist; mkdir -p is one round trip and succeeds for an existing directory.
        const std::string parent = guest_parent(guest_path);
        if (!parent.empty() && parent != "/") client.mkdir(parent, 0755, /*parents=*/true);
    }
    return client.write_file(guest_path, source, agent::WriteOptions{options.mode, options.sync});
}

uint64_t write_guest_file(const VmPaths& paths, const std::string& guest_path,
                          const std::function<size_t(char*, size_t)>& source, const GuestWriteOptions& options) {
    agent::AgentClient client = connect_agent(paths);
    return write_guest_file(client, guest_path, source, options);
}

uint64_t write_guest_file_from_fd(agent::AgentClient& client, const std::string& guest_path, int fd,
                                  const GuestWriteOptions& options) {
    return write_guest_file(
        client, guest_path, [fd](char* buf, size_t size) { return read_some(fd, buf, size); }, options);
}

uint64_t write_guest_file_from_fd(const VmPaths& paths, const std::string& guest_path, int fd,
                                  const GuestWriteOptions& options) {
    agent::AgentClient client = connect_agent(paths);
    return write_guest_file_from_fd(client, guest_path, fd, options);
}

}  // namespace nanovm::vm
