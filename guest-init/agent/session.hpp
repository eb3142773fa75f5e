// Sessions: a persistent `/bin/sh` per name, so that cwd, variables and functions of
// one command carry over to the next (the line format: session_shell.hpp).
//
// A session outlives the connection that opened it (any connection may run commands
// in it or close it) and runs one command at a time. Its output goes to the running
// SESSION_RUN; if that request's connection goes away the command keeps running,
// its output is dropped, and the session stays busy until it ends. SIGNAL, CANCEL and
// a timeout go to the descendants of the shell (the running command), not to the
// shell itself, so the session survives them; the EXIT of such a command carries the
// shell's status (128+N for signal N). A shell that exits (`exit 3` in a command)
// ends the session, and its EXIT carries the shell's own status.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "guest-init/agent/connection.hpp"
#include "guest-init/agent/output_pipe.hpp"
#include "guest-init/agent/pipe_feeder.hpp"
#include "guest-init/agent/session_shell.hpp"
#include "guest-init/agent/spawn_process.hpp"
#include "guest-init/protocol/messages.hpp"

namespace nanovm::agent {

class Session;

/// SESSION_RUN: one command in a session.
class SessionRunJob final : public Job {
public:
    /// Starts `request` in its session, or answers ERROR (ENOENT: no such session;
    /// EBUSY: it is running a command).
    static void start(Connection& connection, uint32_t id, const proto::SessionRunRequest& request);

    SessionRunJob(Connection& connection, uint32_t id, Session* session);
    /// Detaches from the session (the command keeps running; its output is dropped).
    ~SessionRunJob() override;

    void on_frame(proto::MessageType type, std::string_view payload) override;
    void on_room() override;

    /// From the session: the command ended. Sends EXIT and finishes.
    void complete(const proto::ExitReport& exit);

private:
    Session* session_;
};

/// One persistent shell.
class Session {
public:
    Session(AgentContext& context, std::string name, SpawnedProcess shell);
    /// terminate()s.
    ~Session();
    Session(const Session&) = delete;
    Session& operator=(const Session&) = delete;

    /// True while a command runs (or its shell has not reported its end yet).
    bool busy() const { return running_; }
    /// Writes `command` to the shell; output goes to `job` until its status.
    void run(SessionRunJob* job, const std::string& command, uint32_t timeout_ms);
    /// `job` goes away before its command ended.
    void detach(SessionRunJob* job);
    /// Sends `signal` to the shell's descendants (the running command).
    void signal_command(int signal);
    /// Kills the shell and what it runs now; a running command's request gets EXIT
    /// (signaled, SIGKILL). Idempotent.
    void terminate();
    /// Watches the output pipes again after the run's connection had no room.
    void resume_output();

private:
    void on_output(OutputPipe& pipe);
    void on_status();
    void on_shell_exit(int status);
    void drain_output();
    void complete(const proto::ExitReport& exit);

    AgentContext& context_;
    std::string name_;
    pid_t pid_;
    bool shell_alive_ = true;
    PipeFeeder stdin_;
    OutputPipe stdout_;
    OutputPipe stderr_;
    Fd status_fd_;
    uint64_t status_watch_ = 0;
    StatusLineReader status_;
    bool running_ = false;
    bool timed_out_ = false;
    SessionRunJob* run_ = nullptr;
    uint64_t timer_ = 0;
};

/// The sessions by name.
class Sessions {
public:
    /// Starts a session (the shell: /bin/sh in request.cwd with the base environment
    /// plus request.env). False with EEXIST (name taken), EAGAIN (kMaxSessions), or
    /// why the shell could not start (e.g. ENOENT for the cwd).
    bool open(AgentContext& context, const proto::SessionOpenRequest& request, Failure& failure);
    /// The session named `name`, or null.
    Session* find(const std::string& name);
    /// Ends the session named `name`; false if there is none.
    bool close(const std::string& name);
    /// The session's shell ended: drop it (destroyed in collect()).
    void ended(Session* session);
    /// Destroys the sessions dropped since the last call.
    void collect() { ended_.clear(); }
    /// Ends every session (agent shutdown).
    void clear();

private:
    std::map<std::string, std::unique_ptr<Session>> by_name_;
    std::vector<std::unique_ptr<Session>> ended_;
};

}  // namespace nanovm::agent
