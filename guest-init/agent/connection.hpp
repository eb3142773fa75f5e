// One client connection of the agent: reads frames, dispatches requests, keeps the
// requests in progress (jobs) and queues their output with backpressure.
//
// Everything runs on the one event-loop thread. Jobs and connections are never
// destroyed in the middle of a callback: finish() and close() move them aside, and
// the server destroys them after the round (collect()).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "guest-init/agent/context.hpp"
#include "guest-init/agent/failure.hpp"
#include "guest-init/protocol/frame_io.hpp"
#include "vmm/fd.hpp"

namespace nanovm::agent {

class Connection;

/// A request in progress (a command, a transfer, a listing). Owned by its connection.
class Job {
public:
    Job(Connection& connection, uint32_t id) : connection_(connection), id_(id) {}
    virtual ~Job() = default;
    Job(const Job&) = delete;
    Job& operator=(const Job&) = delete;

    /// A follow-up frame for this request (STDIN, STDIN_CLOSE, SIGNAL, CANCEL,
    /// WRITE_DATA, WRITE_END), payload already checked where it has a layout.
    /// Kinds that mean nothing to this job are ignored.
    virtual void on_frame(proto::MessageType type, std::string_view payload) = 0;
    /// The connection's output has room again (after Connection::wait_for_room).
    virtual void on_room() {}
    /// True while the job holds enough input that the connection should stop
    /// reading (stdin not yet taken by the command).
    virtual bool input_backlogged() const { return false; }

    uint32_t id() const { return id_; }
    Connection& connection() const { return connection_; }

private:
    Connection& connection_;
    uint32_t id_;
};

/// One client connection.
class Connection {
public:
    Connection(AgentContext& context, Fd socket);
    ~Connection();
    Connection(const Connection&) = delete;
    Connection& operator=(const Connection&) = delete;

    /// Starts watching the socket. False (errno set) on failure.
    bool start();

    /// Queues a frame.
    void send(proto::MessageType type, uint32_t id, std::string_view payload);
    /// Queues ERROR for request `id`.
    void send_error(uint32_t id, const Failure& failure);
    /// The output queue (for frames written in place).
    proto::FrameOutput& output() { return output_; }
    /// True while producers may queue more output (below kOutputHighWater).
    bool has_room() const { return output_.size() < kOutputHighWater; }
    /// Calls on_room() of job `id` once the output has drained below kOutputLowWater.
    void wait_for_room(uint32_t id);

    /// Adds a job under its id (the caller checked that the id is free).
    void add_job(std::unique_ptr<Job> job);
    /// True if `id` is free for a new request and the job limit allows one more.
    bool has_job(uint32_t id) const { return jobs_.count(id) != 0; }
    size_t job_count() const { return jobs_.size(); }
    /// Ends job `id` (it must send its last frame itself); destroyed in collect().
    void finish(uint32_t id);

    /// A protocol error: queue ERROR (id 0) with `err`, then close.
    void fail(int err, std::string what);

    /// Writes queued output, wakes producers waiting for room, resumes reading once
    /// nothing holds it back. Called after every event-loop round.
    void flush();
    /// Destroys finished jobs. Called after flush().
    void collect();
    /// True once the connection is over (the server then destroys it).
    bool closed() const { return closed_; }

    AgentContext& context() { return context_; }

private:
    void on_events(uint32_t events);
    void read_input();
    void process_frames();
    void handle_frame(const proto::Frame& frame);
    void handle_follow_up(const proto::Frame& frame);
    bool input_paused() const;
    void update_watch();
    void close();

    AgentContext& context_;
    Fd socket_;
    uint64_t watch_ = 0;
    uint32_t watched_events_ = 0;
    proto::FrameParser parser_;
    proto::FrameOutput output_;
    bool hello_done_ = false;
    uint32_t version_ = 0;  // the protocol version HELLO negotiated
    bool failing_ = false;  // a fatal error is queued: stop reading, close after flush
    bool closed_ = false;
    bool eof_ = false;
    std::deque<uint32_t> waiting_room_;
    // Last: destroyed first, while the rest of the connection still exists.
    std::vector<std::unique_ptr<Job>> finished_;
    std::map<uint32_t, std::unique_ptr<Job>> jobs_;
};

}  // namespace nanovm::agent
