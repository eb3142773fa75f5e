// Sessions (see session.hpp).
#include "guest-init/agent/session.hpp"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>

#include "guest-init/agent/children.hpp"
#include "guest-init/agent/timers.hpp"

namespace nanovm::agent {

using proto::MessageType;

void SessionRunJob::start(Connection& connection, uint32_t id, const proto::SessionRunRequest& request) {
    Session* session = connection.context().sessions.find(request.name);
    if (session == nullptr) {
        connection.send_error(id, Failure{ENOENT, "no session named " + request.name});
        return;
    }
    if (session->busy()) {
        connection.send_error(id, Failure{EBUSY, "session " + request.name + " is running a command"});
        return;
    }
    auto job = std::make_unique<SessionRunJob>(connection, id, session);
    SessionRunJob* raw = job.get();
    connection.add_job(std::move(job));
    session->run(raw, request.command, request.timeout_ms);
}

SessionRunJob::SessionRunJob(Connection& connection, uint32_t id, Session* session)
    : Job(connection, id), session_(session) {}

SessionRunJob::~SessionRunJob() {
    if (session_ != nullptr) session_->detach(this);
}

void SessionRunJob::on_frame(MessageType type, std::string_view payload) {
    if (session_ == nullptr) return;
    if (type == MessageType::kSignal) {
        proto::SignalRequest signal;
        if (proto::decode(payload, signal)) session_->signal_command(signal.signal);
    } else if (type == MessageType::kCancel) {
        session_->signal_command(SIGKILL);
    }
}

void SessionRunJob::on_room() {
    if (session_ != nullptr) session_->resume_output();
}

void SessionRunJob::complete(const proto::ExitReport& exit) {
    session_ = nullptr;
    connection().send(MessageType::kExit, id(), proto::encode(exit));
    connection().finish(id());
}

Session::Session(AgentContext& context, std::string name, SpawnedProcess shell)
    : context_(context),
      name_(std::move(name)),
      pid_(shell.pid),
      stdin_(context.poller, std::move(shell.stdin_w)),
      stdout_(context.poller, std::move(shell.stdout_r), MessageType::kStdout, [this] { on_output(stdout_); }),
      stderr_(context.poller, std::move(shell.stderr_r), MessageType::kStderr, [this] { on_output(stderr_); }),
      status_fd_(std::move(shell.status_r)) {
    status_watch_ = context_.poller.add(status_fd_.get(), EPOLLIN, [this](uint32_t) { on_status(); });
    context_.children.watch(pid_, [this](int status) { on_shell_exit(status); });
}

Session::~Session() {
    terminate();
    context_.poller.remove(status_watch_);
}

void Session::run(SessionRunJob* job, const std::string& command, uint32_t timeout_ms) {
    running_ = true;
    timed_out_ = false;
    run_ = job;
    stdin_.write(session_command_line(command));
    if (timeout_ms > 0) {
        timer_ = context_.timers.add(Timers::Clock::now() + std::chrono::milliseconds(timeout_ms), [this] {
            timer_ = 0;
            timed_out_ = true;
            signal_command(SIGKILL);
        });
    }
}

void Session::detach(SessionRunJob* job) {
    if (run_ == job) run_ = nullptr;
}

void Session::signal_command(int signal) {
    if (!shell_alive_) return;
    for (pid_t pid : process_descendants(pid_)) ::kill(pid, signal);
}

void Session::resume_output() {
    stdout_.resume();
    stderr_.resume();
}

void Session::terminate() {
    if (shell_alive_) {
        signal_command(SIGKILL);
        ::kill(-pid_, SIGKILL);
        context_.children.forget(pid_);
        shell_alive_ = false;
    }
    stdout_.close();
    stderr_.close();
    if (running_) complete(proto::ExitReport{true, false, SIGKILL});
}

void Session::on_output(OutputPipe& pipe) {
    Connection* connection = run_ != nullptr ? &run_->connection() : nullptr;
    const uint32_t id = run_ != nullptr ? run_->id() : 0;
    if (pipe.forward(connection, id) == OutputPipe::Result::kNoRoom) connection->wait_for_room(id);
}

void Session::drain_output() {
    // The command has ended, so what it wrote is in the pipes: at most a pipe's
    // worth each, taken even past the connection's high-water mark.
    Connection* connection = run_ != nullptr ? &run_->connection() : nullptr;
    const uint32_t id = run_ != nullptr ? run_->id() : 0;
    stdout_.forward_all(connection, id, true, kPostExitDrainLimit);
    stderr_.forward_all(connection, id, true, kPostExitDrainLimit);
    resume_output();
}

void Session::on_status() {
    char buf[64];
    const ssize_t n = ::read(status_fd_.get(), buf, sizeof buf);
    if (n > 0) {
        if (const auto status = status_.feed(std::string_view(buf, static_cast<size_t>(n)))) {
            drain_output();
            complete(proto::ExitReport{false, timed_out_, *status});
        }
        return;
    }
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
    // The shell is ending: on_shell_exit() reports it.
    context_.poller.remove(status_watch_);
    status_watch_ = 0;
    status_fd_.reset();
}

void Session::on_shell_exit(int status) {
    shell_alive_ = false;
    drain_output();
    stdout_.close();
    stderr_.close();
    if (running_) {
        proto::ExitReport exit;
        exit.signaled = WIFSIGNALED(status);
        exit.value = exit.signaled ? WTERMSIG(status) : WEXITSTATUS(status);
        exit.timed_out = timed_out_;
        complete(exit);
    }
    context_.sessions.ended(this);
}

void Session::complete(const proto::ExitReport& exit) {
    running_ = false;
    timed_out_ = false;
    context_.timers.cancel(timer_);
    timer_ = 0;
    SessionRunJob* job = run_;
    run_ = nullptr;
    if (job != nullptr) job->complete(exit);
}

bool Sessions::open(AgentContext& context, const proto::SessionOpenRequest& request, Failure& failure) {
    if (by_name_.count(request.name) != 0) {
        failure = Failure{EEXIST, "session " + request.name + " exists"};
        return false;
    }
    if (by_name_.size() >= kMaxSessions) {
        failure = Failure{EAGAIN, "too many sessions"};
        return false;
    }
    SpawnSpec spec;
    spec.path = "/bin/sh";
    spec.argv = {"sh"};
    spec.env = merge_environment(context.base_env, request.env, false);
    spec.cwd = request.cwd;
    spec.stdin_pipe = true;
    spec.status_pipe = true;
    SpawnedProcess shell;
    if (!spawn_process(spec, shell, failure)) return false;
    by_name_.emplace(request.name, std::make_unique<Session>(context, request.name, std::move(shell)));
    return true;
}

Session* Sessions::find(const std::string& name) {
    auto it = by_name_.find(name);
    return it == by_name_.end() ? nullptr : it->second.get();
}

bool Sessions::close(const std::string& name) {
    auto it = by_name_.find(name);
    if (it == by_name_.end()) return false;
    it->second->terminate();
    ended_.push_back(std::move(it->second));
    by_name_.erase(it);
    return true;
}

void Sessions::ended(Session* session) {
    for (auto it = by_name_.begin(); it != by_name_.end(); ++it) {
        if (it->second.get() == session) {
            ended_.push_back(std::move(it->second));
            by_name_.erase(it);
            return;
        }
    }
}

void Sessions::clear() {
    for (auto& [name, session] : by_name_) session->terminate();
    by_name_.clear();
    ended_.clear();
}

}  // namespace nanovm::agent
