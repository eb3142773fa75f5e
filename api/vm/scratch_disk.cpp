// The sandbox's writable disk (see scratch_disk.hpp).
#include "api/vm/scratch_disk.hpp"

#include <fcntl.h>
#include <linux/fs.h>
#include <spawn.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include <fmt/format.h>

#include "api/vm/paths.hpp"
#include "api/vm/state_dir.hpp"
#include "vmm/error.hpp"
#include "vmm/fd.hpp"

extern char** environ;

namespace nanovm::vm {

namespace fs = std::filesystem;

namespace {

// mkfs.ext4 on $PATH, or in the sbin directories a non-root $PATH often lacks.
std::string find_mkfs() {
    std::string path_list = std::getenv("PATH") ? std::getenv("PATH") : "";
    path_list += ":/usr/sbin:/sbin";
    std::stringstream dirs(path_list);
    for (std::string dir; std::getline(dirs, dir, ':');) {
        if (dir.empty()) continue;
        const std::string candidate = dir + "/mkfs.ext4";
        if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    }
    throw Error("mkfs.ext4 not found (install e2fsprogs): it formats the VMs' writable disk");
}

std::string last_line(const std::string& path) {
    std::ifstream in(path);
    std::string line, last;
    while (std::getline(in, line)) {
        if (!line.empty()) last = line;
    }
    return last.empty() ? "no message" : last;
}

// copy_file_range of [offset, end) from `in` to the same offsets of `out`.
// Copies [offset, end) of `in` to the same offsets of `out`: copy_file_range (in the
// kernel; a reflink or server-side copy where the file system has one), or, where it
// cannot cross file systems (EXDEV: Linux 5.19+ refuses copies between different
// file system types; EOPNOTSUPP, EINVAL), read + write through a 1 MiB buffer.
void copy_range(int in, int out, off_t offset, off_t end, const std::string& from) {
    bool in_kernel = true;
    std::vector<char> buffer;
    while (offset < end) {
        if (in_kernel) {
            loff_t in_off = offset, out_off = offset;
            const ssize_t n = ::copy_file_range(in, &in_off, out, &out_off, static_cast<size_t>(end - offset), 0);
            if (n < 0 && errno == EINTR) continue;
            if (n < 0 && (errno == EXDEV || errno == EOPNOTSUPP || errno == EINVAL || errno == ENOSYS)) {
                in_kernel = false;
                buffer.resize(1 << 20);
                continue;
            }
            if (n < 0) throw_errno("copy_file_range " + from);
            if (n == 0) throw SysError("copy_file_range " + from + " (file shrank)", EIO);
            offset += n;
            continue;
        }
        const size_t want = static_cast<size_t>(std::min<off_t>(end - offset, static_cast<off_t>(buffer.size())));
        const ssize_t got = ::pread(in, buffer.data(), want, offset);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) throw_errno("read " + from);
        if (got == 0) throw SysError("read " + from + " (file shrank)", EIO);
        for (ssize_t done = 0; done < got;) {
            const ssize_t put = ::pwrite(out, buffer.data() + done, static_cast<size_t>(got - done), offset + done);
            if (put < 0 && errno == EINTR) continue;
            if (put <= 0) throw_errno("write (copy of " + from + ")");
            done += put;
        }
        offset += got;
    }
}

}  // namespace

void make_ext4_image(const std::string& path, uint64_t bytes) {
    const std::string mkfs = find_mkfs();
    {
        Fd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
        if (!fd) throw_errno("open " + path);
        if (::ftruncate(fd.get(), static_cast<off_t>(bytes)) != 0) throw_errno("ftruncate " + path);
    }
    const std::string log = path + ".mkfs.log";
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
    const char* argv[] = {mkfs.c_str(), "-q", "-F", "-t", "ext4", "-m", "0", "-L", "nanovm-upper",
                          "-E", "lazy_itable_init=1,lazy_journal_init=1,nodiscard", path.c_str(), nullptr};
    pid_t pid = -1;
    const int err = ::posix_spawn(&pid, mkfs.c_str(), &actions, nullptr, const_cast<char* const*>(argv), environ);
    posix_spawn_file_actions_destroy(&actions);
    if (err != 0) throw SysError("posix_spawn " + mkfs, err);
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR) throw_errno("waitpid mkfs.ext4");
    }
    const std::string message = last_line(log);
    ::unlink(log.c_str());
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        ::unlink(path.c_str());
        throw Error(fmt::format("{} {} failed (status {}): {}", mkfs, path,
                                WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), message));
    }
}

void copy_sparse(const std::string& from, const std::string& to) {
    Fd in(::open(from.c_str(), O_RDONLY | O_CLOEXEC));
    if (!in) throw_errno("open " + from);
    struct stat st {};
    if (::fstat(in.get(), &st) != 0) throw_errno("stat " + from);
    Fd out(::open(to.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
    if (!out) throw_errno("open " + to);
    if (::ioctl(out.get(), FICLONE, in.get()) == 0) return;
    off_t offset = 0;
    for (;;) {
        const off_t data = ::lseek(in.get(), offset, SEEK_DATA);
        if (data < 0 && errno == ENXIO) break;  // only a hole (or nothing) is left
        if (data < 0) throw_errno("lseek SEEK_DATA " + from);
        off_t hole = ::lseek(in.get(), data, SEEK_HOLE);
        if (hole < 0) throw_errno("lseek SEEK_HOLE " + from);
        copy_range(in.get(), out.get(), data, hole, from);
        offset = hole;
        if (offset >= st.st_size) break;
    }
    if (::ftruncate(out.get(), st.st_size) != 0) throw_errno("ftruncate " + to);
}

std::string ensure_scratch_template(const std::vector<std::string>& dirs) {
    for (const std::string& dir : dirs) {
        const std::string path = dir + "/" + kScratchTemplateName;
        struct stat st {};
        if (::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
            static_cast<uint64_t>(st.st_size) == kScratchDiskBytes)
            return path;
    }
    std::string last_error = "no directory to keep it in";
    for (const std::string& dir : dirs) {
        const std::string path = dir + "/" + kScratchTemplateName;
        std::error_code ec;
        fs::create_directories(dir, ec);
        if (ec) {
            last_error = fmt::format("{}: {}", dir, ec.message());
            continue;
        }
        const std::string tmp = fmt::format("{}.{}.tmp", path, ::getpid());
        try {
            make_ext4_image(tmp, kScratchDiskBytes);
        } catch (const Error& e) {
            ::unlink(tmp.c_str());
            last_error = e.what();
            continue;
        }
        if (::rename(tmp.c_str(), path.c_str()) != 0) {
            last_error = fmt::format("rename {}: {}", tmp, std::strerror(errno));
            ::unlink(tmp.c_str());
            continue;
        }
        return path;
    }
    throw Error("cannot make the writable disk's template: " + last_error);
}

std::vector<std::string> default_template_dirs() { return {cache_dir() + "/scratch", run_dir()}; }

void create_scratch_disk(const std::string& path) {
    copy_sparse(ensure_scratch_template(default_template_dirs()), path);
}

}  // namespace nanovm::vm
