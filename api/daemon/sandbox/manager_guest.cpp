// The sandbox manager: commands and files in the guest (manager.hpp).
#include <cerrno>
#include <chrono>
#include <functional>
#include <memory>

#include <fmt/format.h>

#include "api/daemon/api_error.hpp"
#include "api/daemon/sandbox/manager.hpp"
#include "vmm/log.hpp"

namespace nanovm::daemon {

using store::SandboxRecord;

namespace {

using Clock = std::chrono::steady_clock;

// The catalogue error for a guest's refusal (the agent's errno name).
[[noreturn]] void throw_guest_error(const agent::AgentError& e, const std::string& path) {
    const std::string& n = e.errno_name();
    const std::string message = fmt::format("{}: {} ({})", path, e.message(), n);
    if (n == "ENOENT" || n == "ENOTDIR") throw ApiError("path_not_found", message);
    if (n == "EACCES" || n == "EPERM" || n == "EROFS") throw ApiError("permission_denied", message);
    if (n == "EEXIST" || n == "EISDIR" || n == "ENOTEMPTY" || n == "EBUSY") throw ApiError("path_conflict", message);
    if (n == "ENOSPC" || n == "EDQUOT") throw ApiError("disk_full", message);
    if (n == "EFBIG") throw ApiError("file_too_large", message);
    if (n == "ENAMETOOLONG" || n == "EINVAL") throw ApiError("invalid_path", message);
    throw ApiError("vm_error", message);
}

// A sink that asked to stop a file read.
struct ReadStopped {};

// Runs `fn` on a connection to the sandbox's agent (a new one, or a reference to a
// kept one), turning the guest's refusals
// into catalogue errors about `path`.
template <class Client, class Fn>
auto guest_call(Client&& client, const std::string& path, Fn&& fn) {
    try {
        agent::AgentClient& c = client;
        return fn(c);
    } catch (const agent::AgentError& e) {
        throw_guest_error(e, path);
    } catch (const agent::ConnectionError& e) {
        throw ApiError("vm_error", fmt::format("the guest agent's connection broke: {}", e.what()));
    }
}

std::string parent_of(const std::string& path) {
    const size_t slash = path.find_last_of('/');
    return slash == 0 || slash == std::string::npos ? std::string("/") : path.substr(0, slash);
}

}  // namespace

SandboxRecord SandboxManager::use(const std::string& id) {
    const auto t0 = Clock::now();
    SandboxRecord r = must_get(id);
    require_allowed(SandboxOp::use, state_of(r));
    idle_.begin_activity(r.id, store::now_ms());  // a call that needs the guest: not idle
    idle_.end_activity(r.id, store::now_ms());
    if (state_of(r) == SandboxState::sleeping) {
        // Woken transparently: the next call after snapshot(leave_paused).
        const auto s = slot(r.id);
        std::lock_guard op(s->op);
        r = must_get(id);
        require_allowed(SandboxOp::use, state_of(r));
        if (state_of(r) == SandboxState::sleeping) {
            const auto t1 = Clock::now();
            resume_vmm(r);  // its clock, frozen by the sleep, is stepped by the call's agent_for()
            const auto t2 = Clock::now();
            flip_state(r, *transition(SandboxOp::use).to);
            idle_.reset(r.id, store::now_ms());
            const auto t3 = Clock::now();
            // Where a wake's time goes in the daemon, before the call's own work
            // (tools/bench/run lifecycle reads this line).
            log_line(fmt::format("sandbox {}: woken in {:.1f} ms: lookup {:.1f} ms, resume {:.1f} ms, store {:.1f} ms",
                                 r.id, ms_between(t0, t3), ms_between(t0, t1), ms_between(t1, t2), ms_between(t2, t3)));
        }
    }
    return r;
}

void SandboxManager::resume_vmm(const SandboxRecord& r) {
    if (vms_.resume(r.vm_id)) slot(r.id)->clock_behind = true;
}

void SandboxManager::step_clock_if_behind(const SandboxRecord& r, agent::AgentClient* client) {
    if (!slot(r.id)->clock_behind.exchange(false)) return;
    const auto t0 = Clock::now();
    try {
        if (client) {
            // Ahead of the call's own request on the same connection, not waited for
            // apart: the agent steps the clock before it runs the call (one round
            // trip less on a wake). A refusal is read with the call's answer.
            agent::resync_guest_ahead(*client, [this, id = r.id](const agent::AgentError& e) {
                log_line(fmt::format("sandbox {}: stepping the guest's clock after its sleep: {}", id, e.what()));
            });
            log_line(fmt::format("sandbox {}: guest clock step sent ahead of the waking call in {:.1f} ms", r.id,
                                 ms_between(t0, Clock::now())));
            return;
        }
        agent::AgentClient own = vms_.agent(r.vm_id);
        agent::resync_guest(own);  // no hostname: it keeps its own
    } catch (const std::exception& e) {
        log_line(fmt::format("sandbox {}: stepping the guest's clock after its sleep: {}", r.id, e.what()));
        return;
    }
    log_line(fmt::format("sandbox {}: guest clock stepped after its sleep in {:.1f} ms", r.id, ms_between(t0, Clock::now())));
}

agent::AgentClient SandboxManager::agent_for(const std::string& id) {
    const SandboxRecord r = use(id);
    agent::AgentClient client = vms_.agent(r.vm_id);
    agent::ClientLimits limits;
    limits.max_collected_output = 16u << 20;
    client.set_limits(limits);
    step_clock_if_behind(r, &client);
    return client;
}

ExecOutcome SandboxManager::exec(const std::string& id, const ExecRequest& request, const ExecSinks* sinks) {
    agent::AgentClient client = agent_for(id);
    const Activity busy = hold_awake(must_get(id).id);  // autosleep waits for the command
    return run_request(
        client, [&](agent::OutputCallbacks callbacks) { return client.start(request.command, std::move(callbacks)); },
        sinks);
}

ExecOutcome SandboxManager::run_request(agent::AgentClient& client,
                                        const std::function<agent::RequestId(agent::OutputCallbacks)>& start,
                                        const ExecSinks* sinks,
                                        const std::function<void(const agent::AgentError&)>& refused) {
    ExecOutcome out;
    const auto t0 = Clock::now();
    try {
        bool gone = false;
        agent::OutputCallbacks callbacks;
        if (sinks) {
            callbacks.on_stdout = [&](std::string_view d) {
                if (!gone && !sinks->on_stdout(d)) gone = true;
            };
            callbacks.on_stderr = [&](std::string_view d) {
                if (!gone && !sinks->on_stderr(d)) gone = true;
            };
        }
        const agent::RequestId rid = start(std::move(callbacks));
        bool cancelled = false;
        while (sinks && !client.done(rid)) {
            client.poll(std::chrono::milliseconds(100));
            if (!gone && sinks->client_gone && sinks->client_gone()) gone = true;
            if (gone && !cancelled) {
                client.cancel(rid);  // the client went away: the command goes too
                cancelled = true;
            }
        }
        out.result = client.wait(rid);
    } catch (const agent::AgentError& e) {
        if (refused) refused(e);
        // It could not start: the shell's statuses (127 not found, 126 cannot run).
        out.start_error = fmt::format("{}: {}", e.message(), e.errno_name());
        out.result.status.value = e.errno_name() == "ENOENT" || e.errno_name() == "ENOTDIR" ? 127 : 126;
    } catch (const agent::ConnectionError& e) {
        throw ApiError("vm_error", fmt::format("the guest agent's connection broke: {}", e.what()));
    }
    out.duration_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    return out;
}

agent::proto::FileInfo SandboxManager::stat_file(const std::string& id, const std::string& path) {
    return guest_call(agent_for(id), path, [&](agent::AgentClient& c) { return c.stat(path); });
}

SandboxManager::FileReader SandboxManager::open_file(const std::string& id, const std::string& path) {
    FileReader reader;
    reader.client = std::make_shared<agent::AgentClient>(agent_for(id));
    reader.info = guest_call(std::ref(*reader.client), path, [&](agent::AgentClient& c) { return c.stat(path); });
    return reader;
}

uint64_t SandboxManager::read_file(const std::string& id, const std::string& path, FileReader& reader,
                                   const std::function<bool(std::string_view)>& sink) {
    uint64_t sent = 0;
    const Activity busy = hold_awake(must_get(id).id);
    try {
        guest_call(std::ref(*reader.client), path, [&](agent::AgentClient& c) {
            c.read_file(path, [&](std::string_view chunk) {
                sent += chunk.size();
                if (!sink(chunk)) throw ReadStopped{};
            });
        });
    } catch (const ReadStopped&) {
        // The client went away: the connection to the agent is dropped with the
        // rest of the file.
    }
    return sent;
}

uint64_t SandboxManager::write_file(const std::string& id, const std::string& path, std::string_view data,
                                    uint32_t mode) {
    const Activity busy = hold_awake(must_get(id).id);
    return guest_call(agent_for(id), path, [&](agent::AgentClient& c) {
        agent::WriteOptions options;
        options.mode = mode;
        try {
            return c.write_file(path, data, options);
        } catch (const agent::AgentError& e) {
            // Missing parents are made (users write /work/result.txt into a fresh
            // sandbox) only when the write says so: a mkdir before every write was a
            // round trip to the guest on each call. The agent refuses at the open,
            // before it takes any data (AgentClient::write_file stops sending).
            const std::string parent = parent_of(path);
            if (e.errno_name() != "ENOENT" || parent == "/") throw;
            c.mkdir(parent, 0755, /*parents=*/true);
            return c.write_file(path, data, options);
        }
    });
}

std::vector<agent::proto::DirEntry> SandboxManager::list_dir(const std::string& id, const std::string& path) {
    return guest_call(agent_for(id), path, [&](agent::AgentClient& c) { return c.list(path); });
}

void SandboxManager::make_dir(const std::string& id, const std::string& path, bool parents) {
    guest_call(agent_for(id), path, [&](agent::AgentClient& c) { c.mkdir(path, 0755, parents); });
}

void SandboxManager::remove_path(const std::string& id, const std::string& path, bool recursive) {
    guest_call(agent_for(id), path, [&](agent::AgentClient& c) { c.remove(path, recursive); });
}

}  // namespace nanovm::daemon
