// The guest agent protocol's messages: payload layouts and the frames each request
// exchanges. Framing and type codes: frame.hpp. Shared by the agent and the host
// client; nothing here throws (decoders return false on malformed payloads).
//
// Payload encoding: little-endian u8/u32/u64/i32/i64; `str` = u32 byte count + bytes;
// `strs` = u32 count + that many `str`; `raw` = the whole payload as bytes. Decoding
// is strict: every byte must be consumed, flag bits and enums must be known, booleans
// are 0 or 1, and strings that end up in C calls (paths, argv, env, names) must be
// non-empty where stated and free of NUL bytes. A payload that fails to decode is a
// protocol error (the agent sends ERROR id 0 with EBADMSG and closes the connection).
//
// Conversation (client frames left, agent answers right; n = the request id, chosen by
// the client, unique among its requests still running on the connection, never 0):
//
//   HELLO (0)                 -> HELLO_REPLY (0) with the highest version both speak,
//                                or ERROR (0) EPROTONOSUPPORT + close if there is none.
//                                Must be the first frame; anything else first is fatal.
//   PING (0) raw              -> PONG (0) with the same bytes.
//   SHUTDOWN (n)              -> OK then the guest powers off / reboots; ERROR
//                                EOPNOTSUPP when the agent is a host process.
//   RESYNC (n)                -> OK once the guest's kernel RNG has the entropy and was
//     (version 2)                reseeded, its clock is set and (if given) its hostname;
//                                or ERROR with the errno of the first step that failed,
//                                its message naming the step ("resync: RNDADDENTROPY",
//                                "resync: RNDRESEEDCRNG", "resync: clock_settime",
//                                "resync: sethostname"; steps after it are not done).
//                                ERROR EOPNOTSUPP when the agent is a host process (it
//                                never changes its host; the payload is still decoded
//                                first, so a malformed one is still fatal). The VMM sends
//                                it after a restore or fork, before any other request:
//                                commands started after its OK get random bytes no other
//                                copy of the snapshot gets.
//   EXEC (n)                  -> STDOUT*/STDERR* (interleaved as produced) then EXIT;
//                                or ERROR when the command could not start (ENOENT,
//                                EACCES, ENOTDIR for the cwd, EPERM for uid/gid...).
//     while it runs: STDIN* then STDIN_CLOSE (only with stdin_stream), SIGNAL, CANCEL
//     (= SIGKILL to the process group; EXIT still follows).
//   FILE_READ (n)             -> READ_DATA* then DONE (bytes), or ERROR (maybe after data).
//   FILE_WRITE (n), WRITE_DATA*, WRITE_END
//                             -> DONE (bytes) once renamed into place; or ERROR at any
//                                point (the client then stops sending; the temp file is
//                                removed, the destination untouched).
//   LIST (n)                  -> DIR_ENTRIES* then DONE (entry count), or ERROR.
//   STAT (n)                  -> STAT_REPLY or ERROR.
//   MKDIR, REMOVE, CHMOD (n)  -> OK or ERROR.
//   SESSION_OPEN (n)          -> OK, or ERROR (EEXIST: the name is taken; EAGAIN: too many).
//   SESSION_RUN (n)           -> STDOUT*/STDERR* then EXIT, or ERROR (ENOENT: no such
//                                session; EBUSY: it is running a command). SIGNAL and
//                                CANCEL work as for EXEC.
//   SESSION_CLOSE (n)         -> OK or ERROR ENOENT.
//   CANCEL on a FILE_READ, FILE_WRITE or LIST -> ERROR ECANCELED ends it.
//
//
// Background jobs (version 3): commands that belong to the agent, not to a request or
// a connection. They run on when the client that started them goes away, and any
// connection can list them, attach to their output, feed their stdin, signal and
// wait for them. The agent reads their output all the time (a job never blocks on a
// full pipe) into a buffer per stream that keeps the last kJobOutputKeep bytes; every
// byte has an offset (bytes the stream produced before it), so a client attaching
// late knows what it missed. At most kMaxJobs jobs are kept; starting one more drops
// the oldest ended job (its output is gone), or fails with EAGAIN when all run.
//   JOB_START (n) ExecRequest -> JOB_STARTED (n) with the job id (at once), or ERROR as
//                                EXEC's (ENOENT...), EAGAIN (kMaxJobs running).
//   JOB_LIST (n)              -> JOB_LIST_REPLY (n): every job, running or ended.
//   JOB_ATTACH (n)            -> JOB_OUTPUT* from the requested offsets (or the oldest
//                                kept, if later), then with `follow` the live output
//                                and EXIT once the job ended; without, DONE (bytes sent)
//                                at the end of what is buffered. ERROR ENOENT: no such
//                                job (or it was forgotten meanwhile). CANCEL -> ERROR
//                                ECANCELED (the job runs on).
//   JOB_STDIN (n)             -> OK once queued for the job's stdin pipe; ERROR ENOENT,
//                                EPIPE (no stdin pipe, closed, or the job ended), EAGAIN
//                                (more than kStdinBacklogLimit bytes wait already).
//   JOB_STDIN_CLOSE (n)       -> OK; ERROR ENOENT, EPIPE.
//   JOB_SIGNAL (n)            -> OK (sent to the job's process group); ERROR ENOENT,
//                                ESRCH (it ended).
//   JOB_WAIT (n)              -> EXIT (n) once the job ended (at once if it has); ERROR
//                                ENOENT. CANCEL -> ERROR ECANCELED.
//   JOB_FORGET (n)            -> OK: the ended job and its output are dropped; ERROR
//                                ENOENT, EBUSY (it runs).
//
// STDIN, STDIN_CLOSE, SIGNAL, CANCEL, WRITE_DATA and WRITE_END for an id the agent does
// not know (any more) are ignored: they race with the end of a request. A request
// frame (EXEC, FILE_READ...) whose id is 0 or still in use is a protocol error. A
// request that cannot be taken now (too many at once) gets ERROR EAGAIN.
//
// Versions (frame.hpp, kProtocolVersion): a frame of a type newer than the version
// the connection negotiated is a protocol error (EPROTO), as an unknown type is.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace nanovm::agent::proto {

/// The longest path accepted, bytes (PATH_MAX less the NUL).
inline constexpr size_t kMaxPathBytes = 4095;
/// The longest session name, bytes.
inline constexpr size_t kMaxSessionNameBytes = 128;

/// RESYNC entropy, bytes: at least 32 (256 bits, what Linux 6.1 needs to call its
/// CRNG ready: POOL_READY_BITS in drivers/char/random.c), at most 512 (4096 bits, the
/// input pool before Linux 5.18; since then the pool is a 256-bit hash, and more
/// bytes only cost time).
inline constexpr size_t kMinResyncEntropyBytes = 32;
inline constexpr size_t kMaxResyncEntropyBytes = 512;
/// The longest hostname, bytes (HOST_NAME_MAX on Linux, gethostname(2)).
inline constexpr size_t kMaxHostnameBytes = 64;

/// HELLO: the versions the client speaks, [min_version, max_version].
/// Payload: u32 min_version, u32 max_version, str software (free text, may be empty).
struct Hello {
    uint32_t min_version = 1;
    uint32_t max_version = 1;
    std::string software;
};

/// HELLO_REPLY: the version both will speak and the agent's limits.
/// Payload: u32 version, u32 max_payload, str software.
struct HelloReply {
    uint32_t version = 0;
    uint32_t max_payload = 0;
    std::string software;
};

/// EXEC: one command.
/// Payload: u8 flags (bit 0 shell, 1 clear_env, 2 stdin_stream, 3 uid set, 4 gid set),
/// strs argv, strs env, str cwd, u32 uid, u32 gid, u32 timeout_ms.
struct ExecRequest {
    /// Program and arguments (non-empty; argv[0] without '/' is looked up on the
    /// command's PATH). With `shell`: exactly one element, run as `/bin/sh -c <it>`.
    std::vector<std::string> argv;
    bool shell = false;
    /// "KEY=VALUE" entries (KEY non-empty), set over the base environment (HOME,
    /// PATH, TERM, SHELL, USER, LOGNAME) or over nothing with `clear_env`.
    std::vector<std::string> env;
    bool clear_env = false;
    /// Working directory; "" means "/".
    std::string cwd;
    /// User and group ids to switch to (supplementary groups are dropped); unset:
    /// the agent's own (root in a guest).
    std::optional<uint32_t> uid;
    std::optional<uint32_t> gid;
    /// True: stdin is a pipe fed by STDIN frames until STDIN_CLOSE. False: /dev/null.
    bool stdin_stream = false;
    /// After this many milliseconds the whole process group gets SIGKILL and EXIT
    /// says timed_out. 0: no limit.
    uint32_t timeout_ms = 0;
};

/// SIGNAL: a signal for a command's process group. Payload: i32 signal (1..64).
struct SignalRequest {
    int32_t signal = 0;
};

/// EXIT: how a command ended. Payload: u8 signaled, u8 timed_out, i32 value.
struct ExitReport {
    bool signaled = false;   ///< killed by a signal (value = its number)
    bool timed_out = false;  ///< the agent killed it at its timeout
    int32_t value = 0;       ///< exit code 0..255, or the signal number
};

/// ERROR: why a request failed. Payload: str errno_name, str message.
struct ErrorReport {
    std::string errno_name;  ///< "ENOENT", "EACCES"... (EPROTO etc. for protocol errors)
    std::string message;     ///< what was being done, e.g. "open /etc/x"
};

/// The type of a file, as STAT_REPLY and DIR_ENTRIES report it.
enum class FileType : uint8_t {
    kRegular = 1,
    kDirectory = 2,
    kSymlink = 3,
    kFifo = 4,
    kSocket = 5,
    kCharDevice = 6,
    kBlockDevice = 7,
};

/// stat(2) figures. Payload (STAT_REPLY): u8 type, u32 mode, u32 uid, u32 gid,
/// u64 size, i64 mtime_ns.
struct FileInfo {
    FileType type = FileType::kRegular;
    uint32_t mode = 0;  ///< permission bits, st_mode & 07777
    uint32_t uid = 0;
    uint32_t gid = 0;
    uint64_t size = 0;      ///< bytes
    int64_t mtime_ns = 0;   ///< modification time, ns since the epoch
};

/// One directory entry (lstat of it: symlinks are reported as symlinks).
struct DirEntry {
    std::string name;  ///< the entry's name, never "." or ".."
    FileInfo info;
};

/// FILE_READ and LIST. Payload: str path (absolute or relative to "/").
struct PathRequest {
    std::string path;
};

/// FILE_WRITE. Payload: u32 mode, u8 sync, str path.
struct FileWriteRequest {
    std::string path;
    uint32_t mode = 0644;  ///< permission bits of the new file (umask not applied)
    bool sync = false;     ///< fsync before the rename
};

/// STAT. Payload: u8 follow_symlinks, str path.
struct StatRequest {
    std::string path;
    bool follow_symlinks = true;
};

/// MKDIR. Payload: u32 mode, u8 parents, str path.
struct MkdirRequest {
    std::string path;
    uint32_t mode = 0755;
    bool parents = true;  ///< like mkdir -p: missing parents made, an existing dir is fine
};

/// REMOVE. Payload: u8 recursive, str path.
struct RemoveRequest {
    std::string path;
    bool recursive = false;  ///< like rm -r (symlinks are removed, never followed)
};

/// CHMOD. Payload: u32 mode, str path.
struct ChmodRequest {
    std::string path;
    uint32_t mode = 0;
};

/// SESSION_OPEN. Payload: str name, str cwd, strs env.
struct SessionOpenRequest {
    std::string name;  ///< 1..kMaxSessionNameBytes bytes
    std::string cwd;   ///< the shell's first working directory; "" means "/"
    std::vector<std::string> env;  ///< "KEY=VALUE" over the base environment
};

/// SESSION_RUN. Payload: str name, str command, u32 timeout_ms.
struct SessionRunRequest {
    std::string name;
    std::string command;      ///< shell text, evaluated by the session's shell
    uint32_t timeout_ms = 0;  ///< 0: none
};

/// SESSION_CLOSE. Payload: str name.
struct SessionCloseRequest {
    std::string name;
};

/// SHUTDOWN. Payload: u8 action (0 power off, 1 reboot).
struct ShutdownRequest {
    enum class Action : uint8_t { kPoweroff = 0, kReboot = 1 };
    Action action = Action::kPoweroff;
};

/// RESYNC (protocol version 2): the fixups after a snapshot restore or a fork, done
/// in this order: RNDADDENTROPY (the bytes, credited 8 bits per byte) then
/// RNDRESEEDCRNG on /dev/urandom (random(4), include/uapi/linux/random.h),
/// clock_settime(CLOCK_REALTIME), sethostname unless `hostname` is empty.
/// Payload: str entropy, i64 wall_clock_ns, str hostname.
struct ResyncRequest {
    /// Fresh host entropy, kMinResyncEntropyBytes..kMaxResyncEntropyBytes raw bytes.
    std::string entropy;
    /// The host's CLOCK_REALTIME when sent, ns since the epoch; not negative.
    int64_t wall_clock_ns = 0;
    /// The new kernel hostname (valid_hostname), or "" to keep the current one.
    std::string hostname;
};

/// True if `name` is 1..kMaxHostnameBytes bytes of [A-Za-z0-9.-] (what RESYNC takes;
/// stricter than the kernel, which takes any bytes).
bool valid_hostname(std::string_view name);

/// DONE: the end of a read, write or list. Payload: u64 count.
struct DoneReport {
    uint64_t count = 0;  ///< bytes read or written, or entries listed
};

/// Background jobs kept at once (running and ended).
inline constexpr size_t kMaxJobs = 16;
/// Output kept per job and stream, bytes (the last this many).
inline constexpr size_t kJobOutputKeep = 1u << 20;
/// JOB_LIST_REPLY shows at most this many argv elements per job, each cut to
/// kJobListArgBytes bytes (so that kMaxJobs entries fit one frame).
inline constexpr size_t kJobListArgs = 64;
inline constexpr size_t kJobListArgBytes = 512;

/// JOB_STARTED. Payload: u64 job.
/// JOB_STDIN_CLOSE, JOB_WAIT, JOB_FORGET. Payload: u64 job.
struct JobRef {
    uint64_t job = 0;  ///< the id JOB_STARTED gave (never 0)
};

/// JOB_LIST. Payload: empty.
struct JobListRequest {};

/// JOB_STDIN. Payload: u64 job, then the bytes (raw, the rest of the payload).
struct JobStdin {
    uint64_t job = 0;
    std::string data;
};

/// JOB_SIGNAL. Payload: u64 job, i32 signal (1..64).
struct JobSignal {
    uint64_t job = 0;
    int32_t signal = 0;
};

/// JOB_ATTACH. Payload: u64 job, u64 stdout_from, u64 stderr_from, u8 follow.
struct JobAttach {
    uint64_t job = 0;
    uint64_t stdout_from = 0;  ///< the first stdout offset wanted (0: from the start)
    uint64_t stderr_from = 0;
    bool follow = false;  ///< then the live output, and EXIT when the job ends
};

/// A job output stream.
enum class JobStream : uint8_t { kStdout = 1, kStderr = 2 };

/// JOB_OUTPUT. Payload: u8 stream, u64 offset, then the bytes (raw, the rest).
struct JobOutput {
    JobStream stream = JobStream::kStdout;
    uint64_t offset = 0;  ///< of the first byte: how many the stream produced before it
    std::string data;
};

/// One background job as JOB_LIST_REPLY shows it.
struct JobInfo {
    uint64_t job = 0;
    std::vector<std::string> argv;  ///< as started (a shell job: its one command line)
    bool shell = false;
    int64_t started_unix_ms = 0;    ///< the guest's wall clock at the start, ms since the epoch
    bool running = false;
    ExitReport exit;                ///< when not running
    uint64_t stdout_bytes = 0;      ///< bytes the stream produced (the next offset)
    uint64_t stderr_bytes = 0;
    bool stdin_open = false;        ///< JOB_STDIN is taken
};

/// JOB_LIST_REPLY. Payload: u32 count, then per job: u64 job, strs argv, u8 shell,
/// i64 started_unix_ms, u8 running, u8 signaled, u8 timed_out, i32 value, u64
/// stdout_bytes, u64 stderr_bytes, u8 stdin_open.
using JobList = std::vector<JobInfo>;

/// DIR_ENTRIES. Payload: u32 count, then per entry: str name + the FileInfo layout.
using DirEntries = std::vector<DirEntry>;

/// The encoded size of one directory entry (to cut DIR_ENTRIES batches below
/// kMaxPayload).
size_t encoded_size(const DirEntry& entry);

// Encoders: the payload of the message. Decoders: true if `payload` is exactly one
// well-formed message of that kind (out is then filled; else it is unspecified).
std::string encode(const Hello& m);
std::string encode(const HelloReply& m);
std::string encode(const ExecRequest& m);
std::string encode(const SignalRequest& m);
std::string encode(const ExitReport& m);
std::string encode(const ErrorReport& m);
std::string encode(const FileInfo& m);
std::string encode(const DirEntries& m);
std::string encode(const PathRequest& m);
std::string encode(const FileWriteRequest& m);
std::string encode(const StatRequest& m);
std::string encode(const MkdirRequest& m);
std::string encode(const RemoveRequest& m);
std::string encode(const ChmodRequest& m);
std::string encode(const SessionOpenRequest& m);
std::string encode(const SessionRunRequest& m);
std::string encode(const SessionCloseRequest& m);
std::string encode(const ShutdownRequest& m);
std::string encode(const ResyncRequest& m);
std::string encode(const DoneReport& m);
std::string encode(const JobRef& m);
std::string encode(const JobListRequest& m);
std::string encode(const JobStdin& m);
std::string encode(const JobSignal& m);
std::string encode(const JobAttach& m);
std::string encode(const JobOutput& m);
std::string encode(const JobList& m);

bool decode(std::string_view payload, Hello& out);
bool decode(std::string_view payload, HelloReply& out);
bool decode(std::string_view payload, ExecRequest& out);
bool decode(std::string_view payload, SignalRequest& out);
bool decode(std::string_view payload, ExitReport& out);
bool decode(std::string_view payload, ErrorReport& out);
bool decode(std::string_view payload, FileInfo& out);
bool decode(std::string_view payload, DirEntries& out);
bool decode(std::string_view payload, PathRequest& out);
bool decode(std::string_view payload, FileWriteRequest& out);
bool decode(std::string_view payload, StatRequest& out);
bool decode(std::string_view payload, MkdirRequest& out);
bool decode(std::string_view payload, RemoveRequest& out);
bool decode(std::string_view payload, ChmodRequest& out);
bool decode(std::string_view payload, SessionOpenRequest& out);
bool decode(std::string_view payload, SessionRunRequest& out);
bool decode(std::string_view payload, SessionCloseRequest& out);
bool decode(std::string_view payload, ShutdownRequest& out);
bool decode(std::string_view payload, ResyncRequest& out);
bool decode(std::string_view payload, DoneReport& out);
bool decode(std::string_view payload, JobRef& out);
bool decode(std::string_view payload, JobListRequest& out);
bool decode(std::string_view payload, JobStdin& out);
bool decode(std::string_view payload, JobSignal& out);
bool decode(std::string_view payload, JobAttach& out);
bool decode(std::string_view payload, JobOutput& out);
bool decode(std::string_view payload, JobList& out);

}  // namespace nanovm::agent::proto
