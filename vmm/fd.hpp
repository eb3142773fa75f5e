// RAII owner of a file descriptor: the one place nanovm closes fds.
#pragma once

#include <unistd.h>

#include <cerrno>
#include <string_view>
#include <utility>

#include "vmm/error.hpp"

namespace nanovm {

/// Owns one file descriptor (or none: -1). Move-only; closes on destruction.
class Fd {
public:
    Fd() noexcept = default;
    explicit Fd(int fd) noexcept : fd_(fd) {}
    Fd(Fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
    Fd& operator=(Fd&& other) noexcept {
        if (this != &other) reset(std::exchange(other.fd_, -1));
        return *this;
    }
    Fd(const Fd&) = delete;
    Fd& operator=(const Fd&) = delete;
    ~Fd() { reset(); }

    int get() const noexcept { return fd_; }
    bool valid() const noexcept { return fd_ >= 0; }
    explicit operator bool() const noexcept { return valid(); }
    /// Gives up ownership and returns the fd.
    int release() noexcept { return std::exchange(fd_, -1); }
    /// Closes the owned fd (if any) and takes `fd`.
    void reset(int fd = -1) noexcept {
        if (fd_ >= 0) ::close(fd_);
        fd_ = fd;
    }

private:
    int fd_ = -1;
};

/// Writes all of `data` to the blocking fd `fd`, retrying short writes and EINTR.
/// Throws SysError("write").
inline void write_all(int fd, std::string_view data) {
    while (!data.empty()) {
        const ssize_t n = ::write(fd, data.data(), data.size());
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) throw_errno("write");
        data.remove_prefix(static_cast<size_t>(n));
    }
}

}  // namespace nanovm
