// A running command (see exec_job.hpp).
#include "guest-init/agent/exec_job.hpp"

#include <signal.h>
#include <sys/wait.h>

#include <chrono>

#include "guest-init/agent/children.hpp"
#include "guest-init/agent/timers.hpp"

namespace nanovm::agent {

using proto::MessageType;

bool spawn_exec_request(const AgentContext& context, const proto::ExecRequest& request, SpawnedProcess& process,
                        Failure& failure) {
    SpawnSpec spec;
    spec.env = merge_environment(context.base_env, request.env, request.clear_env);
    if (request.shell) {
        spec.path = "/bin/sh";
        spec.argv = {"sh", "-c", request.argv[0]};
    } else {
        const auto path = find_program(request.argv[0], environment_value(spec.env, "PATH", ""), failure);
        if (!path) return false;
        spec.path = *path;
        spec.argv = request.argv;
    }
    spec.cwd = request.cwd;
    spec.uid = request.uid;
    spec.gid = request.gid;
    spec.stdin_pipe = request.stdin_stream;
    return spawn_process(spec, process, failure);
}

proto::ExitReport exit_report(int wait_status, bool timed_out) {
    proto::ExitReport exit;
    if (WIFSIGNALED(wait_status)) {
        exit.signaled = true;
        exit.value = WTERMSIG(wait_status);
    } else {
        exit.value = WEXITSTATUS(wait_status);
    }
    exit.timed_out = timed_out;
    return exit;
}

void ExecJob::start(Connection& connection, uint32_t id, const proto::ExecRequest& request) {
    SpawnedProcess process;
    Failure failure;
    if (!spawn_exec_request(connection.context(), request, process, failure)) {
        connection.send_error(id, failure);
        return;
    }
    connection.add_job(std::make_unique<ExecJob>(connection, id, std::move(process), request.timeout_ms));
}

ExecJob::ExecJob(Connection& connection, uint32_t id, SpawnedProcess process, uint32_t timeout_ms)
    : Job(connection, id),
      pid_(process.pid),
      stdout_(connection.context().poller, std::move(process.stdout_r), MessageType::kStdout,
              [this] { on_readable(stdout_); }),
      stderr_(connection.context().poller, std::move(process.stderr_r), MessageType::kStderr,
              [this] { on_readable(stderr_); }) {
    AgentContext& context = connection.context();
    if (process.stdin_w.valid()) stdin_ = std::make_unique<PipeFeeder>(context.poller, std::move(process.stdin_w));
    context.children.watch(pid_, [this](int status) { on_exit(status); });
    if (timeout_ms > 0) {
        timer_ = context.timers.add(Timers::Clock::now() + std::chrono::milliseconds(timeout_ms), [this] {
            timer_ = 0;
            timed_out_ = true;
            kill_group(SIGKILL);
        });
    }
}

ExecJob::~ExecJob() {
    AgentContext& context = connection().context();
    context.timers.cancel(timer_);
    if (!exited_) {
        kill_group(SIGKILL);
        context.children.forget(pid_);  // reaped silently when it is gone
    }
}

void ExecJob::kill_group(int signal) {
    if (!exited_) ::kill(-pid_, signal);
}

void ExecJob::on_frame(MessageType type, std::string_view payload) {
    switch (type) {
        case MessageType::kStdin:
            if (stdin_) stdin_->write(payload);
            break;
        case MessageType::kStdinClose:
            if (stdin_) stdin_->close();
            break;
        case MessageType::kSignal: {
            proto::SignalRequest signal;
            if (proto::decode(payload, signal)) kill_group(signal.signal);
            break;
        }
        case MessageType::kCancel:
            kill_group(SIGKILL);
            break;
        default:
            break;
    }
}

bool ExecJob::input_backlogged() const { return stdin_ && stdin_->backlog() > kStdinBacklogLimit; }

void ExecJob::on_readable(OutputPipe& pipe) {
    if (finished_) return;
    if (pipe.forward(&connection(), id()) == OutputPipe::Result::kNoRoom) connection().wait_for_room(id());
    if (exited_) drain_after_exit();
}

void ExecJob::on_room() {
    stdout_.resume();
    stderr_.resume();
    if (exited_) drain_after_exit();
}

void ExecJob::on_exit(int status) {
    exited_ = true;
    status_ = status;
    connection().context().timers.cancel(timer_);
    timer_ = 0;
    stdin_.reset();
    drain_after_exit();
}

void ExecJob::drain_after_exit() {
    if (finished_) return;
    for (OutputPipe* pipe : {&stdout_, &stderr_}) {
        if (!pipe->is_open()) continue;
        const OutputPipe::Result r = pipe->forward_all(&connection(), id(), false, kPostExitDrainLimit);
        if (r == OutputPipe::Result::kNoRoom) {
            connection().wait_for_room(id());
            return;
        }
        // Empty now (kAgain), or the limit was hit: what comes later is not this
        // command's to report.
        pipe->close();
    }
    finished_ = true;
    connection().send(MessageType::kExit, id(), proto::encode(exit_report(status_, timed_out_)));
    connection().finish(id());
}

}  // namespace nanovm::agent
