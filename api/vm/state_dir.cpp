// VM state directories (see state_dir.hpp).
#include "api/vm/state_dir.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "api/vm/paths.hpp"
#include "api/vm/vm_id.hpp"
#include "vmm/error.hpp"
#include "vmm/printable.hpp"

namespace nanovm::vm {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr std::string_view kNewPrefix = ".new-";
constexpr auto kLeftoverAge = std::chrono::minutes(10);

std::string env(const char* name) {
    const char* value = std::getenv(name);
    return value ? value : "";
}

// mkdir -p with `mode` for the directories it creates. Throws Error; where the place
// cannot be written (a read-only file system, as the cache is in the test host; no
// permission), the message says which variable picks another.
void make_dirs(const std::string& path, mode_t mode) {
    std::error_code ec;
    fs::create_directories(path, ec);
    if (ec) {
        const bool unwritable = ec == std::errc::read_only_file_system || ec == std::errc::permission_denied ||
                                ec == std::errc::operation_not_permitted;
        throw Error(fmt::format("run directory {}: {}{}", path, ec.message(),
                                unwritable ? "; set NANOVM_RUN_DIR to a writable directory (in the test host: "
                                             "$NANOVM_SCRATCH/run, which tools/testhost/run sets unless given one)"
                                           : ""));
    }
    ::chmod(path.c_str(), mode);  // best effort: an existing shared dir keeps its mode
}

// Tries to take `fd`'s flock without waiting. Throws SysError for errors other than
// "held by someone else".
bool try_lock(int fd, int operation) {
    for (;;) {
        if (::flock(fd, operation | LOCK_NB) == 0) return true;
        if (errno == EINTR) continue;
        if (errno == EWOULDBLOCK) return false;
        throw_errno("flock");
    }
}

}  // namespace

std::string run_dir() {
    if (std::string dir = env("NANOVM_RUN_DIR"); !dir.empty()) return dir;
    if (std::string xdg = env("XDG_RUNTIME_DIR"); !xdg.empty()) return xdg + "/nanovm";
    return cache_dir() + "/run";
}

RunDir default_run_dir() { return RunDir{fs::absolute(run_dir()).lexically_normal().string()}; }

std::string to_json(const VmInfo& info) {
    return json{{"id", info.id},
                {"pid", info.pid},
                {"cpus", info.cpus},
                {"memory_mib", info.memory_mib},
                {"created_unix_ms", info.created_unix_ms},
                {"image", info.image}}
        .dump();
}

VmInfo parse_vm_info(std::string_view text) {
    json j;
    try {
        j = json::parse(text);
    } catch (const json::exception&) {
        throw Error("vm.json: not JSON");
    }
    if (!j.is_object()) throw Error("vm.json: not a JSON object");
    VmInfo info;
    const auto field = [&j](const char* key, auto& out) {
        auto it = j.find(key);
        if (it == j.end()) throw Error(fmt::format("vm.json: no \"{}\"", key));
        try {
            it->get_to(out);
        } catch (const json::exception&) {
            throw Error(fmt::format("vm.json: \"{}\" has the wrong type", key));
        }
    };
    field("id", info.id);
    field("pid", info.pid);
    field("cpus", info.cpus);
    field("memory_mib", info.memory_mib);
    field("created_unix_ms", info.created_unix_ms);
    field("image", info.image);
    if (!is_vm_id(info.id)) throw Error("vm.json: \"id\" is not a VM id");
    if (info.pid <= 0) throw Error("vm.json: \"pid\" is not a process id");
    return info;
}

void write_vm_info(const std::string& path, const VmInfo& info) {
    const std::string tmp = path + ".tmp";
    const std::string text = to_json(info) + "\n";
    {
        Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
        if (!fd) throw_errno("open " + tmp);
        size_t done = 0;
        while (done < text.size()) {
            const ssize_t n = ::write(fd.get(), text.data() + done, text.size() - done);
            if (n < 0 && errno == EINTR) continue;
            if (n < 0) throw_errno("write " + tmp);
            done += static_cast<size_t>(n);
        }
    }
    if (::rename(tmp.c_str(), path.c_str()) != 0) throw_errno("rename " + tmp);
}

VmInfo read_vm_info(const std::string& path) {
    std::ifstream in(path);
    if (!in) throw SysError("open " + path, errno ? errno : ENOENT);
    std::stringstream text;
    text << in.rdbuf();
    return parse_vm_info(text.str());
}

NewVmDir create_vm_dir(const RunDir& run) {
    const std::string root = run.vms();
    // The longest socket path: the vsock device's guest-initiated listeners are
    // <vsock.sock>_<port> (up to 10 digits).
    const size_t longest = root.size() + 1 + kVmIdLength + std::string("/vsock.sock_4294967295").size();
    if (longest >= sizeof(sockaddr_un{}.sun_path))
        throw Error(fmt::format("run directory {}: too long for the VM's Unix socket paths (at most {} characters "
                                "fit); set NANOVM_RUN_DIR to a shorter path",
                                run.root, sizeof(sockaddr_un{}.sun_path) - 1 - (longest - root.size())));
    make_dirs(root, 0700);
    for (int attempt = 0; attempt < 16; ++attempt) {
        const std::string id = new_vm_id();
        const std::string hidden = root + "/" + std::string(kNewPrefix) + id;
        if (::mkdir(hidden.c_str(), 0700) != 0) {
            if (errno == EEXIST) continue;
            throw Error(fmt::format("mkdir {}: {}", hidden, std::strerror(errno)));
        }
        VmPaths paths{id, hidden};
        Fd lock(::open(paths.lock_file().c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
        if (!lock) throw_errno("open " + paths.lock_file());
        if (::flock(lock.get(), LOCK_EX) != 0) throw_errno("flock " + paths.lock_file());
        const VmPaths final_paths = run.vm(id);
        if (::rename(hidden.c_str(), final_paths.dir.c_str()) != 0) {
            const int err = errno;
            remove_vm_dir(paths);
            if (err == EEXIST || err == ENOTEMPTY) continue;
            throw SysError("rename " + hidden, err);
        }
        return NewVmDir{final_paths, std::move(lock)};
    }
    throw Error("could not pick an unused VM id in 16 tries");
}

NewVmDir lock_vm_dir(const VmPaths& paths) {
    struct stat st {};
    if (::stat(paths.dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) throw Error(fmt::format("no VM {}", paths.id));
    Fd lock(::open(paths.lock_file().c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
    if (!lock) throw_errno("open " + paths.lock_file());
    if (::flock(lock.get(), LOCK_EX | LOCK_NB) != 0) {
        if (errno == EWOULDBLOCK) throw Error(fmt::format("VM {} is still running", paths.id));
        throw_errno("flock " + paths.lock_file());
    }
    return NewVmDir{paths, std::move(lock)};
}

bool vmm_alive(const VmPaths& paths) {
    Fd fd(::open(paths.lock_file().c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd) return false;
    return !try_lock(fd.get(), LOCK_SH);
}

std::vector<VmPaths> list_vm_dirs(const RunDir& run) {
    std::vector<VmPaths> out;
    std::error_code ec;
    for (fs::directory_iterator it(run.vms(), ec), end; !ec && it != end; it.increment(ec)) {
        const std::string name = it->path().filename().string();
        if (is_vm_id(name) && it->is_directory(ec)) out.push_back(run.vm(name));
    }
    std::sort(out.begin(), out.end(), [](const VmPaths& a, const VmPaths& b) { return a.id < b.id; });
    return out;
}

VmPaths find_vm(const RunDir& run, std::string_view text) {
    if (!is_vm_id_prefix(text))
        throw Error(fmt::format("{}: not a VM id ({} hex digits, or a unique prefix)", text, kVmIdLength));
    std::vector<VmPaths> matches;
    for (VmPaths& p : list_vm_dirs(run)) {
        if (p.id.compare(0, text.size(), text) == 0) matches.push_back(std::move(p));
    }
    if (matches.empty()) throw Error(fmt::format("no VM {} (nanovm vm list shows the VMs)", text));
    if (matches.size() > 1) {
        std::string ids;
        for (const VmPaths& p : matches) ids += (ids.empty() ? "" : ", ") + p.id;
        throw Error(fmt::format("{}: ambiguous: matches {}", text, ids));
    }
    return matches.front();
}

void remove_vm_dir(const VmPaths& paths) noexcept {
    std::error_code ec;
    fs::remove_all(paths.dir, ec);
}

std::vector<std::string> file_tail(const std::string& path, size_t max_lines, size_t max_bytes) noexcept {
    try {
        Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
        if (!fd) return {};
        const off_t size = ::lseek(fd.get(), 0, SEEK_END);
        if (size <= 0) return {};
        const off_t window = static_cast<off_t>(std::min<uint64_t>(max_bytes, static_cast<uint64_t>(size)));
        const off_t from = size - window;
        std::string text(static_cast<size_t>(window), '\0');
        const ssize_t n = ::pread(fd.get(), text.data(), text.size(), from);
        if (n <= 0) return {};
        text.resize(static_cast<size_t>(n));
        std::vector<std::string> lines;
        size_t start = 0;
        if (from > 0) {  // the window's first line is cut
            const size_t nl = text.find('\n');
            start = nl == std::string::npos ? text.size() : nl + 1;
        }
        while (start < text.size()) {
            size_t end = text.find('\n', start);
            if (end == std::string::npos) end = text.size();
            lines.push_back(text.substr(start, end - start));
            start = end + 1;
        }
        if (lines.size() > max_lines) lines.erase(lines.begin(), lines.end() - static_cast<ptrdiff_t>(max_lines));
        return lines;
    } catch (...) {
        return {};
    }
}

std::string vmm_log_tail(const VmPaths& paths, size_t max_lines) noexcept {
    std::string out;
    for (const std::string& line : file_tail(paths.vmm_log(), max_lines, 2048)) {
        if (line.empty()) continue;
        if (!out.empty()) out += " | ";
        out += printable(line);  // vmm.log quotes the guest (console lines, device messages)
    }
    return out;
}

bool keep_state_requested() noexcept {
    const char* keep = std::getenv("NANOVM_KEEP_STATE");
    return keep && std::string_view(keep) == "1";
}

bool remove_if_dead(const VmPaths& paths) {
    Fd fd(::open(paths.lock_file().c_str(), O_RDONLY | O_CLOEXEC));
    if (fd && !try_lock(fd.get(), LOCK_EX)) return false;
    // No lock file: a directory made by hand or half removed; it has no VMM either.
    remove_vm_dir(paths);
    return true;
}

namespace {

constexpr const char* kForkUsersLock = "users.lock";

}  // namespace

ForkBase new_fork_base(const RunDir& run, const std::string& parent_id) {
    fs::create_directories(run.forks());
    ForkBase base;
    const std::string top = fmt::format("{}/{}-{}", run.forks(), parent_id, new_vm_id());
    if (::mkdir(top.c_str(), 0700) != 0) throw_errno("mkdir " + top);
    base.dir = top + "/snapshot";
    const std::string lock = top + "/" + kForkUsersLock;
    Fd fd(::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
    if (!fd) throw_errno("open " + lock);
    if (::flock(fd.get(), LOCK_SH) != 0) throw_errno("flock " + lock);
    base.lock = std::move(fd);
    return base;
}

Fd hold_fork_base(const RunDir& run, const std::string& dir) {
    std::error_code ec;
    const fs::path snapshot = fs::weakly_canonical(dir, ec);
    if (ec || snapshot.filename() != "snapshot") return Fd();
    const fs::path forks = fs::weakly_canonical(run.forks(), ec);
    if (ec || snapshot.parent_path().parent_path() != forks) return Fd();
    const std::string lock = (snapshot.parent_path() / kForkUsersLock).string();
    Fd fd(::open(lock.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd) {
        if (errno == ENOENT) return Fd();
        throw_errno("open " + lock);
    }
    if (::flock(fd.get(), LOCK_SH) != 0) throw_errno("flock " + lock);
    return fd;
}

void clean_unused_fork_bases(const RunDir& run) noexcept {
    std::error_code ec;
    for (fs::directory_iterator it(run.forks(), ec), end; !ec && it != end; it.increment(ec)) {
        const std::string lock = (it->path() / kForkUsersLock).string();
        Fd fd(::open(lock.c_str(), O_RDONLY | O_CLOEXEC));
        try {
            if (!fd || !try_lock(fd.get(), LOCK_EX)) continue;  // no lock file: not ours to judge
        } catch (const std::exception&) {
            continue;
        }
        std::error_code rm_ec;
        fs::remove_all(it->path(), rm_ec);
    }
}

namespace {

/// True if the VMM log at `path` says its VM ended in a crash (vmm_process.cpp's
/// "VM <id> ended: crash (...)" line).
bool log_says_crashed(const std::string& path) noexcept {
    std::ifstream in(path);
    std::string line;
    while (std::getline(in, line))
        if (line.find(" ended: crash") != std::string::npos) return true;
    return false;
}

/// Copies a crashed VM's vmm.log and console.log into run.crashed(), then drops the
/// oldest copies beyond kCrashLogsKept VMs. Best effort: clean-up goes on regardless.
void keep_crash_logs(const RunDir& run, const VmPaths& p) noexcept {
    std::error_code ec;
    fs::create_directories(run.crashed(), ec);
    if (ec) return;
    fs::copy_file(p.vmm_log(), run.crashed() + "/" + p.id + "-vmm.log", fs::copy_options::overwrite_existing, ec);
    fs::copy_file(p.console_log(), run.crashed() + "/" + p.id + "-console.log", fs::copy_options::overwrite_existing,
                  ec);
    std::vector<std::pair<fs::file_time_type, std::string>> kept;  // (time, id) per -vmm.log
    for (fs::directory_iterator it(run.crashed(), ec), end; !ec && it != end; it.increment(ec)) {
        const std::string name = it->path().filename().string();
        constexpr std::string_view suffix = "-vmm.log";
        if (name.size() <= suffix.size() || name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
            continue;
        std::error_code t_ec;
        kept.emplace_back(fs::last_write_time(it->path(), t_ec), name.substr(0, name.size() - suffix.size()));
    }
    if (kept.size() <= kCrashLogsKept) return;
    std::sort(kept.begin(), kept.end());
    for (size_t i = 0; i + kCrashLogsKept < kept.size(); ++i) {
        fs::remove(run.crashed() + "/" + kept[i].second + "-vmm.log", ec);
        fs::remove(run.crashed() + "/" + kept[i].second + "-console.log", ec);
    }
}

}  // namespace

std::vector<std::string> clean_stale_vm_dirs(const RunDir& run) {
    clean_unused_fork_bases(run);
    std::vector<std::string> removed;
    for (const VmPaths& p : list_vm_dirs(run)) {
        // A crashed VM's log says so before its VMM exits: copying it while that VMM
        // still holds the lock is harmless (the next clean-up copies it again).
        if (log_says_crashed(p.vmm_log())) keep_crash_logs(run, p);
        if (remove_if_dead(p)) removed.push_back(p.id);
    }
    std::error_code ec;
    const auto now = fs::file_time_type::clock::now();
    for (fs::directory_iterator it(run.vms(), ec), end; !ec && it != end; it.increment(ec)) {
        const std::string name = it->path().filename().string();
        if (name.compare(0, kNewPrefix.size(), kNewPrefix) != 0) continue;
        std::error_code time_ec;
        const auto mtime = fs::last_write_time(it->path(), time_ec);
        if (!time_ec && now - mtime > kLeftoverAge) {
            std::error_code rm_ec;
            fs::remove_all(it->path(), rm_ec);
        }
    }
    return removed;
}

}  // namespace nanovm::vm
