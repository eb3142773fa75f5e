// JSON answers and query checks (resource_json.hpp).
#include "api/daemon/routes/resource_json.hpp"

#include <ctime>

#include <fmt/format.h>

#include "api/daemon/api_error.hpp"
#include "vmm/text_encoding.hpp"

namespace nanovm::daemon {

using nlohmann::json;

std::string rfc3339(int64_t unix_ms) {
    const time_t secs = static_cast<time_t>(unix_ms / 1000);
    struct tm tm {};
    ::gmtime_r(&secs, &tm);
    return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                       tm.tm_hour, tm.tm_min, tm.tm_sec, unix_ms % 1000);
}

namespace {

json text_or_null(const std::string& s) { return s.empty() ? json(nullptr) : json(s); }

const char* type_name(agent::proto::FileType t) {
    switch (t) {
        case agent::proto::FileType::kRegular: return "file";
        case agent::proto::FileType::kDirectory: return "directory";
        case agent::proto::FileType::kSymlink: return "symlink";
        case agent::proto::FileType::kFifo: return "fifo";
        case agent::proto::FileType::kSocket: return "socket";
        case agent::proto::FileType::kCharDevice: return "char_device";
        case agent::proto::FileType::kBlockDevice: return "block_device";
    }
    return "other";
}

}  // namespace

json sandbox_json(const store::SandboxRecord& r, const std::optional<ArchiveProgress>& progress) {
    return json{{"id", r.id},
                {"state", r.state},
                {"error", text_or_null(r.error)},
                {"cpus", r.cpus},
                {"memory_mb", r.memory_mb},
                {"disable_internet", r.disable_internet},
                {"image", text_or_null(r.image)},
                {"template", text_or_null(r.template_name)},
                {"snapshot_id", text_or_null(r.snapshot_id)},
                {"parent_id", text_or_null(r.parent_id)},
                {"metadata", r.labels},
                {"timeout_s", r.timeout_s ? json(*r.timeout_s) : json(nullptr)},
                {"end_at", r.end_at_ms ? json(rfc3339(*r.end_at_ms)) : json(nullptr)},
                {"autosleep_s", r.autosleep_s},
                {"on_timeout", r.on_timeout},
                {"created_at", rfc3339(r.created_ms)},
                {"image_digest", text_or_null(r.image_digest)},
                {"progress", progress ? json{{"phase", progress->phase},
                                             {"bytes_done", progress->bytes_done},
                                             {"bytes_total", progress->bytes_total}}
                                      : json(nullptr)}};
}

json snapshot_json(SandboxManager& manager, const store::SnapshotRecord& s) {
    return json{{"id", s.id},
                {"sandbox_id", text_or_null(s.sandbox_id)},  // null for an imported snapshot
                {"created_at", rfc3339(s.created_ms)},
                {"state", s.state},
                {"durable", s.durable},
                {"size_bytes", manager.snapshot_size(s)},
                {"cpus", s.cpus},
                {"memory_mb", s.memory_mb},
                {"disable_internet", s.disable_internet},
                {"image_digest", text_or_null(s.image_digest)},
                {"error", text_or_null(s.error)}};
}

json file_info_json(const std::string& path, const std::string& name, const agent::proto::FileInfo& info) {
    return json{{"path", path},
                {"name", name},
                {"type", type_name(info.type)},
                {"size", info.size},
                {"mode", info.mode},
                {"mtime", rfc3339(info.mtime_ns / 1000000)}};
}

json exec_result_json(const ExecOutcome& o, bool base64) {
    const agent::ExitStatus& st = o.result.status;
    const auto text = [base64](std::string_view bytes) { return base64 ? base64_encode(bytes) : utf8_sanitize(bytes); };
    json j{{"stdout", text(o.result.stdout_data)},
           {"stderr", text(o.start_error.empty() ? o.result.stderr_data : o.start_error + "\n")},
           {"exit_code", st.shell_code()},
           {"signal", st.signaled ? json(st.value) : json(nullptr)},
           {"timed_out", st.timed_out},
           {"output_truncated", o.result.output_truncated},
           {"duration_ms", o.duration_ms}};
    return j;
}

std::vector<std::string> guest_errors(std::vector<std::string> more) {
    for (const char* code : {"sandbox_not_found", "wrong_state", "sandbox_paused", "sandbox_archived", "vm_error"})
        more.push_back(code);
    return more;
}

void check_guest_path(const std::string& path) {
    // NUL first: the messages below quote the path, which a NUL would cut short.
    if (path.find('\0') != std::string::npos) throw ApiError("invalid_path", "the guest path contains a NUL byte");
    if (path.size() > 4096) throw ApiError("invalid_path", "the guest path is longer than 4096 bytes");
    if (path.empty() || path.front() != '/')
        throw ApiError("invalid_path", fmt::format("the guest path \"{}\" must be absolute", path.substr(0, 200)));
    size_t pos = 0;
    while (pos < path.size()) {
        const size_t slash = path.find('/', pos + 1);
        const std::string_view part = std::string_view(path).substr(pos + 1, slash == std::string::npos ? std::string::npos : slash - pos - 1);
        if (part == "..") throw ApiError("invalid_path", fmt::format("the guest path \"{}\" has a .. component", path.substr(0, 200)));
        if (slash == std::string::npos) break;
        pos = slash;
    }
}

std::string guest_path(const http::Request& request, const std::string& name) {
    const auto it = request.query.find(name);
    if (it == request.query.end()) throw ApiError("invalid_field", fmt::format("the query parameter \"{}\" is missing", name));
    check_guest_path(it->second);
    return it->second;
}

std::optional<int64_t> query_integer(const http::Request& request, const std::string& name, int64_t min, int64_t max) {
    const auto it = request.query.find(name);
    if (it == request.query.end()) return std::nullopt;
    const std::string& text = it->second;
    if (text.empty() || text.size() > 18 || text.find_first_not_of("0123456789") != std::string::npos)
        throw ApiError("invalid_field", fmt::format("the query parameter \"{}\" must be a whole number", name));
    const int64_t v = std::stoll(text);
    if (v < min || v > max)
        throw ApiError("out_of_range", fmt::format("the query parameter \"{}\" is {}: it must be from {} to {}", name, v, min, max));
    return v;
}

std::optional<bool> query_bool(const http::Request& request, const std::string& name) {
    const auto it = request.query.find(name);
    if (it == request.query.end()) return std::nullopt;
    if (it->second == "true" || it->second == "1") return true;
    if (it->second == "false" || it->second == "0") return false;
    throw ApiError("invalid_field", fmt::format("the query parameter \"{}\" must be true or false", name));
}

}  // namespace nanovm::daemon
