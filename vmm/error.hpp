// nanovm error types: every failure names the operation that failed and, for
// system calls and ioctls, the errno ("KVM_CREATE_VCPU: Invalid argument").
#pragma once

#include <cerrno>
#include <stdexcept>
#include <string>
#include <string_view>

namespace nanovm {

/// Any nanovm failure. what() is a complete one-line message meant for the user.
class Error : public std::runtime_error {
public:
    explicit Error(const std::string& message) : std::runtime_error(message) {}
};

/// A failed system call or ioctl: `op` names it ("KVM_RUN", "memfd_create"),
/// `err` is the errno it returned. what() == "<op>: <strerror(err)>".
class SysError : public Error {
public:
    SysError(std::string_view op, int err);
    /// The errno value of the failed call.
    int code() const noexcept { return code_; }
    /// The operation's name as given to the constructor.
    const std::string& op() const noexcept { return op_; }

private:
    std::string op_;
    int code_;
};

/// Throws SysError(op, errno). Call right after the failing call, before anything
/// else can overwrite errno.
[[noreturn]] void throw_errno(std::string_view op);

}  // namespace nanovm
