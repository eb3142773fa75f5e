#include "vmm/error.hpp"

#include <cstring>

namespace nanovm {

SysError::SysError(std::string_view op, int err)
    : Error(std::string(op) + ": " + std::strerror(err)), op_(op), code_(err) {}

void throw_errno(std::string_view op) { throw SysError(op, errno); }

}  // namespace nanovm
