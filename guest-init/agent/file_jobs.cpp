// Streamed file requests (see file_jobs.hpp).
#include "guest-init/agent/file_jobs.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <memory>

namespace nanovm::agent {

using proto::MessageType;

namespace {
void send_done(Connection& connection, uint32_t id, uint64_t count) {
    connection.send(MessageType::kDone, id, proto::encode(proto::DoneReport{count}));
    connection.finish(id);
}

void cancel(Connection& connection, uint32_t id, const std::string& what) {
    connection.send_error(id, Failure{ECANCELED, what});
    connection.finish(id);
}
}  // namespace

void FileReadJob::start(Connection& connection, uint32_t id, const proto::PathRequest& request) {
    const std::string path = absolute_path(request.path);
    // O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused below).
    Fd file(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
    if (!file) {
        connection.send_error(id, errno_failure("open " + path));
        return;
    }
    struct stat st;
    if (::fstat(file.get(), &st) != 0) {
        connection.send_error(id, errno_failure("stat " + path));
        return;
    }
    if (!S_ISREG(st.st_mode)) {
        connection.send_error(id, Failure{S_ISDIR(st.st_mode) ? EISDIR : EINVAL, "read " + path + ": not a regular file"});
        return;
    }
    auto job = std::make_unique<FileReadJob>(connection, id, std::move(file), path);
    FileReadJob* raw = job.get();
    connection.add_job(std::move(job));
    raw->produce();
}

FileReadJob::FileReadJob(Connection& connection, uint32_t id, Fd file, std::string path)
    : Job(connection, id), file_(std::move(file)), path_(std::move(path)) {}

void FileReadJob::on_frame(MessageType type, std::string_view) {
    if (type == MessageType::kCancel && !finished_) {
        finished_ = true;
        cancel(connection(), id(), "read " + path_ + ": cancelled");
    }
}

void FileReadJob::produce() {
    Connection& c = connection();
    while (!finished_) {
        if (!c.has_room()) {
            c.wait_for_room(id());
            return;
        }
        char* buf = c.output().begin_frame(MessageType::kReadData, id(), kFileChunk);
        ssize_t n;
        do {
            n = ::read(file_.get(), buf, kFileChunk);
        } while (n < 0 && errno == EINTR);
        c.output().finish_frame(n > 0 ? static_cast<size_t>(n) : 0);
        if (n > 0) {
            sent_ += static_cast<uint64_t>(n);
            continue;
        }
        finished_ = true;
        if (n == 0) {
            send_done(c, id(), sent_);
        } else {
            c.send_error(id(), errno_failure("read " + path_));
            c.finish(id());
        }
    }
}

void FileWriteJob::start(Connection& connection, uint32_t id, const proto::FileWriteRequest& request) {
    auto job = std::make_unique<FileWriteJob>(connection, id, request.sync);
    Failure failure;
    if (!job->writer().open(absolute_path(request.path), request.mode, failure)) {
        connection.send_error(id, failure);
        return;
    }
    connection.add_job(std::move(job));
}

FileWriteJob::FileWriteJob(Connection& connection, uint32_t id, bool sync) : Job(connection, id), sync_(sync) {}

void FileWriteJob::on_frame(MessageType type, std::string_view payload) {
    Failure failure;
    switch (type) {
        case MessageType::kWriteData:
            if (!writer_.write(payload, failure)) fail(failure);
            break;
        case MessageType::kWriteEnd:
            if (writer_.commit(sync_, failure))
                send_done(connection(), id(), writer_.size());
            else
                fail(failure);
            break;
        case MessageType::kCancel:
            writer_.abort();
            cancel(connection(), id(), "write: cancelled");
            break;
        default:
            break;
    }
}

void FileWriteJob::fail(const Failure& failure) {
    writer_.abort();
    connection().send_error(id(), failure);
    connection().finish(id());
}

void ListJob::start(Connection& connection, uint32_t id, const proto::PathRequest& request) {
    auto job = std::make_unique<ListJob>(connection, id);
    Failure failure;
    if (!job->lister().open(absolute_path(request.path), failure)) {
        connection.send_error(id, failure);
        return;
    }
    ListJob* raw = job.get();
    connection.add_job(std::move(job));
    raw->produce();
}

ListJob::ListJob(Connection& connection, uint32_t id) : Job(connection, id) {}

void ListJob::on_frame(MessageType type, std::string_view) {
    if (type == MessageType::kCancel && !finished_) {
        finished_ = true;
        cancel(connection(), id(), "list: cancelled");
    }
}

void ListJob::produce() {
    Connection& c = connection();
    while (!finished_) {
        if (!c.has_room()) {
            c.wait_for_room(id());
            return;
        }
        proto::DirEntries batch;
        Failure failure;
        if (!lister_.next_batch(batch, kListChunk, failure)) {
            finished_ = true;
            c.send_error(id(), failure);
            c.finish(id());
            return;
        }
        if (!batch.empty()) {
            listed_ += batch.size();
            c.send(MessageType::kDirEntries, id(), proto::encode(batch));
        }
        if (lister_.done()) {
            finished_ = true;
            send_done(c, id(), listed_);
        }
    }
}

}  // namespace nanovm::agent
