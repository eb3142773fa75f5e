// EXEC: one command, from spawn to EXIT (protocol: guest-init/protocol/messages.hpp).
//
// The command leads its own process group. Its stdout and stderr are forwarded as they
// come (STDOUT/STDERR frames, paused while the connection's output is full, which
// blocks the command on a full pipe: backpressure). EXIT follows once the leader
// has been reaped and both pipes are drained (EOF, or empty after the exit: a
// background process that keeps them open does not hold EXIT back, and what it
// writes later is lost). A timeout sends SIGKILL to the whole group. The connection
// going away kills the group too.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>

#include "guest-init/agent/connection.hpp"
#include "guest-init/agent/output_pipe.hpp"
#include "guest-init/agent/pipe_feeder.hpp"
#include "guest-init/agent/spawn_process.hpp"
#include "guest-init/protocol/messages.hpp"

namespace nanovm::agent {

/// Spawns the command of an EXEC (or JOB_START) request: `/bin/sh -c` for a shell
/// line, else argv[0] looked up on the command's PATH; the environment over the
/// context's base environment. False with `failure` (ENOENT: no such program or cwd,
/// EACCES, EPERM for uid/gid...).
bool spawn_exec_request(const AgentContext& context, const proto::ExecRequest& request, SpawnedProcess& process,
                        Failure& failure);

/// EXIT's report of a waitpid status (exit code, or the signal that killed it).
proto::ExitReport exit_report(int wait_status, bool timed_out);

/// A running command.
class ExecJob final : public Job {
public:
    /// Starts `request` as request `id` on `connection`: answers ERROR at once if the
    /// command cannot start (no such program, bad cwd, setuid refused...), else adds
    /// the job.
    static void start(Connection& connection, uint32_t id, const proto::ExecRequest& request);

    ExecJob(Connection& connection, uint32_t id, SpawnedProcess process, uint32_t timeout_ms);
    /// Kills the process group if the command still runs.
    ~ExecJob() override;

    void on_frame(proto::MessageType type, std::string_view payload) override;
    void on_room() override;
    bool input_backlogged() const override;

private:
    void on_readable(OutputPipe& pipe);
    void on_exit(int status);
    void drain_after_exit();
    void kill_group(int signal);

    pid_t pid_;
    OutputPipe stdout_;
    OutputPipe stderr_;
    std::unique_ptr<PipeFeeder> stdin_;
    bool exited_ = false;
    bool finished_ = false;
    bool timed_out_ = false;
    int status_ = 0;
    uint64_t timer_ = 0;
};

}  // namespace nanovm::agent
