#include "snapshot/userfaultfd.hpp"

#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>

#include <fmt/format.h>

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

uint64_t userfaultfd_features() noexcept {
    static const uint64_t offered = [] () -> uint64_t {
        try {
            const Fd uffd = open_userfaultfd();
            return negotiate_userfaultfd(uffd.get(), 0, "probe");
        } catch (const std::exception&) {
            return 0;
        }
    }();
    return offered;
}

uint64_t negotiate_userfaultfd(int uffd, uint64_t features, const char* what) {
    uffdio_api api{};
    api.api = UFFD_API;
    api.features = features;
    if (::ioctl(uffd, UFFDIO_API, &api) != 0) throw SysError(fmt::format("UFFDIO_API ({})", what), errno);
    return api.features;
}

void register_userfaultfd_range(int uffd, void* host, uint64_t bytes, uint64_t mode, uint64_t needed_ioctls,
                                const char* what) {
    uffdio_register reg{};
    reg.range.start = reinterpret_cast<uint64_t>(host);
    reg.range.len = bytes;
    reg.mode = mode;
    if (::ioctl(uffd, UFFDIO_REGISTER, &reg) != 0) throw SysError(fmt::format("UFFDIO_REGISTER ({})", what), errno);
    if ((reg.ioctls & needed_ioctls) != needed_ioctls)
        throw Error(fmt::format("UFFDIO_REGISTER ({}): the kernel does not offer the needed ioctls for guest RAM", what));
}

}  // namespace nanovm::snapshot
