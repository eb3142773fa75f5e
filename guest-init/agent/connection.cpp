// One client connection (see connection.hpp).
#include "guest-init/agent/connection.hpp"

#include <sys/epoll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>

#include "guest-init/agent/poller.hpp"
#include "guest-init/agent/requests.hpp"
#include "guest-init/console.hpp"
#include "guest-init/protocol/errno_names.hpp"
#include "guest-init/protocol/messages.hpp"

namespace nanovm::agent {
namespace {

using proto::MessageType;

constexpr size_t kReadSize = 256u << 10;
constexpr int kReadsPerEvent = 4;
// Unread input drained before closing after a protocol error, so that the peer sees
// our ERROR frame and an orderly end rather than a reset.
constexpr size_t kDrainBeforeClose = 4u << 20;

bool is_follow_up(MessageType type) {
    switch (type) {
        case MessageType::kStdin:
        case MessageType::kStdinClose:
        case MessageType::kSignal:
        case MessageType::kCancel:
        case MessageType::kWriteData:
        case MessageType::kWriteEnd:
            return true;
        default:
            return false;
    }
}

}  // namespace

Connection::Connection(AgentContext& context, Fd socket)
    : context_(context), socket_(std::move(socket)), parser_(proto::is_client_message) {}

Connection::~Connection() {
    jobs_.clear();
    finished_.clear();
    context_.poller.remove(watch_);
}

bool Connection::start() {
    watched_events_ = EPOLLIN;
    watch_ = context_.poller.add(socket_.get(), watched_events_, [this](uint32_t ev) { on_events(ev); });
    return watch_ != 0;
}

void Connection::send(MessageType type, uint32_t id, std::string_view payload) {
    if (closed_) return;
    output_.append(type, id, payload);
}

void Connection::send_error(uint32_t id, const Failure& failure) {
    send(MessageType::kError, id, proto::encode(proto::ErrorReport{proto::errno_name(failure.err), failure.what}));
}

void Connection::wait_for_room(uint32_t id) {
    if (std::find(waiting_room_.begin(), waiting_room_.end(), id) == waiting_room_.end())
        waiting_room_.push_back(id);
}

void Connection::add_job(std::unique_ptr<Job> job) {
    const uint32_t id = job->id();
    jobs_.emplace(id, std::move(job));
}

void Connection::finish(uint32_t id) {
    auto it = jobs_.find(id);
    if (it == jobs_.end()) return;
    finished_.push_back(std::move(it->second));
    jobs_.erase(it);
}

void Connection::fail(int err, std::string what) {
    if (failing_ || closed_) return;
    guest_init::log_error("agent: closing a connection: " + what);
    send_error(proto::kConnectionId, Failure{err, std::move(what)});
    failing_ = true;
    // Its requests end with it: commands are killed (in the jobs' destructors).
    for (auto& [id, job] : jobs_) finished_.push_back(std::move(job));
    jobs_.clear();
}

void Connection::on_events(uint32_t events) {
    if (closed_) return;
    if (events & (EPOLLHUP | EPOLLERR)) {
        // The peer is gone for good (a half-close is EPOLLRDHUP, not EPOLLHUP).
        close();
        return;
    }
    if (events & EPOLLIN) read_input();
}

void Connection::read_input() {
    for (int i = 0; i < kReadsPerEvent && !closed_ && !failing_ && !input_paused(); ++i) {
        char* buf = parser_.prepare(kReadSize);
        const ssize_t n = ::recv(socket_.get(), buf, kReadSize, MSG_DONTWAIT);
        if (n > 0) {
            parser_.commit(static_cast<size_t>(n));
            process_frames();
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && errno == EAGAIN) return;
        if (n == 0 && parser_.mid_frame()) {
            fail(EPROTO, "the connection ended inside a frame");
        } else {
            close();
        }
        return;
    }
}

void Connection::process_frames() {
    while (!closed_ && !failing_ && !input_paused()) {
        proto::Frame frame;
        switch (parser_.next(frame)) {
            case proto::FrameParser::Status::kNeedMore:
                return;
            case proto::FrameParser::Status::kBadType: {
                char what[64];
                std::snprintf(what, sizeof what, "unknown message type 0x%02x",
                              static_cast<unsigned>(parser_.bad_header().type));
                fail(EPROTO, what);
                return;
            }
            case proto::FrameParser::Status::kOversized:
                fail(EMSGSIZE, "a frame of " + std::to_string(parser_.bad_header().payload_length) +
                                   " bytes (the limit is " + std::to_string(proto::kMaxPayload) + ")");
                return;
            case proto::FrameParser::Status::kFrame:
                handle_frame(frame);
                break;
        }
    }
}

void Connection::handle_frame(const proto::Frame& frame) {
    if (!hello_done_) {
        proto::Hello hello;
        if (frame.type != MessageType::kHello) {
            fail(EPROTO, std::string("HELLO expected first, got ") + proto::message_type_name(frame.type));
        } else if (!proto::decode(frame.payload, hello)) {
            fail(EBADMSG, "malformed HELLO");
        } else if (hello.min_version > proto::kProtocolVersion || hello.max_version < proto::kMinProtocolVersion) {
            fail(EPROTONOSUPPORT, "the agent speaks protocol versions " + std::to_string(proto::kMinProtocolVersion) +
                                      " to " + std::to_string(proto::kProtocolVersion));
        } else {
            hello_done_ = true;
            version_ = std::min(hello.max_version, proto::kProtocolVersion);
            send(MessageType::kHelloReply, proto::kConnectionId,
                 proto::encode(proto::HelloReply{version_, proto::kMaxPayload, context_.software}));
        }
        return;
    }
    switch (frame.type) {
        case MessageType::kHello:
            fail(EPROTO, "a second HELLO");
            return;
        case MessageType::kPing:
            send(MessageType::kPong, frame.id, frame.payload);
            return;
        default:
            break;
    }
    if (proto::message_first_version(frame.type) > version_) {
        fail(EPROTO, std::string(proto::message_type_name(frame.type)) + " needs protocol version " +
                         std::to_string(proto::message_first_version(frame.type)) + "; this connection speaks " +
                         std::to_string(version_));
        return;
    }
    if (is_follow_up(frame.type)) {
        handle_follow_up(frame);
        return;
    }
    if (frame.id == proto::kConnectionId) {
        fail(EPROTO, std::string(proto::message_type_name(frame.type)) + " with request id 0");
        return;
    }
    if (has_job(frame.id)) {
        fail(EPROTO, std::string(proto::message_type_name(frame.type)) + " with request id " +
                         std::to_string(frame.id) + ", which is still in use");
        return;
    }
    if (jobs_.size() >= kMaxJobsPerConnection) {
        send_error(frame.id, Failure{EAGAIN, "too many requests on this connection"});
        return;
    }
    if (!handle_request(*this, frame)) {
        fail(EBADMSG, std::string("malformed ") + proto::message_type_name(frame.type));
    }
}

void Connection::handle_follow_up(const proto::Frame& frame) {
    switch (frame.type) {
        case MessageType::kSignal: {
            proto::SignalRequest signal;
            if (!proto::decode(frame.payload, signal)) {
                fail(EBADMSG, "malformed SIGNAL");
                return;
            }
            break;
        }
        case MessageType::kStdinClose:
        case MessageType::kCancel:
        case MessageType::kWriteEnd:
            if (!frame.payload.empty()) {
                fail(EBADMSG, std::string("malformed ") + proto::message_type_name(frame.type));
                return;
            }
            break;
        default:
            break;
    }
    auto it = jobs_.find(frame.id);
    if (it != jobs_.end()) it->second->on_frame(frame.type, frame.payload);
}

bool Connection::input_paused() const {
    if (output_.size() > kInputStopOutput) return true;
    for (const auto& [id, job] : jobs_) {
        if (job->input_backlogged()) return true;
    }
    return false;
}

void Connection::flush() {
    if (closed_) return;
    // Frames buffered while reading was paused come first once it may go on.
    if (!failing_ && !input_paused()) process_frames();
    for (int round = 0; round < 8 && !closed_; ++round) {
        while (!output_.empty()) {
            const std::string_view pending = output_.pending();
            const ssize_t n = ::send(socket_.get(), pending.data(), pending.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
            if (n > 0) {
                output_.consume(static_cast<size_t>(n));
                continue;
            }
            if (n < 0 && errno == EINTR) continue;
            if (n < 0 && errno == EAGAIN) break;
            close();  // EPIPE, ECONNRESET: the peer is gone
            return;
        }
        if (failing_ || output_.size() >= kOutputLowWater || waiting_room_.empty()) break;
        std::deque<uint32_t> waiting;
        waiting.swap(waiting_room_);
        for (uint32_t id : waiting) {
            auto it = jobs_.find(id);
            if (it != jobs_.end()) it->second->on_room();
        }
    }
    if (failing_) {
        close();
        return;
    }
    update_watch();
}

void Connection::collect() { finished_.clear(); }

void Connection::update_watch() {
    uint32_t events = 0;
    if (!input_paused()) events |= EPOLLIN;
    if (!output_.empty()) events |= EPOLLOUT;
    if (events != watched_events_) {
        context_.poller.modify(watch_, events);
        watched_events_ = events;
    }
}

void Connection::close() {
    if (closed_) return;
    closed_ = true;
    context_.poller.remove(watch_);
    watch_ = 0;
    if (failing_) {
        ::shutdown(socket_.get(), SHUT_WR);
        size_t drained = 0;
        char buf[16384];
        while (drained < kDrainBeforeClose) {
            const ssize_t n = ::recv(socket_.get(), buf, sizeof buf, MSG_DONTWAIT);
            if (n <= 0) break;
            drained += static_cast<size_t>(n);
        }
    }
    socket_.reset();
    for (auto& [id, job] : jobs_) finished_.push_back(std::move(job));
    jobs_.clear();
    waiting_room_.clear();
}

}  // namespace nanovm::agent
