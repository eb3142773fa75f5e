// The guest agent client (see agent_client.hpp).
#include "api/agent_client/agent_client.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <system_error>

#include "guest-init/protocol/errno_names.hpp"
#include "vmm/printable.hpp"

namespace nanovm::agent {

using proto::MessageType;

namespace {
// Bytes per WRITE_DATA frame.
constexpr size_t kWriteChunk = 256u << 10;
// Output queued above which write_file() waits for the socket instead of reading
// more from its source.
constexpr size_t kOutputHighWater = 1u << 20;
constexpr size_t kReadSize = 256u << 10;

[[noreturn]] void malformed(MessageType type) {
    throw ConnectionError(std::string("malformed ") + proto::message_type_name(type) + " from the agent");
}

template <typename T>
T decoded(const proto::Frame& frame) {
    T value;
    if (!proto::decode(frame.payload, value)) malformed(frame.type);
    return value;
}
}  // namespace

namespace {
// What a request in flight waits for.
enum RequestKind : int {
    kExecRequest,
    kReadRequest,
    kWriteRequest,
    kListRequest,
    kStatRequest,
    kOkRequest,
    kJobStartRequest,
    kJobListRequest,
    kJobAttachRequest,
};
}  // namespace

// One request's answer as it comes in.
struct AgentClient::Pending {
    static constexpr int kExec = kExecRequest, kRead = kReadRequest, kWrite = kWriteRequest, kList = kListRequest,
                         kStat = kStatRequest, kOk = kOkRequest, kJobStart = kJobStartRequest,
                         kJobList = kJobListRequest, kJobAttach = kJobAttachRequest;
    int kind = kOk;
    bool done = false;
    /// Its answer is a command's or job's end, which may take as long as the program
    /// runs: bounded by `end` (if any) and the connection's deadline, not by
    /// reply_timeout.
    bool awaits_end = false;
    /// A command's own bound: started + timeout + exit_grace (none without a timeout).
    std::optional<std::chrono::steady_clock::time_point> end;
    std::optional<proto::ErrorReport> error;
    OutputCallbacks callbacks;
    ExecResult result;
    std::function<void(std::string_view)> sink;
    uint64_t count = 0;
    std::vector<proto::DirEntry> entries;
    bool too_many_entries = false;
    proto::FileInfo info;
    uint64_t job = 0;
    proto::JobList jobs;
    JobOutputCallback on_job_output;
    /// A request nobody waits for (resync_ahead): forgotten when its answer comes,
    /// which goes to `on_refused` if it is the agent's refusal.
    bool detached = false;
    std::function<void(const AgentError&)> on_refused;
};

namespace {
// The frames an answer to a request of `kind` may have besides ERROR.
bool fits(int kind, MessageType type) {
    switch (type) {
        case MessageType::kStdout:
        case MessageType::kStderr:
            return kind == kExecRequest;
        case MessageType::kExit:
            return kind == kExecRequest || kind == kJobAttachRequest;
        case MessageType::kJobStarted:
            return kind == kJobStartRequest;
        case MessageType::kJobListReply:
            return kind == kJobListRequest;
        case MessageType::kJobOutput:
            return kind == kJobAttachRequest;
        case MessageType::kReadData:
            return kind == kReadRequest;
        case MessageType::kDone:
            return kind == kReadRequest || kind == kWriteRequest || kind == kListRequest || kind == kJobAttachRequest;
        case MessageType::kDirEntries:
            return kind == kListRequest;
        case MessageType::kStatReply:
            return kind == kStatRequest;
        case MessageType::kOk:
            return kind == kOkRequest;
        case MessageType::kError:
            return true;
        default:
            return false;
    }
}

void collect(std::string& into, std::string_view data, size_t limit, bool& truncated) {
    const size_t room = into.size() < limit ? limit - into.size() : 0;
    if (data.size() > room) truncated = true;
    into.append(data.substr(0, room));
}
}  // namespace

AgentError::AgentError(std::string errno_name, std::string message)
    : std::runtime_error(printable(errno_name) + ": " + printable(message)),
      errno_name_(printable(errno_name)),
      message_(printable(message)) {}

int AgentError::errno_value() const { return proto::errno_from_name(errno_name_); }

Command Command::program(std::vector<std::string> argv) {
    Command c;
    c.argv = std::move(argv);
    return c;
}

Command Command::shell_command(std::string line) {
    Command c;
    c.shell = std::move(line);
    return c;
}

AgentClient::AgentClient(Fd socket) : socket_(std::move(socket)), parser_(proto::is_agent_message) {}
AgentClient::AgentClient(AgentClient&&) noexcept = default;
AgentClient& AgentClient::operator=(AgentClient&&) noexcept = default;
AgentClient::~AgentClient() = default;

AgentClient AgentClient::connect(const Endpoint& endpoint, std::chrono::milliseconds timeout) {
    const auto start = std::chrono::steady_clock::now();
    AgentClient client(connect_endpoint(endpoint, timeout));
    const auto spent = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
    client.hello(timeout > spent ? timeout - spent : std::chrono::milliseconds(0));
    return client;
}

void AgentClient::hello(std::chrono::milliseconds timeout) {
    proto::Hello hello;
    hello.min_version = proto::kMinProtocolVersion;
    hello.max_version = proto::kProtocolVersion;
    hello.software = "nanovm agent client";
    send(MessageType::kHello, proto::kConnectionId, proto::encode(hello));
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!hello_done_) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
        if (left.count() <= 0) throw TimeoutError("no HELLO_REPLY from the agent in time");
        pump_until(deadline, "HELLO_REPLY");
    }
}

RequestId AgentClient::next_id() {
    // Ids are never reused while a request may still be answered: they only grow
    // (and skip 0, the connection's id, when they wrap after 2^32 requests).
    do {
        ++last_id_;
    } while (last_id_ == proto::kConnectionId || pending_.count(last_id_) != 0);
    return last_id_;
}

AgentClient::Pending& AgentClient::add_pending(RequestId id, int kind) {
    auto p = std::make_unique<Pending>();
    p->kind = kind;
    p->awaits_end = kind == Pending::kExec;  // a command's (or session run's) end
    Pending& ref = *p;
    pending_[id] = std::move(p);
    return ref;
}

void AgentClient::send(MessageType type, uint32_t id, std::string_view payload) {
    output_.append(type, id, payload);
    write_some();
}

void AgentClient::write_some() {
    while (!output_.empty()) {
        const std::string_view bytes = output_.pending();
        const ssize_t n = ::send(socket_.get(), bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            output_.consume(static_cast<size_t>(n));
            last_progress_ = Clock::now();
        } else if (n < 0 && errno == EINTR) {
            continue;
        } else if (n < 0 && errno == EAGAIN) {
            return;
        } else {
            // The agent went away; what it said last (a fatal ERROR) explains why.
            const int err = errno;
            read_some();
            throw ConnectionError(std::string("send to the agent: ") + std::strerror(err));
        }
    }
}

void AgentClient::read_some() {
    for (;;) {
        char* buf = parser_.prepare(kReadSize);
        const ssize_t n = ::recv(socket_.get(), buf, kReadSize, MSG_DONTWAIT);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && errno == EAGAIN) return;
        if (n > 0) {
            parser_.commit(static_cast<size_t>(n));
            last_progress_ = Clock::now();
        }
        for (;;) {
            proto::Frame frame;
            const auto status = parser_.next(frame);
            if (status == proto::FrameParser::Status::kNeedMore) break;
            if (status != proto::FrameParser::Status::kFrame)
                throw ConnectionError("the agent sent a malformed frame (bad type or length)");
            handle(frame);
        }
        if (n == 0) throw ConnectionError("the agent closed the connection");
        if (n < 0) throw ConnectionError(std::string("receive from the agent: ") + std::strerror(errno));
        if (static_cast<size_t>(n) < kReadSize) return;
    }
}

void AgentClient::pump(int timeout_ms) {
    pollfd p{socket_.get(), static_cast<short>(POLLIN | (output_.empty() ? 0 : POLLOUT)), 0};
    const int n = ::poll(&p, 1, timeout_ms);
    if (n < 0) {
        if (errno == EINTR) return;
        throw std::system_error(errno, std::generic_category(), "poll");
    }
    if (n == 0) return;
    if (p.revents & POLLOUT) write_some();
    if (p.revents & (POLLIN | POLLHUP | POLLERR)) read_some();
}

void AgentClient::pump_until(std::optional<Clock::time_point> until, const std::string& what) {
    if (deadline_ && (!until || *deadline_ < *until)) until = deadline_;
    if (!until) return pump(-1);
    const auto now = Clock::now();
    if (now >= *until) throw TimeoutError("no answer from the agent in time (" + what + ")");
    // Rounded up, so that the wait does not end just before the deadline and spin.
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(*until - now).count();
    pump(static_cast<int>(std::min<int64_t>(left, 24 * 3600 * 1000)));
}

void AgentClient::poll(std::chrono::milliseconds timeout) {
    if (deadline_) {
        const auto now = Clock::now();
        if (now >= *deadline_) throw TimeoutError("no answer from the agent in time (the connection's deadline)");
        timeout = std::min(timeout, std::chrono::ceil<std::chrono::milliseconds>(*deadline_ - now));
    }
    pump(static_cast<int>(timeout.count()));
}

std::optional<std::chrono::steady_clock::time_point> AgentClient::deadline_for(RequestId id) const {
    std::optional<Clock::time_point> end = deadline_;
    const auto it = pending_.find(id);
    if (it != pending_.end() && it->second->end && (!end || *it->second->end < *end)) end = it->second->end;
    return end;
}

void AgentClient::handle(const proto::Frame& frame) {
    if (frame.id == proto::kConnectionId) {
        switch (frame.type) {
            case MessageType::kError: {
                const auto e = decoded<proto::ErrorReport>(frame);
                throw ConnectionError("the agent closed the connection: " + printable(e.errno_name) + ": " +
                                      printable(e.message));
            }
            case MessageType::kPong:
                pong_ = true;
                return;
            case MessageType::kHelloReply: {
                const auto reply = decoded<proto::HelloReply>(frame);
                if (hello_done_ || reply.version < proto::kMinProtocolVersion ||
                    reply.version > proto::kProtocolVersion)
                    throw ConnectionError("unexpected HELLO_REPLY (version " + std::to_string(reply.version) + ")");
                protocol_version_ = reply.version;
                agent_software_ = printable(reply.software);  // the guest's text
                hello_done_ = true;
                return;
            }
            default:
                throw ConnectionError(std::string("unexpected ") + proto::message_type_name(frame.type) + " for id 0");
        }
    }
    auto it = pending_.find(frame.id);
    if (it == pending_.end()) return;  // an abandoned request's late frames
    Pending& p = *it->second;
    if (p.done || !fits(p.kind, frame.type))
        throw ConnectionError(std::string("unexpected ") + proto::message_type_name(frame.type) + " for request " +
                              std::to_string(frame.id));
    if (p.detached) {
        // Nobody waits for it (resync_ahead): its one answer (OK or ERROR, as fits()
        // checked) ends it here.
        const auto on_refused = std::move(p.on_refused);
        pending_.erase(it);
        if (frame.type == MessageType::kError && on_refused) {
            const auto e = decoded<proto::ErrorReport>(frame);
            on_refused(AgentError(e.errno_name, e.message));
        }
        return;
    }
    switch (frame.type) {
        case MessageType::kStdout:
            if (p.callbacks.on_stdout)
                p.callbacks.on_stdout(frame.payload);
            else
                collect(p.result.stdout_data, frame.payload, limits_.max_collected_output, p.result.output_truncated);
            return;
        case MessageType::kStderr:
            if (p.callbacks.on_stderr)
                p.callbacks.on_stderr(frame.payload);
            else
                collect(p.result.stderr_data, frame.payload, limits_.max_collected_output, p.result.output_truncated);
            return;
        case MessageType::kExit: {
            const auto exit = decoded<proto::ExitReport>(frame);
            p.result.status = ExitStatus{exit.signaled, exit.value, exit.timed_out};
            p.done = true;
            return;
        }
        case MessageType::kError:
            p.error = decoded<proto::ErrorReport>(frame);
            p.done = true;
            return;
        case MessageType::kReadData:
            if (p.sink) p.sink(frame.payload);
            p.count += frame.payload.size();
            return;
        case MessageType::kDone:
            p.count = decoded<proto::DoneReport>(frame).count;
            p.done = true;
            return;
        case MessageType::kDirEntries: {
            auto batch = decoded<proto::DirEntries>(frame);
            if (p.entries.size() + batch.size() > limits_.max_list_entries) {
                p.too_many_entries = true;
                p.entries.clear();
            }
            if (!p.too_many_entries) {
                for (auto& e : batch) p.entries.push_back(std::move(e));
            }
            return;
        }
        case MessageType::kStatReply:
            p.info = decoded<proto::FileInfo>(frame);
            p.done = true;
            return;
        case MessageType::kOk:
            p.done = true;
            return;
        case MessageType::kJobStarted:
            p.job = decoded<proto::JobRef>(frame).job;
            p.done = true;
            return;
        case MessageType::kJobListReply:
            p.jobs = decoded<proto::JobList>(frame);
            p.done = true;
            return;
        case MessageType::kJobOutput: {
            const auto out = decoded<proto::JobOutput>(frame);
            if (p.on_job_output)
                p.on_job_output(out.stream, out.offset, out.data);
            else
                collect(out.stream == proto::JobStream::kStdout ? p.result.stdout_data : p.result.stderr_data, out.data,
                        limits_.max_collected_output, p.result.output_truncated);
            return;
        }
        default:
            throw ConnectionError(std::string("unexpected ") + proto::message_type_name(frame.type));
    }
}

void AgentClient::wait_done(RequestId id) {
    last_progress_ = Clock::now();  // the idle bound counts from the start of this wait
    for (;;) {
        auto it = pending_.find(id);
        if (it == pending_.end()) throw std::invalid_argument("no request " + std::to_string(id) + " in flight");
        const Pending& p = *it->second;
        if (p.done) return;
        // A command's or job's end: its own bound (or none); anything else: reply_timeout idle.
        const std::optional<Clock::time_point> until = p.awaits_end ? p.end : idle_deadline();
        pump_until(until, p.awaits_end ? "the end of command " + std::to_string(id)
                                       : "the answer to request " + std::to_string(id));
    }
}

AgentClient::Pending AgentClient::take(RequestId id) {
    wait_done(id);
    auto it = pending_.find(id);
    Pending p = std::move(*it->second);
    pending_.erase(it);
    if (p.error) throw AgentError(p.error->errno_name, p.error->message);
    return p;
}

bool AgentClient::done(RequestId id) const {
    auto it = pending_.find(id);
    return it != pending_.end() && it->second->done;
}

std::chrono::microseconds AgentClient::ping() {
    const auto start = std::chrono::steady_clock::now();
    pong_ = false;
    last_progress_ = start;
    send(MessageType::kPing, proto::kConnectionId, "ping");
    while (!pong_) pump_until(idle_deadline(), "PONG");
    return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - start);
}

namespace {

// EXEC's (and JOB_START's) payload for `command`. Throws std::invalid_argument.
proto::ExecRequest exec_request(const Command& command) {
    proto::ExecRequest request;
    if (!command.shell.empty()) {
        if (!command.argv.empty()) throw std::invalid_argument("a Command has argv or shell, not both");
        request.shell = true;
        request.argv = {command.shell};
    } else {
        if (command.argv.empty() || command.argv[0].empty()) throw std::invalid_argument("a Command needs argv or shell");
        request.argv = command.argv;
    }
    request.env = command.env;
    request.clear_env = command.clear_env;
    request.cwd = command.cwd;
    request.uid = command.uid;
    request.gid = command.gid;
    request.stdin_stream = command.stdin_stream || command.stdin_data.has_value();
    request.timeout_ms = static_cast<uint32_t>(command.timeout.count());
    return request;
}

// EXEC's (and JOB_START's) encoded payload for `command`. The agent ends a connection
// that sends a frame over kMaxPayload: such a command is refused here (E2BIG), the
// connection and its other requests untouched.
std::string exec_payload(const Command& command) {
    std::string payload = proto::encode(exec_request(command));
    if (payload.size() > proto::kMaxPayload)
        throw AgentError("E2BIG", "the command's argv, env and cwd take " + std::to_string(payload.size()) +
                                      " bytes; one request holds at most " + std::to_string(proto::kMaxPayload));
    return payload;
}

}  // namespace

size_t exec_request_bytes(const Command& command) { return proto::encode(exec_request(command)).size(); }

RequestId AgentClient::start(const Command& command, OutputCallbacks callbacks) {
    const std::string payload = exec_payload(command);
    const RequestId id = next_id();
    Pending& p = add_pending(id, Pending::kExec);
    p.callbacks = std::move(callbacks);
    if (command.timeout.count() > 0) p.end = Clock::now() + command.timeout + limits_.exit_grace;
    send(MessageType::kExec, id, payload);
    if (command.stdin_data) {
        send_stdin(id, *command.stdin_data);
        close_stdin(id);
    }
    return id;
}

void AgentClient::send_stdin(RequestId id, std::string_view data) {
    while (!data.empty()) {
        const size_t n = std::min<size_t>(data.size(), kWriteChunk);
        while (output_.size() > kOutputHighWater) {
            // The agent takes stdin as the command reads it: wait as long as the
            // command may run. Once it has ended, its stdin goes nowhere.
            const auto it = pending_.find(id);
            if (it == pending_.end() || it->second->done) return;
            pump_until(it->second->end, "stdin of command " + std::to_string(id));
        }
        send(MessageType::kStdin, id, data.substr(0, n));
        data.remove_prefix(n);
    }
}

void AgentClient::close_stdin(RequestId id) { send(MessageType::kStdinClose, id, {}); }

void AgentClient::send_signal(RequestId id, int signal) {
    send(MessageType::kSignal, id, proto::encode(proto::SignalRequest{signal}));
}

void AgentClient::cancel(RequestId id) { send(MessageType::kCancel, id, {}); }

ExecResult AgentClient::wait(RequestId id) { return take(id).result; }

ExecResult AgentClient::run(const Command& command, const OutputCallbacks& callbacks) {
    return wait(start(command, callbacks));
}

uint64_t AgentClient::write_file(const std::string& guest_path, const std::function<size_t(char*, size_t)>& source,
                                 const WriteOptions& options) {
    const RequestId id = next_id();
    Pending& p = add_pending(id, Pending::kWrite);
    send(MessageType::kFileWrite, id, proto::encode(proto::FileWriteRequest{guest_path, options.mode, options.sync}));
    last_progress_ = Clock::now();
    bool end = false;
    while (!end && !p.done) {
        if (output_.size() >= kOutputHighWater) {
            pump_until(idle_deadline(), "the agent to take the data of " + guest_path);
            continue;
        }
        char* buf = output_.begin_frame(MessageType::kWriteData, id, kWriteChunk);
        size_t n = 0;
        try {
            n = source(buf, kWriteChunk);
        } catch (...) {
            output_.finish_frame(0);
            pending_.erase(id);
            cancel(id);
            throw;
        }
        output_.finish_frame(n);
        end = n == 0;
        write_some();
        pump(0);  // an early ERROR (no such directory...) stops the upload
    }
    if (!p.done) send(MessageType::kWriteEnd, id, {});
    return take(id).count;
}

uint64_t AgentClient::write_file(const std::string& guest_path, std::string_view data, const WriteOptions& options) {
    return write_file(
        guest_path,
        [&data](char* buf, size_t size) {
            const size_t n = std::min(size, data.size());
            std::memcpy(buf, data.data(), n);
            data.remove_prefix(n);
            return n;
        },
        options);
}

uint64_t AgentClient::upload(const std::string& host_path, const std::string& guest_path,
                             std::optional<WriteOptions> options) {
    Fd fd(::open(host_path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd) throw std::system_error(errno, std::generic_category(), "open " + host_path);
    if (!options) {
        struct stat st;
        if (::fstat(fd.get(), &st) != 0) throw std::system_error(errno, std::generic_category(), "stat " + host_path);
        options = WriteOptions{static_cast<uint32_t>(st.st_mode & 07777), false};
    }
    return write_file(
        guest_path,
        [&](char* buf, size_t size) {
            for (;;) {
                const ssize_t n = ::read(fd.get(), buf, size);
                if (n >= 0) return static_cast<size_t>(n);
                if (errno != EINTR) throw std::system_error(errno, std::generic_category(), "read " + host_path);
            }
        },
        *options);
}

uint64_t AgentClient::read_file(const std::string& guest_path, const std::function<void(std::string_view)>& sink) {
    const RequestId id = next_id();
    Pending& p = add_pending(id, Pending::kRead);
    p.sink = sink;
    send(MessageType::kFileRead, id, proto::encode(proto::PathRequest{guest_path}));
    try {
        return take(id).count;
    } catch (const AgentError&) {
        throw;
    } catch (...) {
        // The sink failed: stop the transfer; its late frames are ignored.
        pending_.erase(id);
        cancel(id);
        throw;
    }
}

std::string AgentClient::read_file(const std::string& guest_path) {
    std::string data;
    bool too_big = false;
    read_file(guest_path, [&](std::string_view chunk) { collect(data, chunk, limits_.max_collected_output, too_big); });
    if (too_big)
        throw AgentError("EFBIG", "read " + guest_path + ": larger than " +
                                      std::to_string(limits_.max_collected_output) + " bytes (stream it instead)");
    return data;
}

uint64_t AgentClient::download(const std::string& guest_path, const std::string& host_path) {
    Fd fd(::open(host_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (!fd) throw std::system_error(errno, std::generic_category(), "open " + host_path);
    return read_file(guest_path, [&](std::string_view chunk) {
        while (!chunk.empty()) {
            const ssize_t n = ::write(fd.get(), chunk.data(), chunk.size());
            if (n < 0 && errno == EINTR) continue;
            if (n < 0) throw std::system_error(errno, std::generic_category(), "write " + host_path);
            chunk.remove_prefix(static_cast<size_t>(n));
        }
    });
}

std::vector<proto::DirEntry> AgentClient::list(const std::string& guest_path) {
    const RequestId id = next_id();
    add_pending(id, Pending::kList);
    send(MessageType::kList, id, proto::encode(proto::PathRequest{guest_path}));
    Pending p = take(id);
    if (p.too_many_entries)
        throw AgentError("E2BIG", "list " + guest_path + ": more than " + std::to_string(limits_.max_list_entries) +
                                      " entries");
    return std::move(p.entries);
}

proto::FileInfo AgentClient::stat(const std::string& guest_path, bool follow_symlinks) {
    const RequestId id = next_id();
    add_pending(id, Pending::kStat);
    send(MessageType::kStat, id, proto::encode(proto::StatRequest{guest_path, follow_symlinks}));
    return take(id).info;
}

void AgentClient::simple_request(MessageType type, const std::string& payload) {
    const RequestId id = next_id();
    add_pending(id, Pending::kOk);
    send(type, id, payload);
    take(id);
}

void AgentClient::mkdir(const std::string& guest_path, uint32_t mode, bool parents) {
    simple_request(MessageType::kMkdir, proto::encode(proto::MkdirRequest{guest_path, mode, parents}));
}

void AgentClient::remove(const std::string& guest_path, bool recursive) {
    simple_request(MessageType::kRemove, proto::encode(proto::RemoveRequest{guest_path, recursive}));
}

void AgentClient::chmod(const std::string& guest_path, uint32_t mode) {
    simple_request(MessageType::kChmod, proto::encode(proto::ChmodRequest{guest_path, mode}));
}

void AgentClient::open_session(const std::string& name, const std::string& cwd, const std::vector<std::string>& env) {
    simple_request(MessageType::kSessionOpen, proto::encode(proto::SessionOpenRequest{name, cwd, env}));
}

RequestId AgentClient::start_in_session(const std::string& name, const std::string& command,
                                        std::chrono::milliseconds timeout, OutputCallbacks callbacks) {
    const RequestId id = next_id();
    Pending& p = add_pending(id, Pending::kExec);
    p.callbacks = std::move(callbacks);
    if (timeout.count() > 0) p.end = Clock::now() + timeout + limits_.exit_grace;
    send(MessageType::kSessionRun, id,
         proto::encode(proto::SessionRunRequest{name, command, static_cast<uint32_t>(timeout.count())}));
    return id;
}

ExecResult AgentClient::run_in_session(const std::string& name, const std::string& command,
                                       std::chrono::milliseconds timeout, const OutputCallbacks& callbacks) {
    return wait(start_in_session(name, command, timeout, callbacks));
}

void AgentClient::close_session(const std::string& name) {
    simple_request(MessageType::kSessionClose, proto::encode(proto::SessionCloseRequest{name}));
}

void AgentClient::shutdown(proto::ShutdownRequest::Action action) {
    simple_request(MessageType::kShutdown, proto::encode(proto::ShutdownRequest{action}));
}

void AgentClient::resync(std::span<const uint8_t> entropy, int64_t wall_clock_ns, const std::string& hostname) {
    simple_request(MessageType::kResync, resync_payload(entropy, wall_clock_ns, hostname));
}

void AgentClient::resync_ahead(std::span<const uint8_t> entropy, int64_t wall_clock_ns,
                               std::function<void(const AgentError&)> on_refused) {
    const std::string payload = resync_payload(entropy, wall_clock_ns, "");
    const RequestId id = next_id();
    Pending& p = add_pending(id, Pending::kOk);
    p.detached = true;
    p.on_refused = std::move(on_refused);
    send(MessageType::kResync, id, payload);
}

std::string AgentClient::resync_payload(std::span<const uint8_t> entropy, int64_t wall_clock_ns,
                                        const std::string& hostname) const {
    if (entropy.size() < proto::kMinResyncEntropyBytes || entropy.size() > proto::kMaxResyncEntropyBytes)
        throw std::invalid_argument("resync: " + std::to_string(entropy.size()) + " bytes of entropy (takes " +
                                    std::to_string(proto::kMinResyncEntropyBytes) + " to " +
                                    std::to_string(proto::kMaxResyncEntropyBytes) + ")");
    if (wall_clock_ns < 0) throw std::invalid_argument("resync: a wall clock before the epoch");
    if (!hostname.empty() && !proto::valid_hostname(hostname))
        throw std::invalid_argument("resync: bad hostname \"" + hostname + "\" (1 to " +
                                    std::to_string(proto::kMaxHostnameBytes) + " of A-Z a-z 0-9 . -)");
    const uint32_t needs = proto::message_first_version(MessageType::kResync);
    if (protocol_version_ < needs)
        throw AgentError("EOPNOTSUPP", "resync: the agent speaks protocol version " +
                                           std::to_string(protocol_version_) + " (RESYNC needs " +
                                           std::to_string(needs) + ")");
    proto::ResyncRequest request;
    request.entropy.assign(reinterpret_cast<const char*>(entropy.data()), entropy.size());
    request.wall_clock_ns = wall_clock_ns;
    request.hostname = hostname;
    return proto::encode(request);
}

void AgentClient::require_jobs(const char* what) const {
    const uint32_t needs = proto::message_first_version(MessageType::kJobStart);
    if (protocol_version_ < needs)
        throw AgentError("EOPNOTSUPP", std::string(what) + ": the agent speaks protocol version " +
                                           std::to_string(protocol_version_) + " (background jobs need " +
                                           std::to_string(needs) + ")");
}

uint64_t AgentClient::start_job(const Command& command) {
    require_jobs("start_job");
    const std::string payload = exec_payload(command);
    const RequestId id = next_id();
    add_pending(id, Pending::kJobStart);
    send(MessageType::kJobStart, id, payload);
    const uint64_t job = take(id).job;
    if (command.stdin_data) {
        job_stdin(job, *command.stdin_data);
        job_close_stdin(job);
    }
    return job;
}

std::vector<JobInfo> AgentClient::list_jobs() {
    require_jobs("list_jobs");
    const RequestId id = next_id();
    add_pending(id, Pending::kJobList);
    send(MessageType::kJobList, id, proto::encode(proto::JobListRequest{}));
    std::vector<JobInfo> out;
    for (const proto::JobInfo& j : take(id).jobs)
        out.push_back(JobInfo{j.job, j.argv, j.shell, j.started_unix_ms, j.running,
                              ExitStatus{j.exit.signaled, j.exit.value, j.exit.timed_out}, j.stdout_bytes,
                              j.stderr_bytes, j.stdin_open});
    return out;
}

RequestId AgentClient::attach_job(uint64_t job, uint64_t stdout_from, uint64_t stderr_from, bool follow,
                                  JobOutputCallback on_output) {
    require_jobs("attach_job");
    const RequestId id = next_id();
    Pending& p = add_pending(id, Pending::kJobAttach);
    p.on_job_output = std::move(on_output);
    p.awaits_end = follow;
    send(MessageType::kJobAttach, id, proto::encode(proto::JobAttach{job, stdout_from, stderr_from, follow}));
    return id;
}

void AgentClient::job_stdin(uint64_t job, std::string_view data) {
    require_jobs("job_stdin");
    // One request per chunk: each is queued in the agent before the next goes.
    do {
        const size_t n = std::min<size_t>(data.size(), kWriteChunk);
        simple_request(MessageType::kJobStdin, proto::encode(proto::JobStdin{job, std::string(data.substr(0, n))}));
        data.remove_prefix(n);
    } while (!data.empty());
}

void AgentClient::job_close_stdin(uint64_t job) {
    require_jobs("job_close_stdin");
    simple_request(MessageType::kJobStdinClose, proto::encode(proto::JobRef{job}));
}

void AgentClient::job_signal(uint64_t job, int signal) {
    require_jobs("job_signal");
    simple_request(MessageType::kJobSignal, proto::encode(proto::JobSignal{job, signal}));
}

ExitStatus AgentClient::wait_job(uint64_t job) {
    require_jobs("wait_job");
    const RequestId id = next_id();
    add_pending(id, Pending::kJobAttach).awaits_end = true;
    send(MessageType::kJobWait, id, proto::encode(proto::JobRef{job}));
    return take(id).result.status;
}

void AgentClient::forget_job(uint64_t job) {
    require_jobs("forget_job");
    simple_request(MessageType::kJobForget, proto::encode(proto::JobRef{job}));
}

namespace {

// kResyncEntropyBytes from getrandom(2) into `entropy`, and CLOCK_REALTIME now, ns.
int64_t resync_inputs(uint8_t (&entropy)[kResyncEntropyBytes]) {
    size_t filled = 0;
    while (filled < sizeof entropy) {
        const ssize_t n = ::getrandom(entropy + filled, sizeof entropy - filled, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) throw std::system_error(errno, std::generic_category(), "getrandom");
        filled += static_cast<size_t>(n);
    }
    timespec now{};
    if (::clock_gettime(CLOCK_REALTIME, &now) != 0)
        throw std::system_error(errno, std::generic_category(), "clock_gettime CLOCK_REALTIME");
    return static_cast<int64_t>(now.tv_sec) * 1'000'000'000 + now.tv_nsec;
}

}  // namespace

void resync_guest(AgentClient& client, const std::string& hostname) {
    uint8_t entropy[kResyncEntropyBytes];
    const int64_t ns = resync_inputs(entropy);
    client.resync(entropy, ns, hostname);
}

void resync_guest_ahead(AgentClient& client, std::function<void(const AgentError&)> on_refused) {
    uint8_t entropy[kResyncEntropyBytes];
    const int64_t ns = resync_inputs(entropy);
    client.resync_ahead(entropy, ns, std::move(on_refused));
}

}  // namespace nanovm::agent
