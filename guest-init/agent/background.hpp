// Background jobs (protocol version 3, guest-init/protocol/messages.hpp): commands that
// belong to the agent rather than to a request or a connection, so they survive the
// client that started them. The agent reads their stdout and stderr all the time (a
// job never blocks on a full pipe) into an OutputRing per stream that keeps the last
// proto::kJobOutputKeep bytes with their offsets; any connection may attach to that
// output (JobAttachJob), feed stdin, signal, or wait for the end.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "guest-init/agent/connection.hpp"
#include "guest-init/agent/output_pipe.hpp"
#include "guest-init/agent/pipe_feeder.hpp"
#include "guest-init/agent/spawn_process.hpp"
#include "guest-init/protocol/messages.hpp"

namespace nanovm::agent {

/// The last `capacity` bytes of a stream, each at its offset (bytes before it).
class OutputRing {
public:
    explicit OutputRing(size_t capacity) : capacity_(capacity) {}
    /// Appends `data`; the oldest bytes beyond the capacity are dropped.
    void append(std::string_view data);
    /// Bytes ever appended: the offset of the next byte.
    uint64_t total() const { return total_; }
    /// The offset of the oldest byte kept.
    uint64_t first() const { return total_ > capacity_ ? total_ - capacity_ : 0; }
    /// Copies up to `max` bytes starting at offset `from` (moved up to first() if
    /// older) into `out` (replacing its contents). Returns the offset of the first
    /// byte copied.
    uint64_t read(uint64_t from, size_t max, std::string& out) const;

private:
    size_t capacity_;
    std::string buffer_;  // byte at offset o is at o % capacity_; grows up to capacity_
    uint64_t total_ = 0;
};

/// Told when a background job changes (new output, its end) or goes away.
class JobWatcher {
public:
    virtual ~JobWatcher() = default;
    /// New output, or the job ended.
    virtual void on_job_changed() = 0;
    /// The job was forgotten (or the agent stops): the watcher must let go of it.
    virtual void on_job_gone() = 0;
};

/// One background job.
class BackgroundJob {
public:
    BackgroundJob(AgentContext& context, uint64_t id, const proto::ExecRequest& request, SpawnedProcess process);
    /// Kills the process group if the job still runs; tells the watchers it is gone.
    ~BackgroundJob();
    BackgroundJob(const BackgroundJob&) = delete;
    BackgroundJob& operator=(const BackgroundJob&) = delete;

    uint64_t id() const { return id_; }
    /// True until the leader was reaped and its pipes drained.
    bool running() const { return !ended_; }
    /// How it ended (when not running).
    const proto::ExitReport& exit() const { return exit_; }
    const OutputRing& output(proto::JobStream stream) const {
        return stream == proto::JobStream::kStdout ? stdout_ring_ : stderr_ring_;
    }
    /// JOB_LIST's entry.
    proto::JobInfo info() const;

    /// JOB_STDIN: false with EPIPE (no stdin pipe, closed, ended) or EAGAIN (backlog).
    bool write_stdin(std::string_view data, Failure& failure);
    /// JOB_STDIN_CLOSE: false with EPIPE.
    bool close_stdin(Failure& failure);
    /// JOB_SIGNAL to the process group: false with ESRCH once it ended.
    bool signal(int signal, Failure& failure);

    void add_watcher(JobWatcher* watcher) { watchers_.push_back(watcher); }
    void remove_watcher(JobWatcher* watcher);

private:
    void on_output(OutputPipe& pipe, OutputRing& ring);
    void on_exit(int status);
    void notify();

    AgentContext& context_;
    uint64_t id_;
    std::vector<std::string> argv_;
    bool shell_;
    int64_t started_unix_ms_;
    pid_t pid_;
    OutputRing stdout_ring_{proto::kJobOutputKeep};
    OutputRing stderr_ring_{proto::kJobOutputKeep};
    OutputPipe stdout_;
    OutputPipe stderr_;
    std::unique_ptr<PipeFeeder> stdin_;
    bool stdin_closed_ = false;
    bool exited_ = false;
    bool ended_ = false;
    bool timed_out_ = false;
    proto::ExitReport exit_;
    uint64_t timer_ = 0;
    std::vector<JobWatcher*> watchers_;
};

/// The agent's background jobs by id. Single-threaded, owned by the server.
class BackgroundJobs {
public:
    /// JOB_START: spawns `request` (as EXEC would). Returns the new job, or null with
    /// `failure` (EXEC's failures; EAGAIN when kMaxJobs run). Makes room by dropping
    /// the oldest ended job when kMaxJobs are kept.
    BackgroundJob* start(AgentContext& context, const proto::ExecRequest& request, Failure& failure);
    /// The job `id`, or null.
    BackgroundJob* find(uint64_t id);
    /// JOB_FORGET: false with ENOENT or EBUSY (it runs).
    bool forget(uint64_t id, Failure& failure);
    /// JOB_LIST_REPLY's entries, by id.
    proto::JobList list() const;
    /// Kills and drops every job (agent shutdown).
    void clear() { jobs_.clear(); }

private:
    std::map<uint64_t, std::unique_ptr<BackgroundJob>> jobs_;
    uint64_t next_id_ = 1;
};

/// JOB_ATTACH and JOB_WAIT: a request that follows one background job.
class JobAttachJob final : public Job, public JobWatcher {
public:
    /// JOB_ATTACH: ERROR ENOENT if there is no such job, else the job is added and
    /// sends what is buffered at once.
    static void attach(Connection& connection, uint32_t id, const proto::JobAttach& request);
    /// JOB_WAIT: EXIT at once if the job ended, else once it does.
    static void wait(Connection& connection, uint32_t id, const proto::JobRef& request);

    JobAttachJob(Connection& connection, uint32_t id, BackgroundJob* job, bool output, bool follow,
                 uint64_t stdout_from, uint64_t stderr_from);
    ~JobAttachJob() override;

    void on_frame(proto::MessageType type, std::string_view payload) override;
    void on_room() override { pump(); }
    void on_job_changed() override { pump(); }
    void on_job_gone() override;

private:
    /// Sends what it can; finishes once done.
    void pump();
    void end();

    BackgroundJob* job_;
    bool output_;  // JOB_ATTACH (else JOB_WAIT: the EXIT only)
    bool follow_;
    uint64_t next_[2];  // the next offset to send: stdout, stderr
    uint64_t sent_ = 0;
    bool finished_ = false;
};

}  // namespace nanovm::agent
