// File operations of the agent (see file_ops.hpp).
#include "guest-init/agent/file_ops.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>

namespace nanovm::agent {
namespace {

proto::FileType file_type(mode_t mode) {
    if (S_ISDIR(mode)) return proto::FileType::kDirectory;
    if (S_ISLNK(mode)) return proto::FileType::kSymlink;
    if (S_ISFIFO(mode)) return proto::FileType::kFifo;
    if (S_ISSOCK(mode)) return proto::FileType::kSocket;
    if (S_ISCHR(mode)) return proto::FileType::kCharDevice;
    if (S_ISBLK(mode)) return proto::FileType::kBlockDevice;
    return proto::FileType::kRegular;
}

constexpr int kMaxRemoveDepth = 256;

// Removes `name` in the directory `dir_fd` (AT_FDCWD for a full path), emptying it
// first if it is a directory.
bool remove_tree(int dir_fd, const std::string& name, const std::string& shown, int depth,
                 Failure& failure) {
    struct stat st;
    if (::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
        failure = errno_failure("stat " + shown);
        return false;
    }
    if (S_ISDIR(st.st_mode)) {
        if (depth >= kMaxRemoveDepth) {
            failure = Failure{ELOOP, "remove " + shown + ": too deep"};
            return false;
        }
        const int fd = ::openat(dir_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0) {
            failure = errno_failure("open " + shown);
            return false;
        }
        DIR* dir = ::fdopendir(fd);
        if (dir == nullptr) {
            failure = errno_failure("opendir " + shown);
            ::close(fd);
            return false;
        }
        bool ok = true;
        while (ok) {
            errno = 0;
            const dirent* e = ::readdir(dir);
            if (e == nullptr) {
                if (errno != 0) {
                    failure = errno_failure("readdir " + shown);
                    ok = false;
                }
                break;
            }
            const std::string child = e->d_name;
            if (child == "." || child == "..") continue;
            ok = remove_tree(::dirfd(dir), child, shown + "/" + child, depth + 1, failure);
        }
        ::closedir(dir);
        if (!ok) return false;
        if (::unlinkat(dir_fd, name.c_str(), AT_REMOVEDIR) != 0) {
            failure = errno_failure("rmdir " + shown);
            return false;
        }
        return true;
    }
    if (::unlinkat(dir_fd, name.c_str(), 0) != 0) {
        failure = errno_failure("unlink " + shown);
        return false;
    }
    return true;
}

}  // namespace

std::string absolute_path(const std::string& path) {
    if (!path.empty() && path[0] == '/') return path;
    return "/" + path;
}

proto::FileInfo file_info_from_stat(const struct stat& st) {
    proto::FileInfo info;
    info.type = file_type(st.st_mode);
    info.mode = st.st_mode & 07777;
    info.uid = st.st_uid;
    info.gid = st.st_gid;
    info.size = static_cast<uint64_t>(st.st_size);
    info.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
    return info;
}

bool stat_path(const std::string& path, bool follow_symlinks, proto::FileInfo& out, Failure& failure) {
    struct stat st;
    const int rc = follow_symlinks ? ::stat(path.c_str(), &st) : ::lstat(path.c_str(), &st);
    if (rc != 0) {
        failure = errno_failure("stat " + path);
        return false;
    }
    out = file_info_from_stat(st);
    return true;
}

bool make_directory(const std::string& path, uint32_t mode, bool parents, Failure& failure) {
    if (parents) {
        // Every proper prefix ending before a '/', then the path itself.
        for (size_t slash = path.find('/', 1); slash != std::string::npos; slash = path.find('/', slash + 1)) {
            const std::string prefix = path.substr(0, slash);
            if (prefix.back() == '/') continue;  // "a//b"
            if (::mkdir(prefix.c_str(), mode) != 0 && errno != EEXIST) {
                failure = errno_failure("mkdir " + prefix);
                return false;
            }
        }
    }
    if (::mkdir(path.c_str(), mode) != 0) {
        const int err = errno;
        struct stat st;
        if (parents && err == EEXIST && ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return true;
        failure = Failure{err, "mkdir " + path};
        return false;
    }
    if (::chmod(path.c_str(), mode) != 0) {
        failure = errno_failure("chmod " + path);
        return false;
    }
    return true;
}

bool remove_path(const std::string& path, bool recursive, Failure& failure) {
    if (recursive) return remove_tree(AT_FDCWD, path, path, 0, failure);
    if (::unlink(path.c_str()) == 0) return true;
    if (errno == EISDIR) {
        if (::rmdir(path.c_str()) == 0) return true;
        failure = errno_failure("rmdir " + path);
        return false;
    }
    failure = errno_failure("unlink " + path);
    return false;
}

bool change_mode(const std::string& path, uint32_t mode, Failure& failure) {
    if (::chmod(path.c_str(), mode) == 0) return true;
    failure = errno_failure("chmod " + path);
    return false;
}

DirectoryLister::~DirectoryLister() {
    if (dir_ != nullptr) ::closedir(dir_);
}

bool DirectoryLister::open(const std::string& path, Failure& failure) {
    path_ = path;
    const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
        failure = errno_failure("open " + path);
        return false;
    }
    dir_ = ::fdopendir(fd);
    if (dir_ == nullptr) {
        failure = errno_failure("opendir " + path);
        ::close(fd);
        return false;
    }
    return true;
}

bool DirectoryLister::next_batch(proto::DirEntries& out, size_t max_bytes, Failure& failure) {
    size_t bytes = 4;  // the count
    if (has_pending_) {
        bytes += proto::encoded_size(pending_);
        out.push_back(std::move(pending_));
        has_pending_ = false;
    }
    while (!done_) {
        errno = 0;
        const dirent* e = ::readdir(dir_);
        if (e == nullptr) {
            if (errno != 0) {
                failure = errno_failure("readdir " + path_);
                return false;
            }
            done_ = true;
            break;
        }
        const std::string name = e->d_name;
        if (name == "." || name == "..") continue;
        struct stat st;
        if (::fstatat(::dirfd(dir_), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
        proto::DirEntry entry{name, file_info_from_stat(st)};
        const size_t size = proto::encoded_size(entry);
        if (!out.empty() && bytes + size > max_bytes) {
            pending_ = std::move(entry);
            has_pending_ = true;
            return true;
        }
        bytes += size;
        out.push_back(std::move(entry));
    }
    return true;
}

bool TempFileWriter::open(const std::string& path, uint32_t mode, Failure& failure) {
    struct stat st;
    if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
        failure = Failure{EISDIR, "open " + path};
        return false;
    }
    const size_t slash = path.rfind('/');
    const std::string dir = slash == 0 ? "" : path.substr(0, slash);
    const std::string name = path.substr(slash + 1);
    if (name.empty()) {
        failure = Failure{EISDIR, "open " + path};
        return false;
    }
    // The temp name must fit NAME_MAX (255) whatever the destination's length.
    std::string temp = dir + "/." + name.substr(0, 200) + ".nanovm-XXXXXX";
    const int fd = ::mkostemp(temp.data(), O_CLOEXEC);
    if (fd < 0) {
        failure = errno_failure("create a temp file for " + path);
        return false;
    }
    fd_.reset(fd);
    path_ = path;
    temp_path_ = temp;
    if (::fchmod(fd, mode) != 0) {
        failure = errno_failure("chmod " + temp);
        abort();
        return false;
    }
    return true;
}

bool TempFileWriter::write(std::string_view data, Failure& failure) {
    while (!data.empty()) {
        const ssize_t n = ::write(fd_.get(), data.data(), data.size());
        if (n < 0) {
            if (errno == EINTR) continue;
            failure = errno_failure("write " + path_);
            return false;
        }
        data.remove_prefix(static_cast<size_t>(n));
        size_ += static_cast<uint64_t>(n);
    }
    return true;
}

bool TempFileWriter::commit(bool sync, Failure& failure) {
    if (sync && ::fsync(fd_.get()) != 0) {
        failure = errno_failure("fsync " + path_);
        return false;
    }
    if (::close(fd_.release()) != 0) {
        failure = errno_failure("close " + path_);
        return false;
    }
    if (::rename(temp_path_.c_str(), path_.c_str()) != 0) {
        failure = errno_failure("rename to " + path_);
        return false;
    }
    temp_path_.clear();
    return true;
}

void TempFileWriter::abort() {
    fd_.reset();
    if (!temp_path_.empty()) {
        ::unlink(temp_path_.c_str());
        temp_path_.clear();
    }
}

}  // namespace nanovm::agent
