#include "devices/virtio/blk/sparse_disk.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include <fmt/format.h>

#include "devices/virtio/blk/blk_spec.hpp"
#include "vmm/error.hpp"
#include "vmm/fd.hpp"

namespace nanovm::virtio::blk {

namespace {

std::string kind_of(mode_t mode) {
    if (S_ISDIR(mode)) return "a directory";
    if (S_ISBLK(mode)) return "a block device";
    if (S_ISCHR(mode)) return "a character device";
    if (S_ISFIFO(mode)) return "a FIFO";
    if (S_ISSOCK(mode)) return "a socket";
    return "not a regular file";
}

void check_existing(const std::string& path, const struct stat& st, uint64_t bytes) {
    if (!S_ISREG(st.st_mode))
        throw Error(fmt::format("scratch disk {}: exists and is {}; refusing to use it", path, kind_of(st.st_mode)));
    if (static_cast<uint64_t>(st.st_size) != bytes)
        throw Error(fmt::format("scratch disk {}: exists with {} bytes, expected {}; refusing to resize it", path,
                                st.st_size, bytes));
}

// An empty regular file (left by a crash between create and ftruncate) holds no
// data: size it.
bool grow_empty(const std::string& path, uint64_t bytes) {
    Fd fd(::open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW));
    if (!fd) throw_errno(fmt::format("open({})", path));
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) throw_errno(fmt::format("fstat({})", path));
    if (!S_ISREG(st.st_mode) || st.st_size != 0) {
        check_existing(path, st, bytes);
        return false;
    }
    if (::ftruncate(fd.get(), static_cast<off_t>(bytes)) != 0) throw_errno(fmt::format("ftruncate({}, {})", path, bytes));
    return true;
}

}  // namespace

bool create_sparse_disk(const std::string& path, uint64_t bytes) {
    if (bytes == 0 || bytes % kSectorSize != 0 || bytes > static_cast<uint64_t>(INT64_MAX))
        throw Error(fmt::format("scratch disk {}: size {} is not a positive multiple of 512 bytes", path, bytes));
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0) {
        if (S_ISREG(st.st_mode) && st.st_size == 0) return grow_empty(path, bytes);
        check_existing(path, st, bytes);  // before open: opening a device node may have effects
        return false;
    }
    if (errno != ENOENT) throw_errno(fmt::format("stat({})", path));
    Fd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600));
    if (!fd) {
        if (errno == EEXIST) {  // created by someone else meanwhile: check what it is
            if (::stat(path.c_str(), &st) != 0) throw_errno(fmt::format("stat({})", path));
            check_existing(path, st, bytes);
            return false;
        }
        throw_errno(fmt::format("open({})", path));
    }
    if (::ftruncate(fd.get(), static_cast<off_t>(bytes)) != 0) {
        const int err = errno;
        ::unlink(path.c_str());
        throw SysError(fmt::format("ftruncate({}, {})", path, bytes), err);
    }
    return true;
}

}  // namespace nanovm::virtio::blk
