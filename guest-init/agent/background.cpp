// Background jobs (see background.hpp).
#include "guest-init/agent/background.hpp"

#include <signal.h>
#include <time.h>

#include <algorithm>
#include <chrono>

#include "guest-init/agent/children.hpp"
#include "guest-init/agent/exec_job.hpp"
#include "guest-init/agent/timers.hpp"

namespace nanovm::agent {

using proto::MessageType;

namespace {

int64_t unix_ms_now() {
    timespec ts{};
    ::clock_gettime(CLOCK_REALTIME, &ts);
    return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

}  // namespace

// ---- OutputRing ----

void OutputRing::append(std::string_view data) {
    if (data.size() > capacity_) {  // only the tail can stay
        total_ += data.size() - capacity_;
        data.remove_prefix(data.size() - capacity_);
    }
    if (buffer_.size() < capacity_) buffer_.resize(std::min<uint64_t>(capacity_, total_ + data.size()));
    while (!data.empty()) {
        const size_t at = static_cast<size_t>(total_ % capacity_);
        const size_t n = std::min(data.size(), capacity_ - at);
        if (buffer_.size() < at + n) buffer_.resize(at + n);
        buffer_.replace(at, n, data.substr(0, n));
        data.remove_prefix(n);
        total_ += n;
    }
}

uint64_t OutputRing::read(uint64_t from, size_t max, std::string& out) const {
    from = std::clamp(from, first(), total_);
    const size_t n = static_cast<size_t>(std::min<uint64_t>(max, total_ - from));
    out.clear();
    size_t at = static_cast<size_t>(from % capacity_);
    size_t left = n;
    while (left > 0) {
        const size_t piece = std::min(left, capacity_ - at);
        out.append(buffer_, at, piece);
        left -= piece;
        at = 0;
    }
    return from;
}

// ---- BackgroundJob ----

BackgroundJob::BackgroundJob(AgentContext& context, uint64_t id, const proto::ExecRequest& request,
                             SpawnedProcess process)
    : context_(context),
      id_(id),
      argv_(request.argv),
      shell_(request.shell),
      started_unix_ms_(unix_ms_now()),
      pid_(process.pid),
      stdout_(context.poller, std::move(process.stdout_r), MessageType::kStdout,
              [this] { on_output(stdout_, stdout_ring_); }),
      stderr_(context.poller, std::move(process.stderr_r), MessageType::kStderr,
              [this] { on_output(stderr_, stderr_ring_); }) {
    if (process.stdin_w.valid()) stdin_ = std::make_unique<PipeFeeder>(context.poller, std::move(process.stdin_w));
    context.children.watch(pid_, [this](int status) { on_exit(status); });
    if (request.timeout_ms > 0) {
        timer_ = context.timers.add(Timers::Clock::now() + std::chrono::milliseconds(request.timeout_ms), [this] {
            timer_ = 0;
            timed_out_ = true;
            if (!exited_) ::kill(-pid_, SIGKILL);
        });
    }
}

BackgroundJob::~BackgroundJob() {
    context_.timers.cancel(timer_);
    if (!exited_) {
        ::kill(-pid_, SIGKILL);
        context_.children.forget(pid_);  // reaped silently when it is gone
    }
    const std::vector<JobWatcher*> watchers = watchers_;
    watchers_.clear();
    for (JobWatcher* w : watchers) w->on_job_gone();
}

proto::JobInfo BackgroundJob::info() const {
    proto::JobInfo out;
    out.job = id_;
    for (size_t i = 0; i < argv_.size() && i < proto::kJobListArgs; ++i)
        out.argv.push_back(argv_[i].substr(0, proto::kJobListArgBytes));
    out.shell = shell_;
    out.started_unix_ms = started_unix_ms_;
    out.running = !ended_;
    if (ended_) out.exit = exit_;
    out.stdout_bytes = stdout_ring_.total();
    out.stderr_bytes = stderr_ring_.total();
    out.stdin_open = stdin_ != nullptr && !exited_ && !stdin_closed_;
    return out;
}

bool BackgroundJob::write_stdin(std::string_view data, Failure& failure) {
    if (!stdin_ || exited_ || stdin_closed_) {
        failure = Failure{EPIPE, "job " + std::to_string(id_) + ": its stdin is closed"};
        return false;
    }
    if (stdin_->backlog() > kStdinBacklogLimit) {
        failure = Failure{EAGAIN, "job " + std::to_string(id_) + ": its stdin has not taken the last bytes yet"};
        return false;
    }
    stdin_->write(data);
    return true;
}

bool BackgroundJob::close_stdin(Failure& failure) {
    if (!stdin_ || exited_ || stdin_closed_) {
        failure = Failure{EPIPE, "job " + std::to_string(id_) + ": its stdin is closed"};
        return false;
    }
    stdin_->close();
    stdin_closed_ = true;
    return true;
}

bool BackgroundJob::signal(int signal, Failure& failure) {
    if (exited_) {
        failure = Failure{ESRCH, "job " + std::to_string(id_) + " has ended"};
        return false;
    }
    ::kill(-pid_, signal);
    return true;
}

void BackgroundJob::remove_watcher(JobWatcher* watcher) {
    watchers_.erase(std::remove(watchers_.begin(), watchers_.end(), watcher), watchers_.end());
}

void BackgroundJob::on_output(OutputPipe& pipe, OutputRing& ring) {
    // Everything there is now, so that one wake-up is one notification.
    OutputPipe::Result r;
    size_t rounds = 16;
    do {
        r = pipe.read_to([&ring](std::string_view data) { ring.append(data); });
    } while (r == OutputPipe::Result::kData && --rounds > 0);
    notify();
}

void BackgroundJob::on_exit(int status) {
    exited_ = true;
    context_.timers.cancel(timer_);
    timer_ = 0;
    stdin_.reset();
    // What the pipes hold now is the job's; a background process that keeps them
    // open does not hold the end back (as EXEC: kPostExitDrainLimit).
    for (auto [pipe, ring] : {std::pair{&stdout_, &stdout_ring_}, std::pair{&stderr_, &stderr_ring_}}) {
        size_t rounds = kPostExitDrainLimit / kPipeChunk + 1;
        while (rounds-- > 0 &&
               pipe->read_to([ring = ring](std::string_view data) { ring->append(data); }) == OutputPipe::Result::kData) {
        }
        pipe->close();
    }
    exit_ = exit_report(status, timed_out_);
    ended_ = true;
    notify();
}

void BackgroundJob::notify() {
    const std::vector<JobWatcher*> watchers = watchers_;  // a watcher may remove itself
    for (JobWatcher* w : watchers) {
        if (std::find(watchers_.begin(), watchers_.end(), w) != watchers_.end()) w->on_job_changed();
    }
}

// ---- BackgroundJobs ----

BackgroundJob* BackgroundJobs::start(AgentContext& context, const proto::ExecRequest& request, Failure& failure) {
    if (jobs_.size() >= proto::kMaxJobs) {
        auto oldest_ended = std::find_if(jobs_.begin(), jobs_.end(), [](const auto& j) { return !j.second->running(); });
        if (oldest_ended == jobs_.end()) {
            failure = Failure{EAGAIN, "too many background jobs running (" + std::to_string(proto::kMaxJobs) + ")"};
            return nullptr;
        }
        jobs_.erase(oldest_ended);
    }
    SpawnedProcess process;
    if (!spawn_exec_request(context, request, process, failure)) return nullptr;
    const uint64_t id = next_id_++;
    auto job = std::make_unique<BackgroundJob>(context, id, request, std::move(process));
    BackgroundJob* raw = job.get();
    jobs_.emplace(id, std::move(job));
    return raw;
}

BackgroundJob* BackgroundJobs::find(uint64_t id) {
    auto it = jobs_.find(id);
    return it == jobs_.end() ? nullptr : it->second.get();
}

bool BackgroundJobs::forget(uint64_t id, Failure& failure) {
    auto it = jobs_.find(id);
    if (it == jobs_.end()) {
        failure = Failure{ENOENT, "no background job " + std::to_string(id)};
        return false;
    }
    if (it->second->running()) {
        failure = Failure{EBUSY, "job " + std::to_string(id) + " is running"};
        return false;
    }
    jobs_.erase(it);
    return true;
}

proto::JobList BackgroundJobs::list() const {
    proto::JobList out;
    for (const auto& [id, job] : jobs_) out.push_back(job->info());
    return out;
}

// ---- JobAttachJob ----

void JobAttachJob::attach(Connection& connection, uint32_t id, const proto::JobAttach& request) {
    BackgroundJob* job = connection.context().jobs.find(request.job);
    if (!job) {
        connection.send_error(id, Failure{ENOENT, "no background job " + std::to_string(request.job)});
        return;
    }
    auto attach = std::make_unique<JobAttachJob>(connection, id, job, true, request.follow, request.stdout_from,
                                                 request.stderr_from);
    JobAttachJob* raw = attach.get();
    connection.add_job(std::move(attach));
    raw->pump();
}

void JobAttachJob::wait(Connection& connection, uint32_t id, const proto::JobRef& request) {
    BackgroundJob* job = connection.context().jobs.find(request.job);
    if (!job) {
        connection.send_error(id, Failure{ENOENT, "no background job " + std::to_string(request.job)});
        return;
    }
    auto waiter = std::make_unique<JobAttachJob>(connection, id, job, false, true, 0, 0);
    JobAttachJob* raw = waiter.get();
    connection.add_job(std::move(waiter));
    raw->pump();
}

JobAttachJob::JobAttachJob(Connection& connection, uint32_t id, BackgroundJob* job, bool output, bool follow,
                           uint64_t stdout_from, uint64_t stderr_from)
    : Job(connection, id), job_(job), output_(output), follow_(follow), next_{stdout_from, stderr_from} {
    job_->add_watcher(this);
}

JobAttachJob::~JobAttachJob() {
    if (job_) job_->remove_watcher(this);
}

void JobAttachJob::end() {
    finished_ = true;
    if (job_) job_->remove_watcher(this);
    job_ = nullptr;
    connection().finish(id());
}

void JobAttachJob::on_frame(MessageType type, std::string_view) {
    if (type != MessageType::kCancel || finished_) return;
    connection().send_error(id(), Failure{ECANCELED, "cancelled"});
    end();
}

void JobAttachJob::on_job_gone() {
    job_ = nullptr;
    if (finished_) return;
    connection().send_error(id(), Failure{ENOENT, "the background job was forgotten"});
    end();
}

void JobAttachJob::pump() {
    if (finished_ || !job_) return;
    if (output_) {
        std::string chunk;
        for (const proto::JobStream stream : {proto::JobStream::kStdout, proto::JobStream::kStderr}) {
            const OutputRing& ring = job_->output(stream);
            uint64_t& next = next_[stream == proto::JobStream::kStdout ? 0 : 1];
            while (next < ring.total()) {
                if (!connection().has_room()) {
                    connection().wait_for_room(id());
                    return;
                }
                const uint64_t at = ring.read(next, kPipeChunk, chunk);
                const size_t n = chunk.size();
                connection().send(MessageType::kJobOutput, id(),
                                  proto::encode(proto::JobOutput{stream, at, std::move(chunk)}));
                chunk.clear();
                sent_ += n;
                next = at + n;
            }
        }
        if (!follow_) {
            connection().send(MessageType::kDone, id(), proto::encode(proto::DoneReport{sent_}));
            end();
            return;
        }
    }
    if (!job_->running()) {
        connection().send(MessageType::kExit, id(), proto::encode(job_->exit()));
        end();
    }
}

}  // namespace nanovm::agent
