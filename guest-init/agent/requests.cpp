// Request dispatch (see requests.hpp).
#include "guest-init/agent/requests.hpp"

#include "guest-init/agent/background.hpp"
#include "guest-init/agent/connection.hpp"
#include "guest-init/agent/exec_job.hpp"
#include "guest-init/agent/file_jobs.hpp"
#include "guest-init/agent/file_ops.hpp"
#include "guest-init/agent/resync.hpp"
#include "guest-init/agent/session.hpp"
#include "guest-init/protocol/messages.hpp"

namespace nanovm::agent {
namespace {

using proto::MessageType;

// Decodes the payload into a T and runs `fn` with it; false if it does not decode.
template <typename T, typename Fn>
bool with(const proto::Frame& frame, Fn&& fn) {
    T request;
    if (!proto::decode(frame.payload, request)) return false;
    fn(request);
    return true;
}

// Answers OK, or ERROR with `failure`.
void answer(Connection& c, uint32_t id, bool ok, const Failure& failure) {
    if (ok)
        c.send(MessageType::kOk, id, {});
    else
        c.send_error(id, failure);
}

// The background job `job`, or null with ENOENT in `failure`.
BackgroundJob* find_job(Connection& c, uint64_t job, Failure& failure) {
    BackgroundJob* found = c.context().jobs.find(job);
    if (!found) failure = Failure{ENOENT, "no background job " + std::to_string(job)};
    return found;
}

}  // namespace

bool handle_request(Connection& c, const proto::Frame& frame) {
    const uint32_t id = frame.id;
    Failure failure;
    switch (frame.type) {
        case MessageType::kShutdown:
            return with<proto::ShutdownRequest>(frame, [&](const proto::ShutdownRequest& r) {
                if (!c.context().in_guest) {
                    c.send_error(id, Failure{EOPNOTSUPP, "shutdown: the agent is not running in a guest"});
                    return;
                }
                c.send(MessageType::kOk, id, {});
                c.context().power_request = r.action;
            });
        case MessageType::kResync:
            return with<proto::ResyncRequest>(frame, [&](const proto::ResyncRequest& r) {
                if (!c.context().in_guest) {
                    c.send_error(id, Failure{EOPNOTSUPP, "resync: the agent is not running in a guest"});
                    return;
                }
                KernelResync kernel;
                answer(c, id, apply_resync(r, kernel, failure), failure);
            });
        case MessageType::kExec:
            return with<proto::ExecRequest>(frame, [&](const proto::ExecRequest& r) { ExecJob::start(c, id, r); });
        case MessageType::kFileRead:
            return with<proto::PathRequest>(frame, [&](const proto::PathRequest& r) { FileReadJob::start(c, id, r); });
        case MessageType::kFileWrite:
            return with<proto::FileWriteRequest>(frame,
                                                 [&](const proto::FileWriteRequest& r) { FileWriteJob::start(c, id, r); });
        case MessageType::kList:
            return with<proto::PathRequest>(frame, [&](const proto::PathRequest& r) { ListJob::start(c, id, r); });
        case MessageType::kStat:
            return with<proto::StatRequest>(frame, [&](const proto::StatRequest& r) {
                proto::FileInfo info;
                if (stat_path(absolute_path(r.path), r.follow_symlinks, info, failure))
                    c.send(MessageType::kStatReply, id, proto::encode(info));
                else
                    c.send_error(id, failure);
            });
        case MessageType::kMkdir:
            return with<proto::MkdirRequest>(frame, [&](const proto::MkdirRequest& r) {
                answer(c, id, make_directory(absolute_path(r.path), r.mode, r.parents, failure), failure);
            });
        case MessageType::kRemove:
            return with<proto::RemoveRequest>(frame, [&](const proto::RemoveRequest& r) {
                answer(c, id, remove_path(absolute_path(r.path), r.recursive, failure), failure);
            });
        case MessageType::kChmod:
            return with<proto::ChmodRequest>(frame, [&](const proto::ChmodRequest& r) {
                answer(c, id, change_mode(absolute_path(r.path), r.mode, failure), failure);
            });
        case MessageType::kSessionOpen:
            return with<proto::SessionOpenRequest>(frame, [&](const proto::SessionOpenRequest& r) {
                answer(c, id, c.context().sessions.open(c.context(), r, failure), failure);
            });
        case MessageType::kSessionRun:
            return with<proto::SessionRunRequest>(frame,
                                                  [&](const proto::SessionRunRequest& r) { SessionRunJob::start(c, id, r); });
        case MessageType::kSessionClose:
            return with<proto::SessionCloseRequest>(frame, [&](const proto::SessionCloseRequest& r) {
                const bool closed = c.context().sessions.close(r.name);
                answer(c, id, closed, Failure{ENOENT, "no session named " + r.name});
            });
        case MessageType::kJobStart:
            return with<proto::ExecRequest>(frame, [&](const proto::ExecRequest& r) {
                if (BackgroundJob* job = c.context().jobs.start(c.context(), r, failure))
                    c.send(MessageType::kJobStarted, id, proto::encode(proto::JobRef{job->id()}));
                else
                    c.send_error(id, failure);
            });
        case MessageType::kJobList:
            return with<proto::JobListRequest>(frame, [&](const proto::JobListRequest&) {
                c.send(MessageType::kJobListReply, id, proto::encode(c.context().jobs.list()));
            });
        case MessageType::kJobAttach:
            return with<proto::JobAttach>(frame, [&](const proto::JobAttach& r) { JobAttachJob::attach(c, id, r); });
        case MessageType::kJobWait:
            return with<proto::JobRef>(frame, [&](const proto::JobRef& r) { JobAttachJob::wait(c, id, r); });
        case MessageType::kJobStdin:
            return with<proto::JobStdin>(frame, [&](const proto::JobStdin& r) {
                BackgroundJob* job = find_job(c, r.job, failure);
                answer(c, id, job && job->write_stdin(r.data, failure), failure);
            });
        case MessageType::kJobStdinClose:
            return with<proto::JobRef>(frame, [&](const proto::JobRef& r) {
                BackgroundJob* job = find_job(c, r.job, failure);
                answer(c, id, job && job->close_stdin(failure), failure);
            });
        case MessageType::kJobSignal:
            return with<proto::JobSignal>(frame, [&](const proto::JobSignal& r) {
                BackgroundJob* job = find_job(c, r.job, failure);
                answer(c, id, job && job->signal(r.signal, failure), failure);
            });
        case MessageType::kJobForget:
            return with<proto::JobRef>(frame, [&](const proto::JobRef& r) {
                answer(c, id, c.context().jobs.forget(r.job, failure), failure);
            });
        default:
            return false;
    }
}

}  // namespace nanovm::agent
