// Early mounts of PID 1 (see mounts.hpp).
#include "guest-init/mounts.hpp"

#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include "guest-init/console.hpp"

namespace nanovm::guest_init {
namespace {

struct Mount {
    const char* source;
    const char* target;
    const char* fstype;
    unsigned long flags;
    const char* data;
};

// Order matters: /dev before /dev/pts and /dev/shm, /sys before /sys/fs/cgroup.
constexpr unsigned long kNoSuidDev = MS_NOSUID | MS_NODEV;
constexpr Mount kMounts[] = {
    {"devtmpfs", "/dev", "devtmpfs", MS_NOSUID, "mode=0755"},
    {"proc", "/proc", "proc", kNoSuidDev | MS_NOEXEC, nullptr},
    {"sysfs", "/sys", "sysfs", kNoSuidDev | MS_NOEXEC, nullptr},
    {"devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC, "gid=5,mode=0620,ptmxmode=0666"},
    {"tmpfs", "/dev/shm", "tmpfs", kNoSuidDev, "mode=1777"},
    {"tmpfs", "/run", "tmpfs", kNoSuidDev, "mode=0755"},
    {"tmpfs", "/tmp", "tmpfs", kNoSuidDev, "mode=1777"},
    {"cgroup2", "/sys/fs/cgroup", "cgroup2", kNoSuidDev | MS_NOEXEC, "nsdelegate"},
};

struct Link {
    const char* target;
    const char* path;
};

constexpr Link kDevLinks[] = {
    {"/proc/self/fd", "/dev/fd"},
    {"/proc/self/fd/0", "/dev/stdin"},
    {"/proc/self/fd/1", "/dev/stdout"},
    {"/proc/self/fd/2", "/dev/stderr"},
};

// mkdir -p for an absolute path. Returns 0 or an errno.
int make_dirs(const std::string& path, mode_t mode) {
    for (size_t slash = path.find('/', 1);; slash = path.find('/', slash + 1)) {
        const std::string prefix = path.substr(0, slash);
        if (::mkdir(prefix.c_str(), mode) != 0 && errno != EEXIST) return errno;
        if (slash == std::string::npos) return 0;
    }
}

bool mount_one(const Mount& m) {
    if (int err = make_dirs(m.target, 0755); err != 0) {
        log_errno(std::string("mkdir ") + m.target, err);
        return false;
    }
    if (::mount(m.source, m.target, m.fstype, m.flags, m.data) == 0) return true;
    const int err = errno;
    if (err == EBUSY) return true;  // already mounted (e.g. CONFIG_DEVTMPFS_MOUNT)
    log_errno(std::string("mount ") + m.fstype + " on " + m.target, err);
    return false;
}

}  // namespace

int mount_early_filesystems() {
    int failures = 0;
    for (const Mount& m : kMounts) {
        if (!mount_one(m)) ++failures;
    }
    for (const Link& l : kDevLinks) {
        if (::symlink(l.target, l.path) != 0 && errno != EEXIST) {
            const int err = errno;
            log_errno(std::string("symlink ") + l.path, err);
            ++failures;
        }
    }
    return failures;
}

}  // namespace nanovm::guest_init
