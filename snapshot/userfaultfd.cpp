#include "snapshot/userfaultfd.hpp"

#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>

#include "vmm/error.hpp"

namespace nanovm::snapshot {

Fd open_userfaultfd() {
    const int fd = static_cast<int>(::syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK));
    if (fd >= 0) return Fd(fd);
    const int syscall_errno = errno;
    Fd dev(::open("/dev/userfaultfd", O_RDWR | O_CLOEXEC));
    if (dev) {
        const int made = ::ioctl(dev.get(), USERFAULTFD_IOC_NEW, O_CLOEXEC | O_NONBLOCK);
        if (made >= 0) return Fd(made);
    }
    throw SysError("userfaultfd", syscall_errno);
}

}  // namespace nanovm::snapshot
