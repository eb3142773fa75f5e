// The host side of the guest agent protocol (guest-init/protocol/): run commands,
// move files and keep shell sessions in a VM (or in a nanovm-agent host process).
// Used by the CLI and, later, nanovmd.
//
// One AgentClient is one connection; many requests can be in flight on it at once
// (start() several commands, then wait() for each). It is not thread-safe: use one
// per thread. Callbacks run inside the client's calls (run, wait, read_file...), for
// any request of the connection whose frames arrive meanwhile. Memory stays bounded:
// a large file is streamed in 256 KiB frames from a source callback, reads stream
// into a sink callback, and output is only collected when no callback takes it, up
// to ClientLimits (the agent runs in the guest, and the guest is not trusted: nothing
// it sends can make the client allocate without bound).
//
// Every wait on the agent has a deadline (the guest is not trusted to answer): a
// request the agent answers by itself (files, stat, sessions, shutdown, resync,
// ping, jobs' start/list/stdin/signal/forget) waits at most ClientLimits::reply_timeout
// without progress; a command's end (wait(), a followed attach_job, wait_job) is
// awaited until its timeout plus ClientLimits::exit_grace when it has a timeout (a
// command or job without one may run, silently, as long as it likes); and set_deadline()
// bounds every wait of the connection at once (a stop, a boot). Past any of these
// the call throws TimeoutError.
//
// Errors: AgentError for a request the agent refused (its errno name: ENOENT,
// EACCES...), ConnectionError when the connection or the protocol fails, or a wait
// passes its deadline (TimeoutError; the client is unusable after either),
// std::system_error when connecting fails. Text the agent sent is printable-only in
// these errors (vmm/printable.hpp): the guest chose it.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "api/agent_client/endpoint.hpp"
#include "guest-init/protocol/frame_io.hpp"
#include "guest-init/protocol/messages.hpp"
#include "vmm/fd.hpp"

namespace nanovm::agent {

/// The agent answered a request with ERROR.
class AgentError : public std::runtime_error {
public:
    AgentError(std::string errno_name, std::string message);
    /// "ENOENT", "EACCES"...
    const std::string& errno_name() const { return errno_name_; }
    /// The errno value of that name on this host, 0 if unknown.
    int errno_value() const;
    /// What the agent was doing, e.g. "open /etc/x".
    const std::string& message() const { return message_; }

private:
    std::string errno_name_;
    std::string message_;
};

/// The connection broke, or the agent broke the protocol (or closed the connection
/// with a fatal ERROR, whose text is in what()).
class ConnectionError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

/// A wait on the agent passed its deadline (AgentClient::set_deadline,
/// ClientLimits::reply_timeout or a command's timeout + exit_grace). The request's
/// answer may still come; the client is unusable after it, as after any
/// ConnectionError.
class TimeoutError : public ConnectionError {
public:
    using ConnectionError::ConnectionError;
};

/// A command to run.
struct Command {
    /// Program and arguments; argv[0] without '/' is looked up on the command's PATH.
    std::vector<std::string> argv;
    /// Or, when non-empty (argv then empty): `/bin/sh -c <shell>`.
    std::string shell;
    /// "KEY=VALUE" set over the agent's base environment (HOME, PATH, TERM, SHELL,
    /// USER, LOGNAME), or over nothing with clear_env.
    std::vector<std::string> env;
    bool clear_env = false;
    /// Working directory in the guest; "" means "/".
    std::string cwd;
    /// Run as this user / group (supplementary groups dropped).
    std::optional<uint32_t> uid;
    std::optional<uint32_t> gid;
    /// Bytes for stdin, sent then closed (EOF). Without it and without stdin_stream,
    /// stdin is /dev/null.
    std::optional<std::string> stdin_data;
    /// With start(): stdin is fed by send_stdin() until close_stdin().
    bool stdin_stream = false;
    /// SIGKILL to the whole process group after this long; 0: no limit.
    std::chrono::milliseconds timeout{0};

    /// A program with arguments.
    static Command program(std::vector<std::string> argv);
    /// A shell command line.
    static Command shell_command(std::string line);
};

/// Bytes of the EXEC (or JOB_START) request payload `command` makes: its argv or shell
/// line, env and cwd as guest-init/protocol/messages.hpp encodes them. One frame holds
/// at most proto::kMaxPayload (1 MiB); AgentClient::start refuses a larger one (E2BIG)
/// before sending, so callers that take commands from users check this first. Throws
/// std::invalid_argument for a Command with neither or both of argv and shell.
size_t exec_request_bytes(const Command& command);

/// How a command ended.
struct ExitStatus {
    bool signaled = false;   ///< killed by a signal
    int value = 0;           ///< the exit code (0..255), or the signal number
    bool timed_out = false;  ///< killed because its timeout passed

    /// The shell's convention: the exit code, or 128 + the signal number.
    int shell_code() const { return signaled ? 128 + value : value; }
    bool success() const { return !signaled && value == 0; }
};

/// A finished command.
struct ExecResult {
    ExitStatus status;
    std::string stdout_data;  ///< collected unless a callback took stdout
    std::string stderr_data;  ///< collected unless a callback took stderr
    /// More output came than ClientLimits::max_collected_output: the rest was dropped.
    bool output_truncated = false;
};

/// What the client keeps in memory for one request at most.
struct ClientLimits {
    /// Bytes of stdout (and of stderr) collected into an ExecResult, and of a file
    /// read whole by read_file(path) (beyond: AgentError EFBIG, client-side).
    size_t max_collected_output = 64u << 20;
    /// Entries of one list() (beyond: AgentError E2BIG, client-side).
    size_t max_list_entries = 1'000'000;
    /// The longest a request the agent answers by itself (everything but a
    /// command's or job's end: files, list, stat, mkdir, remove, chmod, sessions,
    /// shutdown, resync, ping, the job requests but a followed attach and wait_job)
    /// waits while the agent makes no progress (no frame received and none of our
    /// bytes taken): then TimeoutError.
    std::chrono::milliseconds reply_timeout{60'000};
    /// How long past a command's own timeout (Command::timeout, a session run's
    /// timeout) the client waits for the agent to report its end (the agent kills
    /// it at the timeout): then TimeoutError. A command without a timeout is waited
    /// for without limit, unless set_deadline() set one.
    std::chrono::milliseconds exit_grace{30'000};
};

/// Where a command's output goes as it arrives (each a chunk of up to 256 KiB). An
/// unset callback leaves that stream to be collected in ExecResult.
struct OutputCallbacks {
    std::function<void(std::string_view)> on_stdout;
    std::function<void(std::string_view)> on_stderr;
};

/// How write_file creates the file.
struct WriteOptions {
    uint32_t mode = 0644;  ///< permission bits (umask not applied)
    bool sync = false;     ///< fsync before the rename
};

/// A request in flight on a connection.
using RequestId = uint32_t;

/// A background job (protocol version 3) as list_jobs() shows it.
struct JobInfo {
    uint64_t id = 0;
    /// As started (a shell job: its one command line); at most proto::kJobListArgs
    /// elements, each cut to proto::kJobListArgBytes bytes.
    std::vector<std::string> argv;
    bool shell = false;
    int64_t started_unix_ms = 0;  ///< the guest's wall clock at its start, ms since the epoch
    bool running = false;
    ExitStatus status;            ///< how it ended, when not running
    uint64_t stdout_bytes = 0;    ///< bytes its stdout produced so far (the next offset)
    uint64_t stderr_bytes = 0;
    bool stdin_open = false;      ///< job_stdin() is taken
};

/// Where an attached job's output goes as it arrives: the stream, the offset of the
/// chunk's first byte in it (bytes the stream produced before), the bytes. A gap
/// between the offset wanted and the first offset given is output the agent no
/// longer keeps (it keeps the last proto::kJobOutputKeep bytes per stream).
using JobOutputCallback = std::function<void(proto::JobStream stream, uint64_t offset, std::string_view data)>;

/// One connection to a guest agent.
class AgentClient {
public:
    /// Connects, does the HELLO exchange, within `timeout`. Throws std::system_error
    /// (connect), std::runtime_error (vsock handshake refused), ConnectionError (HELLO
    /// refused: version mismatch). The default is the VMM's own vsock REQUEST timeout
    /// (VsockOptions::connect_timeout, 30 s): a busy guest that answers late is still
    /// reached; a guest that never answers gets the VMM's RST first.
    static AgentClient connect(const Endpoint& endpoint,
                               std::chrono::milliseconds timeout = std::chrono::seconds(30));

    AgentClient(AgentClient&&) noexcept;
    AgentClient& operator=(AgentClient&&) noexcept;
    ~AgentClient();

    /// The agent's name and version from HELLO_REPLY (printable-only).
    const std::string& agent_software() const { return agent_software_; }
    /// The protocol version HELLO negotiated (proto::kMinProtocolVersion ..
    /// proto::kProtocolVersion; an older agent, e.g. in an old snapshot, speaks less).
    uint32_t protocol_version() const { return protocol_version_; }
    /// Changes the memory bounds and timeouts (for requests started from now on).
    void set_limits(const ClientLimits& limits) { limits_ = limits; }

    /// Every wait of this connection on the agent, in any call from now on, ends by
    /// `deadline` (steady clock) with TimeoutError; nullopt: no common deadline
    /// (each wait keeps its own bound). For callers that must finish by a time
    /// whatever the guest does: a stop within its timeout, a boot within its.
    void set_deadline(std::optional<std::chrono::steady_clock::time_point> deadline) { deadline_ = deadline; }
    /// When waiting for request `id` ends at the latest: the earlier of the common
    /// deadline and the request's own (a command with a timeout: started + timeout
    /// + exit_grace); nullopt if neither. For callers that wait on native_handle()
    /// themselves.
    std::optional<std::chrono::steady_clock::time_point> deadline_for(RequestId id) const;

    /// PING round trip: returns how long it took.
    std::chrono::microseconds ping();

    /// Runs a command to its end: start() + wait().
    ExecResult run(const Command& command, const OutputCallbacks& callbacks = {});
    /// Starts a command (stdin_data is sent right away). The answer comes in wait().
    RequestId start(const Command& command, OutputCallbacks callbacks = {});
    /// Feeds stdin of a command started with stdin_stream.
    void send_stdin(RequestId id, std::string_view data);
    /// Closes that stdin (EOF for the command).
    void close_stdin(RequestId id);
    /// Sends `signal` to the command's process group (a session run: to the shell's
    /// descendants).
    void send_signal(RequestId id, int signal);
    /// Kills the command (SIGKILL); wait() still returns its ExitStatus.
    void cancel(RequestId id);
    /// Waits for a started command (or session run) to end. Throws AgentError if it
    /// could not start (ENOENT: no such program or cwd, EACCES, EPERM...).
    ExecResult wait(RequestId id);
    /// True once the answer of `id` is in (wait() will not block).
    bool done(RequestId id) const;
    /// Handles what has arrived, waiting up to `timeout` for something (0: just what
    /// is there; never past the common deadline, after which it throws TimeoutError).
    /// For callers that start() several commands and poll.
    void poll(std::chrono::milliseconds timeout);
    /// The connection's socket, for callers that wait on it together with other fds
    /// in poll(2) (POLLIN; POLLOUT too while queued_output() > 0), then call poll(0).
    int native_handle() const noexcept { return socket_.get(); }
    /// Bytes queued for the agent that the socket has not taken yet.
    size_t queued_output() const noexcept { return output_.size(); }

    /// Writes a guest file from `source` (called with a buffer and its size; returns
    /// how many bytes it put there, 0 at the end). The file appears whole or not at
    /// all (temp file + rename). Returns the bytes written.
    uint64_t write_file(const std::string& guest_path, const std::function<size_t(char*, size_t)>& source,
                        const WriteOptions& options = {});
    /// Writes `data` to a guest file.
    uint64_t write_file(const std::string& guest_path, std::string_view data, const WriteOptions& options = {});
    /// Copies a host file into the guest (mode: the host file's, unless given).
    uint64_t upload(const std::string& host_path, const std::string& guest_path,
                    std::optional<WriteOptions> options = std::nullopt);
    /// Reads a guest file into `sink` in chunks of up to 256 KiB. Returns its size.
    uint64_t read_file(const std::string& guest_path, const std::function<void(std::string_view)>& sink);
    /// Reads a (small) guest file whole.
    std::string read_file(const std::string& guest_path);
    /// Copies a guest file to a host file (written in place). Returns the bytes.
    uint64_t download(const std::string& guest_path, const std::string& host_path);
    /// The entries of a guest directory (without "." and "..", in no particular order).
    std::vector<proto::DirEntry> list(const std::string& guest_path);
    /// stat (or lstat) of a guest path.
    proto::FileInfo stat(const std::string& guest_path, bool follow_symlinks = true);
    /// mkdir (-p with `parents`).
    void mkdir(const std::string& guest_path, uint32_t mode = 0755, bool parents = true);
    /// rm (-r with `recursive`).
    void remove(const std::string& guest_path, bool recursive = false);
    /// chmod.
    void chmod(const std::string& guest_path, uint32_t mode);

    /// Starts a persistent shell named `name` (cwd "" = "/", env over the base).
    void open_session(const std::string& name, const std::string& cwd = "",
                      const std::vector<std::string>& env = {});
    /// Runs shell text in the session and waits for it (cwd and variables carry
    /// over between runs). A command killed by signal N reports exit code 128+N.
    ExecResult run_in_session(const std::string& name, const std::string& command,
                              std::chrono::milliseconds timeout = {}, const OutputCallbacks& callbacks = {});
    /// Starts shell text in the session; wait() for it.
    RequestId start_in_session(const std::string& name, const std::string& command,
                               std::chrono::milliseconds timeout = {}, OutputCallbacks callbacks = {});
    /// Ends the session (its running command, if any, is killed).
    void close_session(const std::string& name);

    // Background jobs (protocol version 3: an older agent gets AgentError EOPNOTSUPP,
    // client-side, nothing sent). A job belongs to the agent: it runs on when this
    // connection closes, and any connection can reach it by its id.

    /// Starts `command` as a background job; returns its id at once (stdin_data, if
    /// any, is then sent and closed). Throws AgentError as start() does, EAGAIN when
    /// proto::kMaxJobs jobs run.
    uint64_t start_job(const Command& command);
    /// Every job the agent keeps (running or ended), by id.
    std::vector<JobInfo> list_jobs();
    /// Attaches to job `job`'s output from the offsets given (0, 0: from the oldest
    /// byte kept): what is buffered comes at once; with `follow` the live output
    /// follows until the job ends. The chunks go to `on_output`, or without it into
    /// the ExecResult. wait(id) returns once it is over: with `follow`, with the
    /// job's ExitStatus. cancel(id) detaches (wait then throws AgentError ECANCELED;
    /// the job runs on). AgentError ENOENT: no such job.
    RequestId attach_job(uint64_t job, uint64_t stdout_from, uint64_t stderr_from, bool follow,
                         JobOutputCallback on_output = {});
    /// Feeds job `job`'s stdin (a job started with stdin_stream). AgentError EPIPE
    /// (closed, ended, no stdin pipe), EAGAIN (too much waiting: retry later), ENOENT.
    void job_stdin(uint64_t job, std::string_view data);
    /// Closes that stdin (EOF for the job). AgentError EPIPE, ENOENT.
    void job_close_stdin(uint64_t job);
    /// Sends `signal` to the job's process group. AgentError ESRCH (it ended), ENOENT.
    void job_signal(uint64_t job, int signal);
    /// Waits until job `job` ends; returns how. AgentError ENOENT.
    ExitStatus wait_job(uint64_t job);
    /// Drops an ended job and its output. AgentError EBUSY (it runs), ENOENT.
    void forget_job(uint64_t job);

    /// Asks the guest to power off or reboot (AgentError EOPNOTSUPP from a host agent).
    void shutdown(proto::ShutdownRequest::Action action = proto::ShutdownRequest::Action::kPoweroff);

    /// RESYNC: the guest mixes `entropy` into its kernel RNG and reseeds it, steps its
    /// wall clock to `wall_clock_ns` (CLOCK_REALTIME, ns since the epoch) and, unless
    /// `hostname` is empty, takes that hostname. For after a restore or fork, before
    /// any other request (resync_guest() fills in the entropy and the time).
    /// Throws std::invalid_argument, before sending, for entropy outside
    /// proto::kMinResyncEntropyBytes..kMaxResyncEntropyBytes bytes, a negative time or
    /// a hostname that is not proto::valid_hostname(); AgentError with the errno of
    /// the step that failed (its message names it), EOPNOTSUPP from a host agent or
    /// (client-side, nothing sent) from an agent that speaks protocol version 1.
    void resync(std::span<const uint8_t> entropy, int64_t wall_clock_ns, const std::string& hostname);
    /// RESYNC without a hostname, sent without waiting for its answer: the agent
    /// serves one connection's requests in order and a RESYNC at once, so the caller's
    /// next request on this connection runs after the step, and the round trip is not
    /// waited for on its own (what a wake from sleep needs: its clock was frozen).
    /// The answer is read by whatever pumps this connection next; if the agent
    /// refused it, `on_refused` is called from there. Throws as resync() does before
    /// sending.
    void resync_ahead(std::span<const uint8_t> entropy, int64_t wall_clock_ns,
                      std::function<void(const AgentError&)> on_refused);

private:
    struct Pending;
    explicit AgentClient(Fd socket);
    void hello(std::chrono::milliseconds timeout);

    RequestId next_id();
    Pending& add_pending(RequestId id, int kind);
    void send(proto::MessageType type, uint32_t id, std::string_view payload);
    using Clock = std::chrono::steady_clock;
    void pump(int timeout_ms);
    /// One pump() that returns by the earlier of `until` and the common deadline;
    /// throws TimeoutError naming `what` once that has passed.
    void pump_until(std::optional<Clock::time_point> until, const std::string& what);
    /// The end of a wait that allows reply_timeout without progress.
    Clock::time_point idle_deadline() const { return last_progress_ + limits_.reply_timeout; }
    void write_some();
    void read_some();
    void handle(const proto::Frame& frame);
    void wait_done(RequestId id);
    Pending take(RequestId id);
    ExecResult exec_result(Pending& pending);
    void simple_request(proto::MessageType type, const std::string& payload);
    void require_jobs(const char* what) const;
    /// RESYNC's payload; throws as resync() does.
    std::string resync_payload(std::span<const uint8_t> entropy, int64_t wall_clock_ns,
                               const std::string& hostname) const;

    Fd socket_;
    proto::FrameParser parser_;
    proto::FrameOutput output_;
    std::string agent_software_;
    RequestId last_id_ = 0;
    std::unordered_map<RequestId, std::unique_ptr<Pending>> pending_;
    ClientLimits limits_;
    bool hello_done_ = false;
    uint32_t protocol_version_ = 0;
    bool pong_ = false;
    std::optional<Clock::time_point> deadline_;  // set_deadline()
    Clock::time_point last_progress_{};          // a frame received or bytes of ours sent
};

/// The host's bytes for a RESYNC, from getrandom(2).
inline constexpr size_t kResyncEntropyBytes = 64;

/// client.resync() with kResyncEntropyBytes fresh bytes from getrandom(2) (blocking
/// until the host's RNG is initialised, which it is long before a VM runs) and the
/// host's CLOCK_REALTIME now. Throws what resync() throws, and std::system_error if
/// getrandom or clock_gettime fails.
void resync_guest(AgentClient& client, const std::string& hostname = "");

/// client.resync_ahead() with fresh entropy and the host's time, as resync_guest().
void resync_guest_ahead(AgentClient& client, std::function<void(const AgentError&)> on_refused);

}  // namespace nanovm::agent
