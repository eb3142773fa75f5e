// Internal helper for the KVM wrappers: an ioctl that throws SysError naming the
// ioctl on failure ("KVM_CREATE_VCPU: Invalid argument"). Not part of the public API.
#pragma once

#include <sys/ioctl.h>

#include <string_view>

#include "vmm/error.hpp"

namespace nanovm::detail {

/// ioctl(fd, request, arg); returns its non-negative result, or throws
/// SysError(name, errno) if it failed.
template <typename Arg>
int checked_ioctl(int fd, unsigned long request, Arg arg, std::string_view name) {
    const int r = ::ioctl(fd, request, arg);
    if (r < 0) throw_errno(name);
    return r;
}

}  // namespace nanovm::detail
