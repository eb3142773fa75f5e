// The sandbox manager: background commands (manager.hpp). A command is the guest
// agent's background job (protocol version 3, guest-init/protocol/messages.hpp): it
// belongs to the agent, so it runs on when the client that started it or the daemon
// goes away, and the agent keeps the last proto::kJobOutputKeep bytes of each of its
// streams. Its id is the agent's job id; the daemon keeps nothing of it but when it
// first saw it end.
#include <charconv>
#include <thread>

#include <fmt/format.h>

#include "api/daemon/api_error.hpp"
#include "api/daemon/sandbox/manager.hpp"

namespace nanovm::daemon {

namespace {

using Clock = std::chrono::steady_clock;

// The agent's job id of a command id ("1", "2"...); 404 for anything else.
uint64_t job_id(const std::string& command_id) {
    uint64_t job = 0;
    const char* end = command_id.data() + command_id.size();
    const auto [ptr, ec] = std::from_chars(command_id.data(), end, job);
    if (command_id.empty() || command_id.size() > 19 || ec != std::errc() || ptr != end || job == 0 ||
        command_id.front() == '0')
        throw ApiError("command_not_found", "no command has this id in this sandbox");
    return job;
}

[[noreturn]] void throw_job_error(const agent::AgentError& e) {
    if (e.errno_name() == "ENOENT") throw ApiError("command_not_found", "no command has this id in this sandbox");
    if (e.errno_name() == "EOPNOTSUPP")
        throw ApiError("wrong_state", fmt::format("this sandbox's guest agent has no background commands: {}", e.message()));
    throw ApiError("vm_error", fmt::format("the guest agent refused: {} ({})", e.message(), e.errno_name()));
}

// Runs `fn` on `client`, turning the agent's refusals into catalogue errors.
template <class Fn>
auto job_call(agent::AgentClient& client, Fn&& fn) {
    try {
        return fn(client);
    } catch (const agent::AgentError& e) {
        throw_job_error(e);
    } catch (const agent::ConnectionError& e) {
        throw ApiError("vm_error", fmt::format("the guest agent's connection broke: {}", e.what()));
    }
}

}  // namespace

CommandInfo SandboxManager::command_info(const std::string& sandbox_id, const agent::JobInfo& job) {
    CommandInfo info{std::to_string(job.id), sandbox_id, job, std::nullopt};
    if (!job.running) {
        std::lock_guard lock(commands_mutex_);
        if (command_ended_ms_.size() > 100000) command_ended_ms_.clear();  // bounded: only the end times go
        info.ended_ms = command_ended_ms_.try_emplace(sandbox_id + "/" + info.id, store::now_ms()).first->second;
    }
    return info;
}

CommandInfo SandboxManager::start_command(const std::string& id, agent::Command command) {
    const store::SandboxRecord r = must_get(id);
    const Activity busy = hold_awake(r.id);  // a call that needs the guest: not idle meanwhile
    agent::AgentClient client = agent_for(r.id);
    // Without stdin data, stdin is a pipe fed by POST .../stdin until eof=true.
    command.stdin_stream = !command.stdin_data.has_value();
    uint64_t job = 0;
    try {
        job = client.start_job(command);
    } catch (const agent::AgentError& e) {
        const std::string& n = e.errno_name();
        if (n == "EAGAIN")
            throw ApiError("over_capacity", fmt::format("{} background commands run in this sandbox already", agent::proto::kMaxJobs));
        if (n == "EOPNOTSUPP") throw_job_error(e);
        throw ApiError("invalid_value", fmt::format("the command could not start: {} ({})", e.message(), n));
    } catch (const agent::ConnectionError& e) {
        throw ApiError("vm_error", fmt::format("the guest agent's connection broke: {}", e.what()));
    }
    for (const agent::JobInfo& j : job_call(client, [](agent::AgentClient& c) { return c.list_jobs(); }))
        if (j.id == job) return command_info(r.id, j);
    throw ApiError("vm_error", "the guest agent lost the command it just started");
}

std::vector<CommandInfo> SandboxManager::list_commands(const std::string& id) {
    const store::SandboxRecord r = must_get(id);
    const Activity busy = hold_awake(r.id);  // a call that needs the guest: not idle meanwhile
    agent::AgentClient client = agent_for(r.id);
    std::vector<CommandInfo> out;
    for (const agent::JobInfo& j : job_call(client, [](agent::AgentClient& c) { return c.list_jobs(); }))
        out.push_back(command_info(r.id, j));
    return out;
}

CommandInfo SandboxManager::get_command(const std::string& id, const std::string& command_id) {
    must_get(id);
    const uint64_t job = job_id(command_id);
    for (const CommandInfo& c : list_commands(id))
        if (c.job.id == job) return c;
    throw ApiError("command_not_found", "no command has this id in this sandbox");
}

CommandInfo SandboxManager::command_output(const std::string& id, const std::string& command_id, bool follow,
                                           const CommandOutputSink& sink, const std::function<bool()>& client_gone) {
    const store::SandboxRecord r = must_get(id);
    const uint64_t job = job_id(command_id);
    const Activity busy = hold_awake(r.id);  // a call that needs the guest: not idle meanwhile
    agent::AgentClient client = agent_for(r.id);
    bool gone = false;
    job_call(client, [&](agent::AgentClient& c) {
        const agent::RequestId rid =
            c.attach_job(job, 0, 0, follow, [&](agent::proto::JobStream stream, uint64_t offset, std::string_view d) {
                if (!gone && !sink(stream, offset, d)) gone = true;
            });
        while (!c.done(rid) && !gone) {
            c.poll(std::chrono::milliseconds(100));
            if (client_gone && client_gone()) gone = true;  // a follower gone while the command is silent
        }
        if (gone) return;  // the client went away: the connection (and the attach) is dropped
        c.wait(rid);
    });
    return gone ? CommandInfo{command_id, r.id, {}, std::nullopt} : get_command(id, command_id);
}

CommandInfo SandboxManager::wait_command(const std::string& id, const std::string& command_id,
                                         std::chrono::milliseconds timeout) {
    const store::SandboxRecord r = must_get(id);
    const uint64_t job = job_id(command_id);
    {
        agent::AgentClient client = agent_for(r.id);
        client.set_deadline(Clock::now() + timeout);
        job_call(client, [&](agent::AgentClient& c) {
            try {
                c.wait_job(job);
            } catch (const agent::TimeoutError&) {
                // Still running when the time is up: answered as it is (the client is
                // unusable now; the answer comes from a new connection).
            }
        });
    }
    return get_command(id, command_id);
}

void SandboxManager::command_stdin(const std::string& id, const std::string& command_id, std::string_view data,
                                   bool eof) {
    const store::SandboxRecord r = must_get(id);
    const uint64_t job = job_id(command_id);
    const Activity busy = hold_awake(r.id);  // a call that needs the guest: not idle meanwhile
    agent::AgentClient client = agent_for(r.id);
    constexpr size_t kChunk = 64 * 1024;
    const auto give_up = Clock::now() + std::chrono::seconds(60);
    try {
        while (!data.empty()) {
            const std::string_view piece = data.substr(0, kChunk);
            try {
                client.job_stdin(job, piece);
                data.remove_prefix(piece.size());
            } catch (const agent::AgentError& e) {
                // EAGAIN: the command has not read what waits already; try again.
                if (e.errno_name() != "EAGAIN" || Clock::now() > give_up) throw;
                std::this_thread::sleep_for(std::chrono::milliseconds(20));
            }
        }
        if (eof) {
            try {
                client.job_close_stdin(job);
            } catch (const agent::AgentError& e) {
                if (e.errno_name() != "EPIPE") throw;  // closed already (or it ended): done
            }
        }
    } catch (const agent::AgentError& e) {
        if (e.errno_name() == "EPIPE")
            throw ApiError("wrong_state", "the command's stdin is closed (or the command has ended)");
        if (e.errno_name() == "EAGAIN") throw ApiError("busy", "the command has not read its stdin for 60 s");
        throw_job_error(e);
    } catch (const agent::ConnectionError& e) {
        throw ApiError("vm_error", fmt::format("the guest agent's connection broke: {}", e.what()));
    }
}

CommandInfo SandboxManager::kill_command(const std::string& id, const std::string& command_id, int signal) {
    const store::SandboxRecord r = must_get(id);
    const uint64_t job = job_id(command_id);
    {
        agent::AgentClient client = agent_for(r.id);
        job_call(client, [&](agent::AgentClient& c) {
            try {
                c.job_signal(job, signal);
            } catch (const agent::AgentError& e) {
                if (e.errno_name() != "ESRCH") throw;  // it has ended: nothing to signal
            }
        });
    }
    return wait_command(id, command_id, std::chrono::seconds(2));
}

}  // namespace nanovm::daemon
