// Streamed file requests: FILE_READ (READ_DATA frames, then DONE), FILE_WRITE
// (WRITE_DATA frames into a temp file, renamed at WRITE_END, then DONE) and LIST
// (DIR_ENTRIES batches, then DONE). Reads and listings only produce while the
// connection's output has room (backpressure); a write takes each frame to disk as it
// arrives. Protocol: guest-init/protocol/messages.hpp.
#pragma once

#include <cstdint>

#include "guest-init/agent/connection.hpp"
#include "guest-init/agent/file_ops.hpp"
#include "guest-init/protocol/messages.hpp"
#include "vmm/fd.hpp"

namespace nanovm::agent {

/// FILE_READ of a regular file (anything else: EISDIR for a directory, EINVAL).
class FileReadJob final : public Job {
public:
    /// Opens the file and starts sending, or answers ERROR.
    static void start(Connection& connection, uint32_t id, const proto::PathRequest& request);

    FileReadJob(Connection& connection, uint32_t id, Fd file, std::string path);
    void on_frame(proto::MessageType type, std::string_view payload) override;
    void on_room() override { produce(); }

private:
    void produce();
    Fd file_;
    std::string path_;
    uint64_t sent_ = 0;
    bool finished_ = false;
};

/// FILE_WRITE through a TempFileWriter.
class FileWriteJob final : public Job {
public:
    /// Creates the temp file and adds the job, or answers ERROR.
    static void start(Connection& connection, uint32_t id, const proto::FileWriteRequest& request);

    FileWriteJob(Connection& connection, uint32_t id, bool sync);
    void on_frame(proto::MessageType type, std::string_view payload) override;
    TempFileWriter& writer() { return writer_; }

private:
    void fail(const Failure& failure);
    TempFileWriter writer_;
    bool sync_;
};

/// LIST of a directory.
class ListJob final : public Job {
public:
    /// Opens the directory and starts sending, or answers ERROR.
    static void start(Connection& connection, uint32_t id, const proto::PathRequest& request);

    ListJob(Connection& connection, uint32_t id);
    void on_frame(proto::MessageType type, std::string_view payload) override;
    void on_room() override { produce(); }
    DirectoryLister& lister() { return lister_; }

private:
    void produce();
    DirectoryLister lister_;
    uint64_t listed_ = 0;
    bool finished_ = false;
};

}  // namespace nanovm::agent
