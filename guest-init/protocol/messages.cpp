// Payload encoders and strict decoders (see messages.hpp).
#include "guest-init/protocol/messages.hpp"

#include "guest-init/protocol/frame.hpp"

namespace nanovm::agent::proto {
namespace {

class Writer {
public:
    void u8(uint8_t v) { out_.push_back(static_cast<char>(v)); }
    void u32(uint32_t v) {
        for (int i = 0; i < 4; ++i) out_.push_back(static_cast<char>(v >> (8 * i)));
    }
    void u64(uint64_t v) {
        for (int i = 0; i < 8; ++i) out_.push_back(static_cast<char>(v >> (8 * i)));
    }
    void str(std::string_view s) {
        u32(static_cast<uint32_t>(s.size()));
        out_.append(s);
    }
    void strs(const std::vector<std::string>& list) {
        u32(static_cast<uint32_t>(list.size()));
        for (const std::string& s : list) str(s);
    }
    void info(const FileInfo& i) {
        u8(static_cast<uint8_t>(i.type));
        u32(i.mode);
        u32(i.uid);
        u32(i.gid);
        u64(i.size);
        u64(static_cast<uint64_t>(i.mtime_ns));
    }
    std::string take() { return std::move(out_); }

private:
    std::string out_;
};

// Reads fields in order; any failure (truncation, bad value) sticks, so a decoder
// reads everything and checks ok() once, after done().
class Reader {
public:
    explicit Reader(std::string_view in) : in_(in) {}

    uint8_t u8() {
        if (!need(1)) return 0;
        return static_cast<uint8_t>(in_[pos_++]);
    }
    uint32_t u32() {
        if (!need(4)) return 0;
        uint32_t v = 0;
        for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(static_cast<uint8_t>(in_[pos_++])) << (8 * i);
        return v;
    }
    uint64_t u64() {
        if (!need(8)) return 0;
        uint64_t v = 0;
        for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(static_cast<uint8_t>(in_[pos_++])) << (8 * i);
        return v;
    }
    bool flag() {
        const uint8_t v = u8();
        if (v > 1) ok_ = false;
        return v == 1;
    }
    std::string str() {
        const uint32_t n = u32();
        if (!need(n)) return {};
        std::string s(in_.substr(pos_, n));
        pos_ += n;
        return s;
    }
    // A string for C calls: no NUL, at most `max` bytes, non-empty unless allowed.
    std::string cstr(size_t max, bool allow_empty) {
        std::string s = str();
        if (s.size() > max || (!allow_empty && s.empty()) ||
            s.find('\0') != std::string::npos)
            ok_ = false;
        return s;
    }
    std::vector<std::string> cstrs(bool env_entries) {
        const uint32_t n = u32();
        // Each string takes at least 4 bytes: a count beyond that is a lie, and
        // checking first keeps a hostile count from reserving memory.
        if (!ok_ || n > (in_.size() - pos_) / 4) {
            ok_ = false;
            return {};
        }
        std::vector<std::string> list;
        list.reserve(n);
        for (uint32_t i = 0; i < n && ok_; ++i) {
            std::string s = cstr(kMaxPayload, true);
            if (env_entries) {
                const size_t eq = s.find('=');
                if (eq == std::string::npos || eq == 0) ok_ = false;
            }
            list.push_back(std::move(s));
        }
        return list;
    }
    FileInfo info() {
        FileInfo i;
        const uint8_t type = u8();
        if (type < static_cast<uint8_t>(FileType::kRegular) ||
            type > static_cast<uint8_t>(FileType::kBlockDevice))
            ok_ = false;
        i.type = static_cast<FileType>(type);
        i.mode = mode();
        i.uid = u32();
        i.gid = u32();
        i.size = u64();
        i.mtime_ns = static_cast<int64_t>(u64());
        return i;
    }
    uint32_t mode() {
        const uint32_t m = u32();
        if (m > 07777) ok_ = false;
        return m;
    }
    std::string path() { return cstr(kMaxPathBytes, false); }
    std::string session_name() { return cstr(kMaxSessionNameBytes, false); }
    void fail() { ok_ = false; }
    /// The bytes not read yet (a raw tail), all of them.
    std::string rest() {
        if (!ok_) return {};
        std::string s(in_.substr(pos_));
        pos_ = in_.size();
        return s;
    }

    /// True if every read succeeded and every byte was read.
    bool done() const { return ok_ && pos_ == in_.size(); }

private:
    bool need(size_t n) {
        if (!ok_ || in_.size() - pos_ < n) {
            ok_ = false;
            return false;
        }
        return true;
    }
    std::string_view in_;
    size_t pos_ = 0;
    bool ok_ = true;
};

constexpr uint8_t kExecShell = 1u << 0;
constexpr uint8_t kExecClearEnv = 1u << 1;
constexpr uint8_t kExecStdinStream = 1u << 2;
constexpr uint8_t kExecUid = 1u << 3;
constexpr uint8_t kExecGid = 1u << 4;
constexpr uint8_t kExecKnownFlags = kExecShell | kExecClearEnv | kExecStdinStream | kExecUid | kExecGid;

}  // namespace

size_t encoded_size(const DirEntry& entry) {
    return 4 + entry.name.size() + 1 + 4 + 4 + 4 + 8 + 8;
}

std::string encode(const Hello& m) {
    Writer w;
    w.u32(m.min_version);
    w.u32(m.max_version);
    w.str(m.software);
    return w.take();
}

bool decode(std::string_view payload, Hello& out) {
    Reader r(payload);
    out.min_version = r.u32();
    out.max_version = r.u32();
    out.software = r.str();
    if (out.min_version > out.max_version) r.fail();
    return r.done();
}

std::string encode(const HelloReply& m) {
    Writer w;
    w.u32(m.version);
    w.u32(m.max_payload);
    w.str(m.software);
    return w.take();
}

bool decode(std::string_view payload, HelloReply& out) {
    Reader r(payload);
    out.version = r.u32();
    out.max_payload = r.u32();
    out.software = r.str();
    return r.done();
}

std::string encode(const ExecRequest& m) {
    Writer w;
    uint8_t flags = 0;
    if (m.shell) flags |= kExecShell;
    if (m.clear_env) flags |= kExecClearEnv;
    if (m.stdin_stream) flags |= kExecStdinStream;
    if (m.uid) flags |= kExecUid;
    if (m.gid) flags |= kExecGid;
    w.u8(flags);
    w.strs(m.argv);
    w.strs(m.env);
    w.str(m.cwd);
    w.u32(m.uid.value_or(0));
    w.u32(m.gid.value_or(0));
    w.u32(m.timeout_ms);
    return w.take();
}

bool decode(std::string_view payload, ExecRequest& out) {
    Reader r(payload);
    const uint8_t flags = r.u8();
    if ((flags & ~kExecKnownFlags) != 0) r.fail();
    out.shell = (flags & kExecShell) != 0;
    out.clear_env = (flags & kExecClearEnv) != 0;
    out.stdin_stream = (flags & kExecStdinStream) != 0;
    out.argv = r.cstrs(false);
    out.env = r.cstrs(true);
    out.cwd = r.cstr(kMaxPathBytes, true);
    const uint32_t uid = r.u32();
    const uint32_t gid = r.u32();
    out.uid = (flags & kExecUid) ? std::optional<uint32_t>(uid) : std::nullopt;
    out.gid = (flags & kExecGid) ? std::optional<uint32_t>(gid) : std::nullopt;
    out.timeout_ms = r.u32();
    if (out.argv.empty() || (out.shell && out.argv.size() != 1) || out.argv[0].empty()) r.fail();
    return r.done();
}

std::string encode(const SignalRequest& m) {
    Writer w;
    w.u32(static_cast<uint32_t>(m.signal));
    return w.take();
}

bool decode(std::string_view payload, SignalRequest& out) {
    Reader r(payload);
    out.signal = static_cast<int32_t>(r.u32());
    if (out.signal < 1 || out.signal > 64) r.fail();
    return r.done();
}

std::string encode(const ExitReport& m) {
    Writer w;
    w.u8(m.signaled ? 1 : 0);
    w.u8(m.timed_out ? 1 : 0);
    w.u32(static_cast<uint32_t>(m.value));
    return w.take();
}

bool decode(std::string_view payload, ExitReport& out) {
    Reader r(payload);
    out.signaled = r.flag();
    out.timed_out = r.flag();
    out.value = static_cast<int32_t>(r.u32());
    if (out.value < 0 || out.value > (out.signaled ? 64 : 255)) r.fail();
    return r.done();
}

std::string encode(const ErrorReport& m) {
    Writer w;
    w.str(m.errno_name);
    w.str(m.message);
    return w.take();
}

bool decode(std::string_view payload, ErrorReport& out) {
    Reader r(payload);
    out.errno_name = r.str();
    out.message = r.str();
    return r.done();
}

std::string encode(const FileInfo& m) {
    Writer w;
    w.info(m);
    return w.take();
}

bool decode(std::string_view payload, FileInfo& out) {
    Reader r(payload);
    out = r.info();
    return r.done();
}

std::string encode(const DirEntries& m) {
    Writer w;
    w.u32(static_cast<uint32_t>(m.size()));
    for (const DirEntry& e : m) {
        w.str(e.name);
        w.info(e.info);
    }
    return w.take();
}

bool decode(std::string_view payload, DirEntries& out) {
    Reader r(payload);
    const uint32_t n = r.u32();
    out.clear();
    // An entry takes at least 33 bytes (see encoded_size): bound the count first.
    if (n > payload.size() / 33) return false;
    out.reserve(n);
    for (uint32_t i = 0; i < n; ++i) {
        DirEntry e;
        e.name = r.cstr(255, false);
        if (e.name == "." || e.name == ".." || e.name.find('/') != std::string::npos) r.fail();
        e.info = r.info();
        out.push_back(std::move(e));
    }
    return r.done();
}

std::string encode(const PathRequest& m) {
    Writer w;
    w.str(m.path);
    return w.take();
}

bool decode(std::string_view payload, PathRequest& out) {
    Reader r(payload);
    out.path = r.path();
    return r.done();
}

std::string encode(const FileWriteRequest& m) {
    Writer w;
    w.u32(m.mode);
    w.u8(m.sync ? 1 : 0);
    w.str(m.path);
    return w.take();
}

bool decode(std::string_view payload, FileWriteRequest& out) {
    Reader r(payload);
    out.mode = r.mode();
    out.sync = r.flag();
    out.path = r.path();
    return r.done();
}

std::string encode(const StatRequest& m) {
    Writer w;
    w.u8(m.follow_symlinks ? 1 : 0);
    w.str(m.path);
    return w.take();
}

bool decode(std::string_view payload, StatRequest& out) {
    Reader r(payload);
    out.follow_symlinks = r.flag();
    out.path = r.path();
    return r.done();
}

std::string encode(const MkdirRequest& m) {
    Writer w;
    w.u32(m.mode);
    w.u8(m.parents ? 1 : 0);
    w.str(m.path);
    return w.take();
}

bool decode(std::string_view payload, MkdirRequest& out) {
    Reader r(payload);
    out.mode = r.mode();
    out.parents = r.flag();
    out.path = r.path();
    return r.done();
}

std::string encode(const RemoveRequest& m) {
    Writer w;
    w.u8(m.recursive ? 1 : 0);
    w.str(m.path);
    return w.take();
}

bool decode(std::string_view payload, RemoveRequest& out) {
    Reader r(payload);
    out.recursive = r.flag();
    out.path = r.path();
    return r.done();
}

std::string encode(const ChmodRequest& m) {
    Writer w;
    w.u32(m.mode);
    w.str(m.path);
    return w.take();
}

bool decode(std::string_view payload, ChmodRequest& out) {
    Reader r(payload);
    out.mode = r.mode();
    out.path = r.path();
    return r.done();
}

std::string encode(const SessionOpenRequest& m) {
    Writer w;
    w.str(m.name);
    w.str(m.cwd);
    w.strs(m.env);
    return w.take();
}

bool decode(std::string_view payload, SessionOpenRequest& out) {
    Reader r(payload);
    out.name = r.session_name();
    out.cwd = r.cstr(kMaxPathBytes, true);
    out.env = r.cstrs(true);
    return r.done();
}

std::string encode(const SessionRunRequest& m) {
    Writer w;
    w.str(m.name);
    w.str(m.command);
    w.u32(m.timeout_ms);
    return w.take();
}

bool decode(std::string_view payload, SessionRunRequest& out) {
    Reader r(payload);
    out.name = r.session_name();
    out.command = r.cstr(kMaxPayload, true);
    out.timeout_ms = r.u32();
    return r.done();
}

std::string encode(const SessionCloseRequest& m) {
    Writer w;
    w.str(m.name);
    return w.take();
}

bool decode(std::string_view payload, SessionCloseRequest& out) {
    Reader r(payload);
    out.name = r.session_name();
    return r.done();
}

std::string encode(const ShutdownRequest& m) {
    Writer w;
    w.u8(static_cast<uint8_t>(m.action));
    return w.take();
}

bool decode(std::string_view payload, ShutdownRequest& out) {
    Reader r(payload);
    const uint8_t a = r.u8();
    if (a > 1) r.fail();
    out.action = static_cast<ShutdownRequest::Action>(a);
    return r.done();
}

bool valid_hostname(std::string_view name) {
    if (name.empty() || name.size() > kMaxHostnameBytes) return false;
    for (const char c : name) {
        const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                        c == '-';
        if (!ok) return false;
    }
    return true;
}

std::string encode(const ResyncRequest& m) {
    Writer w;
    w.str(m.entropy);
    w.u64(static_cast<uint64_t>(m.wall_clock_ns));
    w.str(m.hostname);
    return w.take();
}

bool decode(std::string_view payload, ResyncRequest& out) {
    Reader r(payload);
    out.entropy = r.str();
    out.wall_clock_ns = static_cast<int64_t>(r.u64());
    out.hostname = r.str();
    if (out.entropy.size() < kMinResyncEntropyBytes || out.entropy.size() > kMaxResyncEntropyBytes) r.fail();
    if (out.wall_clock_ns < 0) r.fail();
    if (!out.hostname.empty() && !valid_hostname(out.hostname)) r.fail();
    return r.done();
}

std::string encode(const DoneReport& m) {
    Writer w;
    w.u64(m.count);
    return w.take();
}

bool decode(std::string_view payload, DoneReport& out) {
    Reader r(payload);
    out.count = r.u64();
    return r.done();
}

std::string encode(const JobRef& m) {
    Writer w;
    w.u64(m.job);
    return w.take();
}

bool decode(std::string_view payload, JobRef& out) {
    Reader r(payload);
    out.job = r.u64();
    if (out.job == 0) r.fail();
    return r.done();
}

std::string encode(const JobListRequest&) { return {}; }

bool decode(std::string_view payload, JobListRequest&) { return payload.empty(); }

std::string encode(const JobStdin& m) {
    Writer w;
    w.u64(m.job);
    std::string out = w.take();
    out.append(m.data);
    return out;
}

bool decode(std::string_view payload, JobStdin& out) {
    Reader r(payload);
    out.job = r.u64();
    out.data = r.rest();
    if (out.job == 0) r.fail();
    return r.done();
}

std::string encode(const JobSignal& m) {
    Writer w;
    w.u64(m.job);
    w.u32(static_cast<uint32_t>(m.signal));
    return w.take();
}

bool decode(std::string_view payload, JobSignal& out) {
    Reader r(payload);
    out.job = r.u64();
    out.signal = static_cast<int32_t>(r.u32());
    if (out.job == 0 || out.signal < 1 || out.signal > 64) r.fail();
    return r.done();
}

std::string encode(const JobAttach& m) {
    Writer w;
    w.u64(m.job);
    w.u64(m.stdout_from);
    w.u64(m.stderr_from);
    w.u8(m.follow ? 1 : 0);
    return w.take();
}

bool decode(std::string_view payload, JobAttach& out) {
    Reader r(payload);
    out.job = r.u64();
    out.stdout_from = r.u64();
    out.stderr_from = r.u64();
    out.follow = r.flag();
    if (out.job == 0) r.fail();
    return r.done();
}

std::string encode(const JobOutput& m) {
    Writer w;
    w.u8(static_cast<uint8_t>(m.stream));
    w.u64(m.offset);
    std::string out = w.take();
    out.append(m.data);
    return out;
}

bool decode(std::string_view payload, JobOutput& out) {
    Reader r(payload);
    const uint8_t stream = r.u8();
    if (stream != static_cast<uint8_t>(JobStream::kStdout) && stream != static_cast<uint8_t>(JobStream::kStderr))
        r.fail();
    out.stream = static_cast<JobStream>(stream);
    out.offset = r.u64();
    out.data = r.rest();
    return r.done();
}

std::string encode(const JobList& m) {
    Writer w;
    w.u32(static_cast<uint32_t>(m.size()));
    for (const JobInfo& j : m) {
        w.u64(j.job);
        w.strs(j.argv);
        w.u8(j.shell ? 1 : 0);
        w.u64(static_cast<uint64_t>(j.started_unix_ms));
        w.u8(j.running ? 1 : 0);
        w.u8(j.exit.signaled ? 1 : 0);
        w.u8(j.exit.timed_out ? 1 : 0);
        w.u32(static_cast<uint32_t>(j.exit.value));
        w.u64(j.stdout_bytes);
        w.u64(j.stderr_bytes);
        w.u8(j.stdin_open ? 1 : 0);
    }
    return w.take();
}

bool decode(std::string_view payload, JobList& out) {
    Reader r(payload);
    const uint32_t n = r.u32();
    // Each entry takes at least 52 bytes: a larger count is a lie (no reserve for it).
    if (n > payload.size() / 52) r.fail();
    out.clear();
    for (uint32_t i = 0; i < n; ++i) {
        JobInfo j;
        j.job = r.u64();
        j.argv = r.cstrs(false);
        j.shell = r.flag();
        j.started_unix_ms = static_cast<int64_t>(r.u64());
        j.running = r.flag();
        j.exit.signaled = r.flag();
        j.exit.timed_out = r.flag();
        j.exit.value = static_cast<int32_t>(r.u32());
        if (j.exit.value < 0 || j.exit.value > 255) r.fail();
        j.stdout_bytes = r.u64();
        j.stderr_bytes = r.u64();
        j.stdin_open = r.flag();
        out.push_back(std::move(j));
    }
    return r.done();
}

}  // namespace nanovm::agent::proto
