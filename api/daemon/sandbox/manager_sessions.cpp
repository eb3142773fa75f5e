// The sandbox manager: sessions (manager.hpp). A session is the guest agent's
// persistent shell (SESSION_OPEN/RUN/CLOSE, guest-init/protocol/messages.hpp) named by
// the session's UUID; the store keeps which sessions a sandbox has, so that they are
// listed and found again after a daemon restart (the shells live in the guest).
#include <fmt/format.h>

#include "api/daemon/api_error.hpp"
#include "api/daemon/sandbox/manager.hpp"

namespace nanovm::daemon {

namespace {

std::string lower_id(std::string text) {
    for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return text;
}

}  // namespace

store::SessionRecord SandboxManager::create_session(const std::string& id, const SessionRequest& request) {
    const store::SandboxRecord r = must_get(id);
    const Activity busy = hold_awake(r.id);  // a call that needs the guest: not idle meanwhile
    agent::AgentClient client = agent_for(r.id);
    store::SessionRecord s{new_uuid(), r.id, store::now_ms()};
    try {
        client.open_session(s.id, request.cwd, request.env);
    } catch (const agent::AgentError& e) {
        const std::string& n = e.errno_name();
        const std::string message = fmt::format("the session's shell did not start: {} ({})", e.message(), n);
        if (n == "ENOENT" || n == "ENOTDIR") throw ApiError("path_not_found", message);
        if (n == "EACCES" || n == "EPERM") throw ApiError("permission_denied", message);
        if (n == "EAGAIN") throw ApiError("over_capacity", message);
        throw ApiError("vm_error", message);
    } catch (const agent::ConnectionError& e) {
        throw ApiError("vm_error", fmt::format("the guest agent's connection broke: {}", e.what()));
    }
    store_.put_session(s);
    return s;
}

std::vector<store::SessionRecord> SandboxManager::list_sessions(const std::string& id) {
    return store_.sessions(must_get(id).id);
}

ExecOutcome SandboxManager::session_exec(const std::string& id, const std::string& session_id,
                                         const std::string& line, std::chrono::seconds timeout,
                                         const ExecSinks* sinks) {
    const store::SandboxRecord r = must_get(id);
    const auto s = store_.session(lower_id(session_id));
    if (!s || s->sandbox_id != r.id) throw ApiError("session_not_found", "no session has this id in this sandbox");
    const Activity busy = hold_awake(r.id);  // a call that needs the guest: not idle meanwhile
    agent::AgentClient client = agent_for(r.id);
    return run_request(
        client,
        [&](agent::OutputCallbacks callbacks) {
            return client.start_in_session(s->id, line, timeout, std::move(callbacks));
        },
        sinks,
        [&](const agent::AgentError& e) {
            if (e.errno_name() == "EBUSY")
                throw ApiError("wrong_state", "the session is running a command: wait for it, or use another session");
            if (e.errno_name() == "ENOENT") {
                // Its shell is gone (it ran `exit`, or the guest restarted): so is the session.
                store_.delete_session(s->id);
                throw ApiError("session_not_found", "the session's shell has ended (the session is gone)");
            }
            throw ApiError("vm_error", fmt::format("the session refused the command: {} ({})", e.message(),
                                                   e.errno_name()));
        });
}

void SandboxManager::remove_session(const std::string& id, const std::string& session_id) {
    const store::SandboxRecord r = must_get(id);
    const auto s = store_.session(lower_id(session_id));
    if (!s || s->sandbox_id != r.id) throw ApiError("session_not_found", "no session has this id in this sandbox");
    try {
        agent_for(r.id).close_session(s->id);
    } catch (const agent::AgentError& e) {
        // ENOENT: its shell ended already; the record goes either way.
        if (e.errno_name() != "ENOENT")
            throw ApiError("vm_error", fmt::format("closing the session: {} ({})", e.message(), e.errno_name()));
    } catch (const agent::ConnectionError& e) {
        throw ApiError("vm_error", fmt::format("the guest agent's connection broke: {}", e.what()));
    }
    store_.delete_session(s->id);
}

}  // namespace nanovm::daemon
