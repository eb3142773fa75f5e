// The standby VMM process (see fork_standby.hpp).
#include "api/vm/fork_standby.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include <fmt/format.h>

#include "api/vm/standby_handoff.hpp"
#include "api/vm/state_dir.hpp"
#include "api/vm/vmm_process.hpp"
#include "snapshot/fork_image.hpp"
#include "vmm/error.hpp"
#include "vmm/fd.hpp"
#include "vmm/kvm.hpp"
#include "vmm/kvm_flavour.hpp"
#include "vmm/log.hpp"

namespace nanovm::vm {

namespace {

using namespace std::chrono_literals;

void say(int fd, std::string_view line) {
    [[maybe_unused]] const ssize_t n = ::write(fd, line.data(), line.size());
}

Fd listen_on(const std::string& path) {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (path.size() >= sizeof(addr.sun_path)) throw Error(path + ": path too long for a unix socket");
    std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
    Fd sock(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
    if (!sock) throw_errno("socket");
    ::unlink(path.c_str());
    if (::bind(sock.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) throw_errno("bind " + path);
    if (::listen(sock.get(), 4) != 0) throw_errno("listen " + path);
    return sock;
}

// Throws Error unless snapshot `dir`'s machine (its checked vm.state) has the shape `machine` was made for.
void check_restore_shape(const std::string& dir, const Machine& machine) {
    const std::string state_path = snapshot::snapshot_part(dir, snapshot::kStateFileName);
    const snapshot::VmState state = snapshot::decode_vm_state(snapshot::read_checked_state(dir), state_path);
    const snapshot::MachineInfo mine = snapshot::machine_shape(machine);
    if (!snapshot::same_shape(state.machine, mine))
        throw Error(fmt::format("the snapshot's machine ({}) is not this standby's ({})",
                                snapshot::describe_shape(state.machine), snapshot::describe_shape(mine)));
}

}  // namespace

int run_fork_standby(const StandbyOptions& o) {
    // Claimed, it becomes a VMM: one whose launcher went away must not die of SIGPIPE.
    // (Unclaimed, a vanished keeper is seen through the parent's pidfd.)
    ::signal(SIGPIPE, SIG_IGN);
    const std::string name = fmt::format("standby {}", o.socket.substr(o.socket.rfind('/') + 1));
    Fd status(o.status_fd);
    snapshot::ForkStandby standby;
    Fd listener, parent;
    try {
        parent = Fd(static_cast<int>(::syscall(SYS_pidfd_open, o.parent_pid, 0)));
        if (!parent || ::getppid() != o.parent_pid) return 0;  // the parent is gone already
        // What a cold VMM checks first (api/vm/linux_vm.cpp), done here ahead of the fork.
        require_linux_capable_kvm(detect_kvm_host());
        const Kvm kvm = Kvm::open();
        snapshot::MachineInfo shape;
        shape.vcpus = o.vcpus;
        shape.irqchip = 1;  // a Linux VM's (api/vm/linux_vm.cpp)
        shape.ram_bytes = o.ram_bytes;
        standby.machine = snapshot::make_fork_standby(kvm, shape);
        if (!o.fork_base.empty()) {
            try {
                standby.chain = snapshot::serve_fork_standby(*standby.machine, o.fork_base);
            } catch (const std::exception& e) {
                // A fork claim serves the chain itself then (restore_fork).
                log_line(fmt::format("{}: the parent's chain is not served ahead: {}", name, e.what()));
            }
        }
        listener = listen_on(o.socket);
    } catch (const std::exception& e) {
        log_line(fmt::format("{}: {}", name, e.what()));
        ::unlink(o.socket.c_str());
        return 1;
    }
    say(status.get(), "ready\n");
    for (;;) {
        pollfd fds[2] = {{listener.get(), POLLIN, 0}, {parent.get(), POLLIN, 0}};
        if (::poll(fds, 2, -1) < 0) {
            if (errno == EINTR) continue;
            log_line(fmt::format("{}: poll: {}", name, std::strerror(errno)));
            ::unlink(o.socket.c_str());
            return 1;
        }
        if (fds[1].revents) {  // the parent VMM exited: no fork will come
            ::unlink(o.socket.c_str());
            return 0;
        }
        if (!(fds[0].revents & POLLIN)) continue;
        const Fd conn(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
        if (!conn) continue;
        StandbyClaim claim;
        try {
            claim = receive_claim(conn.get(), 2000ms);
            if (claim.options.restore_dir.empty())
                throw Error("standby claim: neither a fork nor a restore (no restore_dir)");
            // A restore: the snapshot must be of this standby's shape (a fork child's
            // always is: the standby was made for its parent).
            if (claim.options.fork_memory.empty()) check_restore_shape(claim.options.restore_dir, *standby.machine);
        } catch (const std::exception& e) {
            log_line(fmt::format("{}: refused a claim: {}", name, e.what()));
            answer_claim(conn.get(), fmt::format("no: {}", e.what()));
            continue;
        }
        // From here on this process is the child's VMM: nobody else may claim it.
        ::unlink(o.socket.c_str());
        listener.reset();
        parent.reset();
        say(status.get(), "claimed\n");
        // Kept open until this VM is ready (serve() closes it): the keeper's next
        // standby does not compete with its start.
        ::fcntl(status.get(), F_SETFD, FD_CLOEXEC);
        answer_claim(conn.get(), "ok");
        // The launcher's settings (NANOVM_KEEP_STATE, the run directory), not the parent VMM's.
        apply_vmm_environment(claim.env);
        VmmOptions options = claim.options;
        const std::string log_path = vmm_run_dir(options).vm(options.id).vmm_log();
        const Fd log(::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600));
        if (log) {
            ::dup2(log.get(), STDOUT_FILENO);
            ::dup2(log.get(), STDERR_FILENO);
        }
        log_line(fmt::format("VM {}: a {} in a standby made ahead by VM pid {} (pid {})", options.id,
                             options.fork_memory.empty() ? "restore" : "fork child", o.parent_pid, ::getpid()));
        options.lock_fd = claim.lock.release();
        options.ready_fd = claim.ready.release();
        options.started_fd = status.release();
        return run_vmm(options, std::move(standby));
    }
}

}  // namespace nanovm::vm
